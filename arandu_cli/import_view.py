"""How an import's progress is shown: a live rich bar on a terminal, plain lines otherwise.

Both go to stderr, so ``--json`` output on stdout stays one clean document. In a log or a
pipe a line is printed when the counts change, at most once every ``every_s`` seconds, and
always at the end.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Self

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from arandu_cli.import_watch import Counts, Rate


def clock(seconds: float | None) -> str:
    """``1:02:03`` / ``2:03``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def describe(counts: Counts, rate: Rate) -> str:
    """``done 120  failed 0  pending 380  35.2 msg/s  ETA 0:11``."""
    pace = rate.per_second
    shown = "?" if pace is None else f"{pace:.1f}"
    return (
        f"done {counts.done}  failed {counts.failed}  pending {counts.pending}  "
        f"{shown} msg/s  ETA {clock(rate.eta_s(counts.pending))}"
    )


class ProgressView:
    """Sending and processing progress of one ``arandu import`` run."""

    def __init__(self, console: Console, file_messages: int, *, every_s: float = 1.0) -> None:
        self.console = console
        self.file_messages = file_messages
        self.every_s = every_s
        self.live = console.is_terminal
        self._last_line = ""
        self._last_at = 0.0
        self._progress: Progress | None = None
        self._sending: TaskID | None = None
        self._processing: TaskID | None = None

    def __enter__(self) -> Self:
        if self.live:
            self._progress = Progress(
                TextColumn("{task.description:<10}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
                console=self.console,
                refresh_per_second=4,
            )
            self._progress.start()
            self._sending = self._progress.add_task("sent", total=self.file_messages, stats="")
            self._processing = self._progress.add_task("processed", total=None, stats="")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()

    def sent(self, messages: int, chunks: int) -> None:
        """``messages`` of the file were handed to the service in ``chunks`` imports."""
        if self._progress is not None and self._sending is not None:
            self._progress.update(self._sending, completed=messages, stats=f"{chunks} import(s)")
        else:
            self.console.print(f"sent {messages}/{self.file_messages} messages ({chunks} import(s))", markup=False)

    def processed(self, counts: Counts, rate: Rate, *, final: bool = False) -> None:
        """The latest counts; ``final`` forces a plain line out."""
        stats = describe(counts, rate)
        if self._progress is not None and self._processing is not None:
            self._progress.update(self._processing, total=counts.total, completed=counts.processed, stats=stats)
            return
        line = f"processed {counts.processed}/{counts.total}  {stats}"
        now = time.monotonic()
        changed = line.split("  ")[:4] != self._last_line.split("  ")[:4]
        if final or (changed and now - self._last_at >= self.every_s):
            self.console.print(line, markup=False)
            self._last_line, self._last_at = line, now
