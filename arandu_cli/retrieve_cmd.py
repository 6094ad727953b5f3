"""``arandu retrieve --agent ID "query"``: the context string and a table of the ranked facts."""

from __future__ import annotations

from typing import Annotated

import typer

from arandu_cli.output import console, emit_json, table, when
from arandu_cli.target import connected


def validity(valid_from: object, valid_to: object) -> str:
    """``2024-05-01 14:30:00Z -> now`` / ``... -> 2024-06-01 ...``."""
    start = when(valid_from)  # type: ignore[arg-type]
    end = when(valid_to) if valid_to is not None else "now"  # type: ignore[arg-type]
    return f"{start} -> {end}"


def register(app: typer.Typer) -> None:
    """Add ``arandu retrieve`` to ``app``."""

    @app.command("retrieve")
    def retrieve(
        ctx: typer.Context,
        query: Annotated[str, typer.Argument(help="What to remember, in plain words.")],
        agent: Annotated[str, typer.Option("--agent", "-a", help="The agent whose memory is searched.")],
        entity: Annotated[
            list[str] | None,
            typer.Option("--entity", "-e", help="Only facts of this entity (canonical key or alias); repeatable."),
        ] = None,
        as_of: Annotated[
            str | None,
            typer.Option("--as-of", help="What was true at this instant (ISO 8601), instead of now."),
        ] = None,
        session: Annotated[str | None, typer.Option("--session", help="Conversation id (session signals).")] = None,
        limit: Annotated[
            int | None, typer.Option("--limit", min=1, help="At most this many facts (topk_facts).")
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the service's answer as JSON.")] = False,
    ) -> None:
        """Ranked facts and the prompt-ready context for QUERY."""
        with connected(ctx.obj) as client:
            result = client.retrieve(
                agent,
                query,
                entity_keys=entity or None,
                session_id=session,
                as_of=as_of,
                config_overrides={"topk_facts": limit} if limit else None,
            )
        if as_json:
            emit_json(result)
            return
        console.print(result.context or "(no context: nothing relevant is known)", markup=False)
        console.print()
        rows = [
            [
                f"{fact.score:.3f}",
                fact.fact_text,
                fact.entity_key,
                fact.speaker,
                validity(fact.valid_from, fact.valid_to),
            ]
            for fact in result.facts
        ]
        console.print(table(f"{len(result.facts)} fact(s)", ["score", "fact", "entity", "speaker", "valid"], rows))
        for warning in result.warnings:
            console.print(f"warning: {warning}", markup=False)
