"""``arandu import FILE --agent ID``: send a conversation history in chunks and follow it to the end.

1. The whole file is read and checked first: a malformed line stops the command with its
   line number and reason, and nothing is sent.
2. Messages go to ``POST /v1/agents/{agent}/imports`` in chunks of ``--chunk`` (one import
   each). Messages without ``message_id`` get a stable one (content + position), so running
   the same command again creates nothing new: the service counts those as duplicates.
3. The progress endpoint of every import (and, for messages the agent already had, their
   events looked up by message id) feeds a progress bar until every message is done or failed.

Exit 0 only when every message is done; 1 with the failed event ids and their errors.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, cast

import typer

from arandu_cli.exit_codes import ExitCode
from arandu_cli.import_source import (
    Format,
    MalformedFileError,
    Problem,
    SourceMessage,
    check_file,
    guess_format,
    read_messages,
    spool_stdin,
)
from arandu_cli.import_view import ProgressView, clock
from arandu_cli.import_watch import Counts, FailedMessage, ImportWatch
from arandu_cli.output import console, emit_json, errors, fail, note, table
from arandu_cli.target import Target, connected
from arandu_client import ApiError, AranduClient, InvalidRequestError, Message, PayloadTooLargeError

MAX_CHUNK = 10_000
POLL_INTERVAL_S = 0.5
_FIELD = re.compile(r"^body\.messages\[(\d+)\]\.?(.*)$")


@dataclass(frozen=True)
class Options:
    """What the command was asked to do."""

    agent_id: str
    label: str
    fmt: Format
    chunk: int
    timeout_s: float
    as_json: bool


def _chunks(path: Path, fmt: Format, size: int) -> Iterator[list[SourceMessage | Problem]]:
    batch: list[SourceMessage | Problem] = []
    for item in read_messages(path, fmt):
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def sent_so_far(watch: ImportWatch, next_line: int | None) -> str:
    """What reached the service before the command stopped, and where to pick up."""
    if not watch.chunks:
        return "nothing was sent"
    messages = sum(len(chunk.message_lines) for chunk in watch.chunks)
    last = watch.chunks[-1].last_line
    tail = f"; nothing from line {next_line} on was sent" if next_line is not None else ""
    return (
        f"lines 1-{last} ({messages} messages, {len(watch.chunks)} import(s)) were sent "
        f"and keep being processed{tail}; run the same command again to go on: what was sent is not created twice"
    )


def _refusal(error: ApiError, batch: list[SourceMessage]) -> str:
    """The service's 422/413 with ``body.messages[i]`` turned into the file's line numbers."""
    reasons: list[str] = []
    for item in error.details:
        match = _FIELD.match(item.field)
        if match and int(match.group(1)) < len(batch):
            field = f" {match.group(2)}" if match.group(2) else ""
            reasons.append(f"line {batch[int(match.group(1))].line}{field}: {item.message}")
        else:
            reasons.append(f"{item.field}: {item.message}" if item.field else item.message)
    return "; ".join(reasons[:10]) or error.message


def _send(client: AranduClient, watch: ImportWatch, view: ProgressView, options: Options, path: Path) -> None:
    sent = 0
    last_poll = 0.0
    for batch in _chunks(path, options.fmt, options.chunk):
        problems = [item for item in batch if isinstance(item, Problem)]
        messages = [item for item in batch if isinstance(item, SourceMessage)]
        if problems:  # the file changed after it was checked
            fail(f"{problems[0]}; {sent_so_far(watch, messages[0].line if messages else problems[0].line)}")
            raise typer.Exit(ExitCode.USAGE)
        try:
            accepted = client.start_import(options.agent_id, cast(list[Message], [item.body for item in messages]))
        except (InvalidRequestError, PayloadTooLargeError) as error:
            fail(
                f"the service refused the chunk of lines {messages[0].line}-{messages[-1].line} "
                f"({error.status}): {_refusal(error, messages)}; {sent_so_far(watch, messages[0].line)}"
            )
            raise typer.Exit(ExitCode.USAGE) from None
        except Exception:
            note(f"stopped while sending lines {messages[0].line}-{messages[-1].line}: {sent_so_far(watch, None)}")
            raise
        lines = {item.message_id: item.line for item in messages}
        watch.add_chunk(accepted, lines, messages[0].line, messages[-1].line)
        sent += len(messages)
        view.sent(sent, len(watch.chunks))
        if time.monotonic() - last_poll >= POLL_INTERVAL_S * 4:
            view.processed(watch.poll(), watch.rate)
            last_poll = time.monotonic()


def _follow(watch: ImportWatch, view: ProgressView, timeout_s: float) -> bool:
    """Poll until every message is finished; False when ``timeout_s`` (> 0) ran out first."""
    deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
    while True:
        counts = watch.poll()
        if watch.finished:
            view.processed(counts, watch.rate, final=True)
            return True
        view.processed(counts, watch.rate)
        if deadline is not None and time.monotonic() >= deadline:
            view.processed(counts, watch.rate, final=True)
            return False
        time.sleep(POLL_INTERVAL_S)


def _report(
    options: Options, watch: ImportWatch, counts: Counts, failed: list[FailedMessage], status: str, elapsed: float
) -> None:
    if options.as_json:
        emit_json(
            {
                "status": status,
                "agent_id": options.agent_id,
                "file": options.label,
                "messages": counts.total,
                "new": counts.new,
                "already_imported": counts.earlier,
                "done": counts.done,
                "failed": counts.failed,
                "pending": counts.pending,
                "import_ids": [chunk.import_id for chunk in watch.chunks],
                "failed_events": [item.__dict__ for item in failed],
                "elapsed_s": round(elapsed, 3),
            }
        )
        return
    console.print(
        f"{options.label} -> agent {options.agent_id}: {counts.total} messages "
        f"({counts.new} new, {counts.earlier} already imported) in {len(watch.chunks)} import(s), {clock(elapsed)}",
        markup=False,
    )
    console.print(f"done {counts.done}, failed {counts.failed}, pending {counts.pending}", markup=False)
    if failed:
        rows: list[list[Any]] = [[item.event_id, item.line, item.stage, item.error] for item in failed]
        console.print(table("failed messages", ["event id", "line", "stage", "error"], rows))
        console.print("retry one with: arandu events retry EVENT_ID", markup=False)


def run_import(target: Target, source: str, options: Options) -> None:
    """The whole command: check, send, follow, report; exits with the documented code."""
    spooled = spool_stdin() if source == "-" else None
    path = spooled or Path(source)
    try:
        if spooled is None and not path.is_file():
            fail(f"no such file: {source}")
            raise typer.Exit(ExitCode.USAGE)
        try:
            summary = check_file(path, options.fmt)
        except MalformedFileError as error:
            for problem in error.problems:
                fail(f"{options.label} {problem}")
            more = " (showing the first 20)" if len(error.problems) >= 20 else ""
            note(f"{len(error.problems)} malformed line(s){more}: nothing was sent")
            raise typer.Exit(ExitCode.USAGE) from None
        if summary.repeated_ids:
            note(f"{summary.repeated_ids} message(s) repeat a message_id of an earlier line: they are stored once")
        started = time.monotonic()
        with connected(target) as client:
            watch = ImportWatch(client, options.agent_id)
            try:
                with ProgressView(errors, summary.messages) as view:
                    _send(client, watch, view, options, path)
                    finished = _follow(watch, view, options.timeout_s)
            except KeyboardInterrupt:
                note(f"interrupted: {sent_so_far(watch, None)}")
                raise typer.Exit(ExitCode.INTERRUPTED) from None
            counts = watch.counts()
            failed = watch.failed_messages() if counts.failed else []
        status = "done" if finished and not counts.failed else ("failed" if counts.failed else "timeout")
        _report(options, watch, counts, failed, status, time.monotonic() - started)
        if not finished:
            note(
                f"{counts.pending} message(s) still pending after {options.timeout_s:g} s; "
                "run the command again to follow them"
            )
            raise typer.Exit(ExitCode.TIMEOUT)
        if counts.failed:
            raise typer.Exit(ExitCode.FAILED)
    finally:
        if spooled is not None:
            spooled.unlink(missing_ok=True)


def register(app: typer.Typer) -> None:
    """Add ``arandu import`` to ``app``."""

    @app.command("import")
    def import_file(
        ctx: typer.Context,
        file: Annotated[str, typer.Argument(help="NDJSON or JSON file of messages; - reads standard input.")],
        agent: Annotated[str, typer.Option("--agent", "-a", help="The agent whose memory receives the messages.")],
        fmt: Annotated[
            str | None,
            typer.Option("--format", "-f", help="ndjson or json (default: json for *.json files, else ndjson)."),
        ] = None,
        chunk: Annotated[
            int, typer.Option("--chunk", min=1, max=MAX_CHUNK, help="Messages per import request (1 to 10,000).")
        ] = 1000,
        timeout: Annotated[
            float, typer.Option("--timeout", min=0, help="Stop following after this many seconds (0: no limit).")
        ] = 0,
        as_json: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")] = False,
    ) -> None:
        """Import a dated conversation history and follow it until every message is processed.

        Each message: message, speaker_name, occurred_at (ISO 8601), optional message_id and
        session_id. Re-running the same file creates nothing new.
        """
        chosen = fmt or guess_format(file)
        if chosen not in ("ndjson", "json"):
            fail(f"--format must be ndjson or json, not {chosen!r}")
            raise typer.Exit(ExitCode.USAGE)
        options = Options(
            agent_id=agent,
            label="<stdin>" if file == "-" else file,
            fmt="json" if chosen == "json" else "ndjson",
            chunk=chunk,
            timeout_s=timeout,
            as_json=as_json,
        )
        run_import(ctx.obj, file, options)
