"""``arandu entities list --agent ID``: the people, places and things an agent's memory knows."""

from __future__ import annotations

from typing import Annotated

import typer

from arandu_cli.output import console, emit_json, table, when
from arandu_cli.target import connected

entities = typer.Typer(help="An agent's entities.", no_args_is_help=True)


@entities.command("list")
def list_entities(
    ctx: typer.Context,
    agent: Annotated[str, typer.Option("--agent", "-a", help="The agent whose entities these are.")],
    limit: Annotated[int, typer.Option("--limit", min=1, max=500, help="Page size.")] = 50,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Entities to skip.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")] = False,
) -> None:
    """Entities with their type, fact count and when they were last mentioned."""
    with connected(ctx.obj) as client:
        page = client.list_entities(agent, limit=limit, offset=offset)
    if as_json:
        emit_json(page)
        return
    rows = [
        [item.canonical_key, item.display_name, item.entity_type, item.fact_count, when(item.last_seen_at)]
        for item in page.entities
    ]
    title = f"entities {offset + 1}-{offset + len(page.entities)} of {page.total}" if page.entities else "no entities"
    console.print(table(title, ["key", "name", "type", "facts", "last seen"], rows))
