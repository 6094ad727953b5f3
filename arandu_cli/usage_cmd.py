"""``arandu usage --agent ID [--since DAY] [--until DAY] [--json]``: the LLM calls and tokens spent on an agent.

Totals over the range, then a table per UTC day and one per skill (and model). Days are
``YYYY-MM-DD``, both ends included; without them the last 30 days.
"""

from __future__ import annotations

from typing import Annotated

import typer

from arandu_cli.output import console, emit_json, table
from arandu_cli.target import connected
from arandu_client import AgentUsage
from arandu_client.models import UsageCounts

_COLUMNS = ("calls", "failures", "input tokens", "cached input", "output tokens")


def _numbers(counts: UsageCounts) -> list[str]:
    return [
        f"{counts.calls:,}",
        f"{counts.failures:,}",
        f"{counts.input_tokens:,}",
        f"{counts.cached_input_tokens:,}",
        f"{counts.output_tokens:,}",
    ]


def show_usage(usage: AgentUsage) -> None:
    """Print the totals line, the per-day table and the per-skill table."""
    totals = usage.totals
    console.print(
        f"LLM usage of agent {usage.agent_id} from {usage.since} to {usage.until} (UTC days): "
        f"{totals.calls:,} calls, {totals.input_tokens:,} input tokens "
        f"({totals.cached_input_tokens:,} cached), {totals.output_tokens:,} output tokens, "
        f"{totals.failures:,} failures",
        markup=False,
    )
    if not usage.by_day:
        return
    console.print(table("By day", ("day", *_COLUMNS), ([str(day.day), *_numbers(day)] for day in usage.by_day)))
    console.print(
        table(
            "By skill",
            ("skill", "model", *_COLUMNS),
            ([item.skill, item.model or "-", *_numbers(item)] for item in usage.by_skill),
        )
    )


def register(app: typer.Typer) -> None:
    """Add ``arandu usage`` to ``app``."""

    @app.command("usage")
    def usage(
        ctx: typer.Context,
        agent: Annotated[str, typer.Option("--agent", "-a", help="The agent whose LLM usage is shown.")],
        since: Annotated[
            str | None, typer.Option("--since", help="First UTC day, YYYY-MM-DD (default: 29 days before --until).")
        ] = None,
        until: Annotated[str | None, typer.Option("--until", help="Last UTC day, YYYY-MM-DD (default: today).")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the service's answer as JSON.")] = False,
    ) -> None:
        """LLM calls and tokens spent on the agent: totals, per day and per skill."""
        with connected(ctx.obj) as client:
            answer = client.usage(agent, since=since, until=until)
        if as_json:
            emit_json(answer)
        else:
            show_usage(answer)
