"""``arandu events show ID`` and ``arandu events retry ID``: one message's processing; ``arandu events failed``
and ``arandu events retry-failed``: an agent's failed messages, listed by page and re-driven in bulk."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from arandu_cli.exit_codes import ExitCode
from arandu_cli.output import console, emit_json, fail, table, when
from arandu_cli.target import connected
from arandu_client import ConflictError

events = typer.Typer(
    help="A message's processing: show it, retry it; an agent's failed messages: list, retry.", no_args_is_help=True
)


@events.command("show")
def show(
    ctx: typer.Context,
    event_id: Annotated[str, typer.Argument(help="The event id (from a 202 answer or an import's failures).")],
    agent: Annotated[str | None, typer.Option("--agent", "-a", help="Only if it belongs to this agent.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the event as JSON.")] = False,
) -> None:
    """Status, stage, attempts, last error and result of one event."""
    with connected(ctx.obj) as client:
        status = client.event(event_id, agent_id=agent)
    if as_json:
        emit_json(status)
        return
    rows: list[list[Any]] = [
        ["event", status.event_id],
        ["agent", status.agent_id],
        ["status", status.status],
        ["stage", status.stage],
        ["attempts", status.attempts],
        ["error", status.error],
        ["message id", status.message_id],
        ["import", status.import_id],
        ["occurred at", when(status.occurred_at)],
        ["received at", when(status.created_at)],
        ["finished at", when(status.finished_at)],
    ]
    if status.result:
        written = {key: len(value) for key, value in status.result.items() if isinstance(value, list)}
        rows.append(["result", ", ".join(f"{key} {count}" for key, count in written.items()) or "-"])
    console.print(table(None, ["field", "value"], rows))


@events.command("retry")
def retry(
    ctx: typer.Context,
    event_id: Annotated[str, typer.Argument(help="A failed event (or a done one, with --from-scratch).")],
    from_scratch: Annotated[
        bool, typer.Option("--from-scratch", help="Re-process a done event from the event log (after a model change).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")] = False,
) -> None:
    """Run a failed event's pipeline again (exit 6 when it is not failed)."""
    with connected(ctx.obj) as client:
        try:
            accepted = client.retry_event(event_id, from_scratch=from_scratch)
        except ConflictError:
            # The API's hint speaks of its JSON body; on the command line the same thing is a flag.
            if from_scratch or client.event(event_id).status != "done":
                raise
            fail(
                f"event {event_id} is done, not failed: only a failed event is retried; to re-process it "
                f"from the event log: arandu events retry {event_id} --from-scratch"
            )
            raise typer.Exit(ExitCode.CONFLICT) from None
    if as_json:
        emit_json(accepted)
        return
    console.print(f"event {accepted.event_id} queued again from stage {accepted.start_stage}", markup=False)


Agent = Annotated[str, typer.Option("--agent", "-a", help="The agent whose events these are.")]


@events.command("failed")
def failed(
    ctx: typer.Context,
    agent: Agent,
    limit: Annotated[int, typer.Option("--limit", min=1, max=200, help="Events per page.")] = 50,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="The next page's cursor, from a previous page.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the page as JSON.")] = False,
) -> None:
    """The agent's failed events, newest first, with the stage and error (one page; --cursor for the next)."""
    with connected(ctx.obj) as client:
        page = client.list_events(agent, status="failed", cursor=cursor, limit=limit)
    if as_json:
        emit_json(page)
        return
    rows: list[list[Any]] = [
        [event.event_id, event.stage, event.attempts, when(event.occurred_at), (event.error or "")[:80]]
        for event in page.events
    ]
    console.print(table(f"failed events of {agent}", ["event", "stage", "attempts", "occurred at", "error"], rows))
    if page.next_cursor:
        console.print(f"next page: --cursor '{page.next_cursor}'", markup=False)


@events.command("retry-failed")
def retry_failed(
    ctx: typer.Context,
    agent: Agent,
    event_ids: Annotated[list[str] | None, typer.Argument(help="Failed events to re-drive (default: all).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")] = False,
) -> None:
    """Re-drive the agent's failed events (all of them, or EVENT_IDS), each from the stage that failed."""
    with connected(ctx.obj) as client:
        retried = client.retry_failed_events(agent, event_ids or None)
    if as_json:
        emit_json(retried)
        return
    stages = ", ".join(f"{count} from {stage}" for stage, count in sorted(retried.by_stage.items())) or "none"
    console.print(f"{retried.retried} failed event(s) of {agent} queued again ({stages})", markup=False)
    if retried.not_retried:
        console.print(f"not failed (or not the agent's): {', '.join(retried.not_retried)}", markup=False)
    if retried.remaining:
        console.print(f"{retried.remaining} failed event(s) left: run it again", markup=False)
