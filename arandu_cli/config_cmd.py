"""``arandu config AGENT [--set FIELD=VALUE ...] [--unset] [--json]``: an agent's memory configuration.

Without options it shows the agent's overrides of the service config (``GET
/v1/agents/{agent}/config``). ``--set`` changes or adds fields and keeps the agent's other
overrides (the API's ``PUT`` replaces them all, so the command reads them first); a value is
read as JSON when it parses (``5``, ``0.4``, ``true``, ``["a"]``, ``{"k": 1}``), else as text.
``--unset`` removes every override (``DELETE``): the agent runs on the service config again.
Changing needs a key with the ``admin`` permission.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from arandu_cli.output import console, emit_json, table, when
from arandu_cli.target import connected
from arandu_client import AgentConfig


def parse_assignment(text: str) -> tuple[str, Any]:
    """``field=value`` as (field, value): the value as JSON when it parses, else the text itself."""
    field, sep, raw = text.partition("=")
    field = field.strip()
    if not sep or not field:
        raise typer.BadParameter(f"expected FIELD=VALUE, got {text!r}", param_hint="--set")
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return field, value


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True) if not isinstance(value, str) else value


def _same(value: Any) -> Any:
    # Sets come back as sorted lists: an override listed in another order is the same value.
    if isinstance(value, list):
        return sorted(json.dumps(item, sort_keys=True) for item in value)
    return value


def show_config(answer: AgentConfig) -> None:
    """Print the agent's overrides beside the value its work runs on."""
    if not answer.overrides:
        console.print(f"Agent {answer.agent_id} has no overrides: it runs on the service config.", markup=False)
        return
    rows = [
        [field, _shown(value), _shown(answer.config_effective.get(field))]
        for field, value in sorted(answer.overrides.items())
    ]
    title = f"Overrides of agent {answer.agent_id} (updated {when(answer.updated_at)})"
    console.print(table(title, ["field", "override", "effective"], rows))
    ignored = [
        field for field, value in answer.overrides.items() if _same(answer.config_effective.get(field)) != _same(value)
    ]
    if ignored:
        # The service config changed since they were put and no longer accepts them.
        console.print(
            "The effective value differs for "
            + ", ".join(sorted(ignored))
            + ": the service config no longer accepts these overrides, the agent runs on the service config.",
            markup=False,
        )


def register(app: typer.Typer) -> None:
    """Add ``arandu config`` to ``app``."""

    @app.command("config")
    def config(
        ctx: typer.Context,
        agent: Annotated[str, typer.Argument(help="The agent whose memory configuration this is.")],
        assignments: Annotated[
            list[str] | None,
            typer.Option(
                "--set",
                metavar="FIELD=VALUE",
                help="Override one MemoryConfig field (repeatable); the agent's other overrides are kept.",
            ),
        ] = None,
        unset: Annotated[
            bool, typer.Option("--unset", help="Remove every override: the agent runs on the service config.")
        ] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print the service's answer as JSON.")] = False,
    ) -> None:
        """Show, change or remove the agent's overrides of the service's memory configuration."""
        changes = dict(parse_assignment(item) for item in assignments or [])
        if changes and unset:
            raise typer.BadParameter("use either --set or --unset", param_hint="--unset")
        with connected(ctx.obj) as client:
            if unset:
                answer = client.reset_agent_config(agent)
            elif changes:
                current = client.get_agent_config(agent).overrides
                answer = client.set_agent_config(agent, {**current, **changes})
            else:
                answer = client.get_agent_config(agent)
        if as_json:
            emit_json(answer)
        else:
            show_config(answer)
