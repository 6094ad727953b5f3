"""``arandu doctor``: is every part of the deployment up, and if not, what to do about it."""

from __future__ import annotations

from typing import Annotated

import typer

from arandu_cli.doctor_checks import run_checks
from arandu_cli.exit_codes import ExitCode
from arandu_cli.output import console, emit_json, table
from arandu_cli.target import Target, load_cli_settings_and_stack

_MARKS = {"ok": "ok", "failed": "FAILED", "skipped": "skipped", "unknown": "unknown"}


def register(app: typer.Typer) -> None:
    """Add ``arandu doctor`` to ``app``."""

    @app.command("doctor")
    def doctor(
        ctx: typer.Context,
        flower_url: Annotated[
            str | None,
            typer.Option("--flower-url", help="Flower's URL (default: http://ARANDU_FLOWER_HOST:ARANDU_FLOWER_PORT)."),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
    ) -> None:
        """Check the database, broker, workers of each queue, Beat, Flower and the API (exit 1 if any fails)."""
        target: Target = ctx.obj
        settings, stack = load_cli_settings_and_stack()
        url, key = target.resolved()
        checks = run_checks(settings, url, key, flower_url, stack)
        healthy = all(check.ok for check in checks)
        if as_json:
            emit_json(
                {
                    "healthy": healthy,
                    "checks": [{"name": c.name, "state": c.state, "detail": c.detail, "fix": c.fix} for c in checks],
                }
            )
        else:
            rows = [[_MARKS[check.state], check.name, check.detail] for check in checks]
            console.print(table(None, ["", "check", "detail"], rows))
            fixes = [check for check in checks if check.state == "failed"]
            if fixes:
                console.print("\nwhat to fix:", markup=False)
                for check in fixes:
                    console.print(f"  - {check.name}: {check.fix or check.detail}", markup=False)
            else:
                console.print("\neverything answers.", markup=False)
        if not healthy:
            raise typer.Exit(ExitCode.FAILED)
