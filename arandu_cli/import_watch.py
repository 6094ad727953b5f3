"""Following an import of several chunks to the end: done, failed and pending over the whole file.

Each chunk is one import on the service, and its progress endpoint counts the events it
created. Messages the agent already had (a re-run, or a resumed run) are not part of the new
import: the service counts them as ``duplicates``. Their state is looked up by message id, and
those still being processed are looked up again until they finish, so "done" always means
every message of the file, not only the new ones.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from arandu_client import AranduClient, EventSummary, ImportAccepted

LOOKUP_BATCH = 10_000  # the service's limit per lookup


@dataclass
class ChunkState:
    """One sent chunk: its import and the file lines and message ids it carried."""

    number: int
    import_id: str
    first_line: int
    last_line: int
    message_lines: dict[str, int]
    new: int
    duplicates: int
    done: int = 0
    failed: int = 0
    finished: bool = False


@dataclass(frozen=True)
class Counts:
    """Where the file's messages stand."""

    total: int
    done: int
    failed: int
    pending: int
    new: int
    earlier: int

    @property
    def processed(self) -> int:
        """Messages that reached a final state (done or failed)."""
        return self.done + self.failed


@dataclass(frozen=True)
class FailedMessage:
    """A message whose processing failed, with the service's error."""

    event_id: str
    message_id: str
    line: int | None
    stage: str | None
    error: str | None


def batched(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    """``items`` in slices of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass
class Rate:
    """Messages per second over the last ``window_s`` seconds, and the time left at that pace."""

    window_s: float = 15.0
    samples: deque[tuple[float, int]] = field(default_factory=deque)

    def add(self, processed: int, now: float | None = None) -> None:
        """Record how many messages were processed at ``now``."""
        moment = time.monotonic() if now is None else now
        self.samples.append((moment, processed))
        while len(self.samples) > 2 and moment - self.samples[0][0] > self.window_s:
            self.samples.popleft()

    @property
    def per_second(self) -> float | None:
        """The recent pace, or None before two samples a moment apart."""
        if len(self.samples) < 2:
            return None
        (start, first), (end, last) = self.samples[0], self.samples[-1]
        if end - start < 0.5:
            return None
        return max(last - first, 0) / (end - start)

    def eta_s(self, pending: int) -> float | None:
        """Seconds until ``pending`` messages are processed at the recent pace (None: unknown)."""
        pace = self.per_second
        if pending == 0:
            return 0.0
        if not pace:
            return None
        return pending / pace


class ImportWatch:
    """The state of every message an ``arandu import`` run sent, refreshed by :meth:`poll`."""

    def __init__(self, client: AranduClient, agent_id: str) -> None:
        self.client = client
        self.agent_id = agent_id
        self.chunks: list[ChunkState] = []
        # Messages the agent had before this run: message id -> their event's latest state.
        self.earlier: dict[str, EventSummary] = {}
        self.earlier_lines: dict[str, int] = {}
        self.rate = Rate()

    def add_chunk(self, accepted: ImportAccepted, lines: dict[str, int], first_line: int, last_line: int) -> None:
        """Track a chunk the service accepted; look up the state of its messages it already had."""
        chunk = ChunkState(
            number=len(self.chunks) + 1,
            import_id=accepted.import_id,
            first_line=first_line,
            last_line=last_line,
            message_lines=lines,
            new=accepted.total,
            duplicates=accepted.duplicates,
            finished=accepted.total == 0,
        )
        self.chunks.append(chunk)
        if accepted.duplicates:
            ours = {item.import_id for item in self.chunks}
            for batch in batched(list(lines), LOOKUP_BATCH):
                for found in self.client.lookup_events(self.agent_id, batch).events:
                    if found.import_id not in ours and found.message_id not in self.earlier:
                        self.earlier[found.message_id] = found
                        self.earlier_lines[found.message_id] = lines[found.message_id]

    def poll(self) -> Counts:
        """Refresh the unfinished imports and the unfinished earlier messages; the counts after it."""
        for chunk in self.chunks:
            if chunk.finished:
                continue
            progress = self.client.import_progress(chunk.import_id, agent_id=self.agent_id)
            chunk.done, chunk.failed, chunk.finished = progress.done, progress.failed, progress.finished
        unfinished = [message_id for message_id, event in self.earlier.items() if not event.finished]
        for batch in batched(unfinished, LOOKUP_BATCH):
            for found in self.client.lookup_events(self.agent_id, batch).events:
                self.earlier[found.message_id] = found
        counts = self.counts()
        self.rate.add(counts.processed)
        return counts

    def counts(self) -> Counts:
        """The counts as last polled."""
        new = sum(chunk.new for chunk in self.chunks)
        done = sum(chunk.done for chunk in self.chunks)
        failed = sum(chunk.failed for chunk in self.chunks)
        earlier_done = sum(1 for event in self.earlier.values() if event.status == "done")
        earlier_failed = sum(1 for event in self.earlier.values() if event.status == "failed")
        total = new + len(self.earlier)
        done += earlier_done
        failed += earlier_failed
        return Counts(
            total=total,
            done=done,
            failed=failed,
            pending=max(total - done - failed, 0),
            new=new,
            earlier=len(self.earlier),
        )

    @property
    def finished(self) -> bool:
        """True once every tracked message is done or failed."""
        return all(chunk.finished for chunk in self.chunks) and all(event.finished for event in self.earlier.values())

    def failed_messages(self) -> list[FailedMessage]:
        """Every failed message of the run with its event id, file line, stage and error."""
        failed: list[FailedMessage] = [
            FailedMessage(
                event.event_id, event.message_id, self.earlier_lines.get(event.message_id), event.stage, event.error
            )
            for event in self.earlier.values()
            if event.status == "failed"
        ]
        for chunk in self.chunks:
            if not chunk.failed:
                continue
            for batch in batched(list(chunk.message_lines), LOOKUP_BATCH):
                for event in self.client.lookup_events(self.agent_id, batch, status=["failed"]).events:
                    if event.import_id == chunk.import_id:
                        line = chunk.message_lines.get(event.message_id)
                        failed.append(FailedMessage(event.event_id, event.message_id, line, event.stage, event.error))
        failed.sort(key=lambda item: (item.line is None, item.line or 0))
        return failed
