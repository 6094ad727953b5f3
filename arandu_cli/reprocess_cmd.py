"""``arandu reprocess AGENT``: re-derive an agent's whole memory from its event log.

Starts a re-process (the service's current skills and embedder re-derive every fact, entity and
relationship from the agent's messages; retrieval answers from the old memory until the new one
replaces it at once) and, with ``--wait``, follows it to the end. ``--status`` shows the latest
re-process, ``--cancel`` cancels the running one (the live memory stays as it was).
"""

from __future__ import annotations

from typing import Annotated

import typer

from arandu_cli.exit_codes import ExitCode
from arandu_cli.output import console, emit_json, errors, fail, table, when
from arandu_cli.target import connected
from arandu_client import Reprocess, WaitTimeoutError


def show_reprocess(progress: Reprocess) -> None:
    """A re-process as a table."""
    rows = [
        ["re-process", progress.reprocess_id],
        ["agent", progress.agent_id],
        ["status", progress.status],
        ["messages", progress.total],
        ["done", progress.done],
        ["failed", progress.failed],
        ["pending", progress.pending],
        ["catch-up rounds", progress.catch_up_rounds],
        ["re-driven at the switch", progress.requeued],
        ["started at", when(progress.created_at)],
        ["finished at", when(progress.finished_at)],
    ]
    console.print(table(None, ["field", "value"], rows))


def register(app: typer.Typer) -> None:
    """Add ``arandu reprocess`` to ``app``."""

    @app.command("reprocess")
    def reprocess(
        ctx: typer.Context,
        agent: Annotated[str, typer.Argument(help="The agent whose memory is re-derived.")],
        wait: Annotated[bool, typer.Option("--wait", help="Follow the re-process until it switches.")] = False,
        status: Annotated[bool, typer.Option("--status", help="Show the latest re-process; start nothing.")] = False,
        cancel: Annotated[
            bool, typer.Option("--cancel", help="Cancel the running re-process (the live memory is kept).")
        ] = False,
        timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds --wait waits at most.")] = 3600,
        as_json: Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")] = False,
    ) -> None:
        """Re-derive AGENT's memory from its messages with the current model (exit 6 if one is running)."""
        if status and cancel:
            fail("--status and --cancel do not go together")
            raise typer.Exit(ExitCode.USAGE)
        with connected(ctx.obj) as client:
            if status:
                progress = client.reprocess_status(agent)
            elif cancel:
                progress = client.cancel_reprocess(agent)
            else:
                progress = client.reprocess(agent)
                if wait:
                    seen: list[str] = []

                    def report(update: Reprocess) -> None:
                        line = f"{update.status}: {update.done} done, {update.failed} failed, {update.pending} pending"
                        if not as_json and line not in seen:
                            seen.append(line)
                            errors.print(line, markup=False)

                    try:
                        progress = client.wait_for_reprocess(
                            agent, progress.reprocess_id, timeout=timeout, on_progress=report
                        )
                    except WaitTimeoutError as error:
                        fail(str(error))
                        raise typer.Exit(ExitCode.TIMEOUT) from None
        if as_json:
            emit_json(progress)
        else:
            show_reprocess(progress)
        if progress.status == "done" and progress.failed:
            # Switched, but some messages failed: `arandu events failed` lists them.
            raise typer.Exit(ExitCode.FAILED)
