"""``arandu facts list|get|delete``: read and remove an agent's facts."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from arandu_cli.exit_codes import ExitCode
from arandu_cli.output import console, emit_json, fail, table, when
from arandu_cli.retrieve_cmd import validity
from arandu_cli.target import connected

facts = typer.Typer(help="An agent's facts: list, get, delete.", no_args_is_help=True)

Agent = Annotated[str, typer.Option("--agent", "-a", help="The agent whose facts these are.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")]


@facts.command("list")
def list_facts(
    ctx: typer.Context,
    agent: Agent,
    entity: Annotated[
        list[str] | None, typer.Option("--entity", "-e", help="Only facts of this entity; repeatable.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500, help="Page size.")] = 50,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Facts to skip.")] = 0,
    as_json: AsJson = False,
) -> None:
    """Active facts, newest first."""
    with connected(ctx.obj) as client:
        page = client.list_facts(agent, limit=limit, offset=offset, entity_keys=entity or None)
    if as_json:
        emit_json(page)
        return
    rows: list[list[Any]] = [
        [fact.fact_id, fact.fact_text, fact.entity_key, fact.speaker, validity(fact.valid_from, fact.valid_to)]
        for fact in page.facts
    ]
    title = (
        f"facts {offset + 1}-{offset + len(page.facts)} of {page.total}" if page.facts else f"no facts ({page.total})"
    )
    console.print(table(title, ["fact id", "fact", "entity", "speaker", "valid"], rows))


@facts.command("get")
def get_fact(
    ctx: typer.Context,
    fact_id: Annotated[str, typer.Argument(help="The fact id.")],
    agent: Agent,
    as_json: AsJson = False,
) -> None:
    """One fact with its validity window and provenance (superseded ones too)."""
    with connected(ctx.obj) as client:
        fact = client.get_fact(agent, fact_id)
    if as_json:
        emit_json(fact)
        return
    rows: list[list[Any]] = [
        ["fact", fact.fact_text],
        ["entity", f"{fact.entity_key} ({fact.entity_name or '-'})"],
        ["attribute", fact.attribute_key],
        ["speaker", fact.speaker],
        ["valid", validity(fact.valid_from, fact.valid_to)],
        ["active", "yes" if fact.is_active else f"no (invalidated {when(fact.invalidated_at)})"],
        ["confidence", f"{fact.confidence:.2f}"],
        ["importance", f"{fact.importance:.2f}"],
        ["source event", fact.source_event_id],
        ["supersedes", fact.supersedes_fact_id],
        ["created", when(fact.created_at)],
    ]
    console.print(table(fact.fact_id, ["field", "value"], rows))


@facts.command("delete")
def delete_fact(
    ctx: typer.Context,
    agent: Agent,
    fact_id: Annotated[str | None, typer.Argument(help="The fact to delete (or --all).")] = None,
    delete_all: Annotated[bool, typer.Option("--all", help="Delete every fact of the agent.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before deleting everything.")] = False,
    as_json: AsJson = False,
) -> None:
    """Delete one fact for good, or every fact of the agent with --all."""
    if (fact_id is None) == (not delete_all):
        fail("give a FACT_ID or --all (not both)")
        raise typer.Exit(ExitCode.USAGE)
    if delete_all and not yes and not typer.confirm(f"delete every fact of agent {agent}?", err=True):
        raise typer.Exit(ExitCode.FAILED)
    with connected(ctx.obj) as client:
        if fact_id is not None:
            client.delete_fact(agent, fact_id)
            deleted = 1
        else:
            deleted = client.delete_all_facts(agent)
    if as_json:
        emit_json({"deleted": deleted})
        return
    console.print(f"deleted {deleted} fact(s)", markup=False)
