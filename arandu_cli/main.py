"""The ``arandu`` console script: one typer app, one module per command group.

Global options (before the command): ``--url`` / ``ARANDU_URL`` and ``--api-key`` /
``ARANDU_API_KEY``; everything else comes from the service's own ``ARANDU_*`` settings.
"""

from __future__ import annotations

from typing import Annotated

import typer

from arandu_cli import config_cmd, doctor_cmd, import_cmd, mcp_cmd, reprocess_cmd, retrieve_cmd, usage_cmd
from arandu_cli.agents_cmd import agents
from arandu_cli.db_cmd import db
from arandu_cli.entities_cmd import entities
from arandu_cli.events_cmd import events
from arandu_cli.facts_cmd import facts
from arandu_cli.jobs_cmd import jobs
from arandu_cli.keys_cmd import keys
from arandu_cli.target import DEFAULT_TIMEOUT_S, Target

app = typer.Typer(
    name="arandu",
    help="arandu: long-term memory for AI agents (imports, retrieval, memory, jobs, health checks, MCP server).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def options(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Option(
            "--url", envvar="ARANDU_URL", help="API base URL (default: http://ARANDU_API_HOST:ARANDU_API_PORT)."
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            envvar="ARANDU_API_KEY",
            help="API key (default: the first of ARANDU_API_KEYS, else $ARANDU_HOME/dev-api-key).",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--http-timeout", min=1, help="Seconds to wait for each API answer.")
    ] = DEFAULT_TIMEOUT_S,
) -> None:
    """Where the API is and which key to use."""
    ctx.obj = Target(url=url, api_key=api_key, timeout_s=timeout)


import_cmd.register(app)
retrieve_cmd.register(app)
usage_cmd.register(app)
config_cmd.register(app)
reprocess_cmd.register(app)
app.add_typer(events, name="events")
app.add_typer(facts, name="facts")
app.add_typer(entities, name="entities")
app.add_typer(jobs, name="jobs")
app.add_typer(agents, name="agents")
app.add_typer(keys, name="keys")
app.add_typer(db, name="db")
doctor_cmd.register(app)
mcp_cmd.register(app)


def main() -> None:
    """Entry point of the ``arandu`` console script."""
    app()


if __name__ == "__main__":
    main()
