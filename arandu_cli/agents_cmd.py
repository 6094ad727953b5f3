"""``arandu agents erase --agent ID``: erase an agent's whole memory, for good.

Asks first: the prompt says what goes (its messages and everything derived from them, with the
agent's current fact and entity counts) and wants the agent id typed back; ``--yes`` skips it
(scripts). Prints the rows deleted per table, or the API's answer with ``--json``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from arandu_cli.exit_codes import ExitCode
from arandu_cli.output import console, emit_json, errors, fail, table
from arandu_cli.target import connected
from arandu_client import AranduClient

agents = typer.Typer(help="Whole agents: erase one's memory for good.", no_args_is_help=True)

Agent = Annotated[str, typer.Option("--agent", "-a", help="The agent to erase.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")]

WHAT_GOES = (
    "its messages (events) and everything derived from them: pipeline runs and stage outputs, facts, "
    "entity links, entities, aliases, relationships, observations, clusters, maintenance job runs, "
    "imports and usage counters"
)


def _confirmed(client: AranduClient, agent: str) -> bool:
    """Show what erasing ``agent`` deletes and ask for its id typed back; True when it was."""
    facts = client.list_facts(agent, limit=1).total
    entities = client.list_entities(agent, limit=1).total
    errors.print(f"Erasing agent {agent} deletes, for good, {WHAT_GOES}.", markup=False)
    errors.print(f"Now it has {facts} active fact(s) and {entities} entity(ies).", markup=False)
    typed = typer.prompt("Type the agent id to erase it", default="", show_default=False, err=True)
    return bool(typed.strip() == agent)


@agents.command("erase")
def erase(
    ctx: typer.Context,
    agent: Agent,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before erasing.")] = False,
    as_json: AsJson = False,
) -> None:
    """Erase everything of the agent (asks for its id unless --yes); prints the rows deleted per table."""
    with connected(ctx.obj) as client:
        if not yes and not _confirmed(client, agent):
            fail(f"not erased: the id typed was not {agent!r}")
            raise typer.Exit(ExitCode.FAILED)
        erased = client.erase_agent(agent)
    if as_json:
        emit_json(erased)
        return
    rows: list[list[Any]] = [[name, count] for name, count in sorted(erased.deleted.items())]
    console.print(table(f"agent {agent} erased: {erased.total} row(s)", ["table", "rows deleted"], rows))
    if erased.indexes_dropped:
        console.print("its own search indexes were dropped", markup=False)
