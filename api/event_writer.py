"""Group commit for single messages: the requests that arrive together are written together.

A single ``POST .../messages`` used to be one statement and one commit of its own. Under
concurrent clients that is one WAL flush per message, and the commits queue behind each other
on PostgreSQL's WAL write lock (at 32 concurrent clients most of the acceptance time was spent
there), each request also holding a pooled connection of its own while it waits (a pool
smaller than the concurrency then opens and closes a connection per request).

:class:`EventWriter` keeps one write in flight per API process. A request whose message
finds no write in flight starts one at once (no added wait when the API is quiet); the
messages that arrive while it runs are taken together by the next one: one statement
(:func:`~memory_core.write.intake.accept_agent_messages`) and one commit for all of them. The
batch grows with the load, so the commits per second stay few however many clients send.

Every request still gets its own answer: the event its message became, or the error of its
own row. When a batch fails as a whole, each of its messages is written again alone, so one
message PostgreSQL refuses does not fail the others (unless the database could not be reached
at all: then the batch's requests share that error at once).

Publishing the committed events to the pipeline starts as the answers are given, on a thread
of its own that takes every id waiting at once (:meth:`EventWriter.publish`):
a broker that hangs delays processing, never acceptance, and nothing is lost (the Beat
sweeper re-enqueues runs that stay idle).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy import exc

from memory_core.write.intake import AcceptedMessage, IncomingMessage

logger = logging.getLogger("arandu.api")

# Messages one write takes at most; the rest wait for the next one (a statement of a few
# hundred rows commits in a few milliseconds).
MAX_BATCH = 500
# Event ids kept for publishing while the broker does not take them; past this the oldest are
# left to the sweeper (their runs are committed) instead of growing the process without bound.
MAX_UNPUBLISHED = 100_000

WriteBatch = Callable[[Sequence[tuple[str, IncomingMessage]]], list[AcceptedMessage]]
Publish = Callable[[Sequence[str]], object]


def _about_the_rows(error: Exception) -> bool:
    """Whether a failed write may have failed for one of its rows (then each is written alone).

    Not when the database could not be reached or the connection broke: every message alone
    would wait for the same timeout in turn.
    """
    if isinstance(error, exc.OperationalError | exc.InterfaceError | exc.TimeoutError):
        return False
    return not (isinstance(error, exc.DBAPIError) and error.connection_invalidated)


@dataclass(frozen=True)
class _Pending:
    agent_id: str
    message: IncomingMessage
    answer: asyncio.Future[AcceptedMessage]


class EventWriter:
    """Writes the single messages of concurrent requests in shared statements, then publishes them.

    ``write`` stores a batch of ``(agent_id, message)`` pairs in one statement and returns their
    outcomes in order; ``publish`` hands committed event ids to the pipeline. Both block and run
    on threads of their own; everything else runs on the event loop of the requests.
    """

    def __init__(self, write: WriteBatch, publish: Publish, *, max_batch: int = MAX_BATCH) -> None:
        self._write = write
        self._publish = publish
        self._max_batch = max_batch
        self._pending: list[_Pending] = []
        self._writing = False
        self._unpublished: list[str] = []
        self._publishing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="arandu-event-writer")
        self._publisher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="arandu-event-publisher")

    async def accept(self, agent_id: str, message: IncomingMessage) -> AcceptedMessage:
        """Store ``message`` for ``agent_id`` (with whatever else is waiting) and return its event.

        Raises what writing this message alone raises. The commit is done when this returns.
        """
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[AcceptedMessage] = loop.create_future()
        self._pending.append(_Pending(agent_id, message, answer))
        if not self._writing:
            self._writing = True
            self._start(self._write_pending())
        # A client that goes away cancels only its own wait: the shared write goes on (and its
        # message is stored, as a message whose answer was lost on the way would be).
        return await answer

    def publish(self, event_ids: Sequence[str]) -> None:
        """Queue committed events for the pipeline; they go out together once the publisher is free."""
        if not event_ids:
            return
        self._unpublished.extend(event_ids)
        overflow = len(self._unpublished) - MAX_UNPUBLISHED
        if overflow > 0:
            del self._unpublished[:overflow]
            logger.warning("%d event(s) were not published (the broker is not taking them); the sweeper will", overflow)
        if not self._publishing:
            self._publishing = True
            self._start(self._publish_unpublished())

    def _start(self, work: Coroutine[object, object, None]) -> None:
        # The loop keeps only weak references to its tasks: these are kept until they end.
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write_pending(self) -> None:
        loop = asyncio.get_running_loop()
        batch: list[_Pending] = []
        try:
            while self._pending:
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
                try:
                    outcomes: list[AcceptedMessage | BaseException] = await loop.run_in_executor(
                        self._writer, self._write_batch, batch
                    )
                except Exception as error:  # the writer thread is gone (the API is stopping)
                    outcomes = [error] * len(batch)
                created: list[str] = []
                for pending, outcome in zip(batch, outcomes, strict=True):
                    if isinstance(outcome, BaseException):
                        if not pending.answer.done():
                            pending.answer.set_exception(outcome)
                        continue
                    if outcome.created:
                        created.append(str(outcome.event_id))
                    if not pending.answer.done():
                        pending.answer.set_result(outcome)
                self.publish(created)
        except asyncio.CancelledError:
            for pending in [*batch, *self._pending]:
                if not pending.answer.done():
                    pending.answer.set_exception(RuntimeError("the API is stopping"))
            self._pending.clear()
            raise
        finally:
            self._writing = False

    def _write_batch(self, batch: Sequence[_Pending]) -> list[AcceptedMessage | BaseException]:
        items = [(pending.agent_id, pending.message) for pending in batch]
        try:
            return list(self._write(items))
        except Exception as error:
            if len(items) == 1 or not _about_the_rows(error):
                return [error] * len(items)
            logger.warning(
                "writing %d messages together failed (%s: %s); writing each alone",
                len(items),
                type(error).__name__,
                error,
            )
        outcomes: list[AcceptedMessage | BaseException] = []
        for item in items:
            try:
                outcomes.extend(self._write([item]))
            except Exception as error:
                outcomes.append(error)
        return outcomes

    async def _publish_unpublished(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._unpublished:
                event_ids = self._unpublished
                self._unpublished = []
                try:
                    await loop.run_in_executor(self._publisher, self._publish, event_ids)
                except Exception as error:  # the publisher logs its own failures; this is the last guard
                    logger.warning("publishing %d event(s) failed: %s; the sweeper will", len(event_ids), error)
        finally:
            self._publishing = False

    async def drain(self, timeout_s: float = 5.0) -> bool:
        """Wait (at most ``timeout_s``) until every accepted message is written and published; True if so.

        For a clean stop: what is not published by then is left to the sweeper.
        """
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self._tasks:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            await asyncio.wait(set(self._tasks), timeout=remaining)
        return True

    def close(self) -> None:
        """Stop the writer and publisher threads once what they are doing is done."""
        self._writer.shutdown(wait=True)
        self._publisher.shutdown(wait=True)
