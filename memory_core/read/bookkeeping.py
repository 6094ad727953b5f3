"""Retrieval bookkeeping (seeds R12): count how often each fact is returned, and when it last was.

``times_retrieved`` and ``last_retrieved_at`` (columns of ``memory_facts``) feed dynamic
importance, memify's vitality and the entity importance job.

Why the counts are written behind the request
---------------------------------------------
A fact row carries its 384-float embedding, so a page holds about five of them and has no room
for a new row version: an ``UPDATE`` of the counters is rarely HOT and inserts an entry into every
index of the table, the HNSW graph included (milliseconds per row). Done in the request, it was
the largest stage of a retrieval (30-90 ms of a 40-650 ms p50 in the 1M-fact benchmark).

So a retrieval only *queues* its returned fact ids in :class:`RetrievalBookkeeper`, in memory,
and a background thread applies the queue every ``flush_interval_s`` in one ``UPDATE`` per batch:
repeated retrievals of the same fact become one row version with ``times_retrieved + n``, and
``last_retrieved_at`` is the time of the latest retrieval (not of the flush). Rows another
transaction holds are skipped and stay queued for the next flush (a few tries), so contention
delays counts instead of losing them. What is lost: the queue of a process that is killed
without ``close()`` (at most ``flush_interval_s`` of counts; they only feed scores that tolerate
it). ``flush_interval_s <= 0`` writes synchronously in the request, as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

__all__ = [
    "BOOKKEEPING_FLUSH_BATCH",
    "BOOKKEEPING_LOCK_TIMEOUT_MS",
    "BOOKKEEPING_MAX_TRIES",
    "RetrievalBookkeeper",
    "record_retrievals",
]

logger = logging.getLogger(__name__)

# A flush waits at most this long for anything (it skips locked rows, so this is a safety net).
BOOKKEEPING_LOCK_TIMEOUT_MS = 1000
# Rows per UPDATE statement of a flush.
BOOKKEEPING_FLUSH_BATCH = 2000
# A queued count whose row stayed locked (or vanished) this many flushes in a row is dropped.
BOOKKEEPING_MAX_TRIES = 5
# The queue never grows past this many distinct facts: beyond it, a flush runs in the caller.
_MAX_PENDING = 50_000

# Rows another transaction holds are skipped (SKIP LOCKED), never waited for: they stay queued.
# RETURNING tells which rows were counted.
_APPLY_SQL = text(
    """
    UPDATE memory_facts f
    SET times_retrieved = f.times_retrieved + d.n,
        last_retrieved_at = GREATEST(f.last_retrieved_at, d.at)
    FROM (
        SELECT q.id, q.n, q.at
        FROM unnest(CAST(:agents AS text[]), CAST(:ids AS uuid[]), CAST(:ns AS int[]), CAST(:ats AS timestamptz[]))
             AS q(agent, id, n, at)
        JOIN LATERAL (
            SELECT 1 FROM memory_facts l WHERE l.id = q.id AND l.agent_id = q.agent FOR UPDATE SKIP LOCKED
        ) AS locked ON true
    ) AS d
    WHERE f.id = d.id
    RETURNING CAST(f.id AS text)
    """
)


@dataclass
class _Pending:
    agent_id: str
    count: int
    last_at: datetime
    tries: int = 0


class RetrievalBookkeeper:
    """Queues the facts each retrieval returned and applies the counts in batches (see the module doc)."""

    def __init__(self, sessions: sessionmaker[Session], *, flush_interval_s: float) -> None:
        self._sessions = sessions
        self.flush_interval_s = flush_interval_s
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None

    @property
    def deferred(self) -> bool:
        """True when counts are written by the background flush, not in the request."""
        return self.flush_interval_s > 0

    def pending(self) -> int:
        """How many distinct facts wait for the next flush."""
        with self._lock:
            return len(self._pending)

    def record(self, agent_id: str, fact_ids: Sequence[str]) -> bool:
        """Count one retrieval of ``fact_ids`` (queued, or written now when not deferred).

        Returns ``True`` when the retrieval was counted (queued or written); never raises.
        """
        ids = sorted(set(fact_ids))
        if not ids:
            return True
        if not self.deferred or self._stopped:
            return record_retrievals(self._sessions, agent_id, ids)
        now = datetime.now(UTC)
        with self._lock:
            for fact_id in ids:
                item = self._pending.get(fact_id)
                if item is None:
                    self._pending[fact_id] = _Pending(agent_id, 1, now)
                elif item.agent_id == agent_id:
                    item.count += 1
                    item.last_at = max(item.last_at, now)
            overflowing = len(self._pending) > _MAX_PENDING
        self._ensure_thread()
        if overflowing:
            self.flush()
        return True

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None and not self._stopped:
                thread = threading.Thread(target=self._run, name="retrieval-bookkeeping", daemon=True)
                self._thread = thread
                thread.start()

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(self.flush_interval_s)
            self._wake.clear()
            self.flush()

    def flush(self) -> bool:
        """Apply every queued count now; ``True`` when nothing is left queued. Never raises."""
        with self._flush_lock:
            with self._lock:
                batch, self._pending = self._pending, {}
            if not batch:
                return True
            left = self._apply(batch)
            if left:
                with self._lock:
                    for fact_id, item in left.items():
                        newer = self._pending.get(fact_id)
                        if newer is None:
                            self._pending[fact_id] = item
                        else:
                            newer.count += item.count
                            newer.last_at = max(newer.last_at, item.last_at)
                            newer.tries = item.tries
            return not left

    def _apply(self, batch: dict[str, _Pending]) -> dict[str, _Pending]:
        """Write ``batch``; what could not be written and may be retried."""
        items = sorted(batch.items())
        left: dict[str, _Pending] = {}
        for start in range(0, len(items), BOOKKEEPING_FLUSH_BATCH):
            chunk = items[start : start + BOOKKEEPING_FLUSH_BATCH]
            try:
                with self._sessions.begin() as session:
                    session.execute(text(f"SET LOCAL lock_timeout = {int(BOOKKEEPING_LOCK_TIMEOUT_MS)}"))
                    # Counters are not worth a WAL flush: a crash may lose the last few.
                    session.execute(text("SET LOCAL synchronous_commit = off"))
                    written = set(
                        session.execute(
                            _APPLY_SQL,
                            {
                                "agents": [item.agent_id for _, item in chunk],
                                "ids": [fact_id for fact_id, _ in chunk],
                                "ns": [item.count for _, item in chunk],
                                "ats": [item.last_at for _, item in chunk],
                            },
                        ).scalars()
                    )
            except Exception:  # bookkeeping is best effort: retried at the next flush
                logger.warning("could not write retrieval counts of %d facts", len(chunk), exc_info=True)
                written = set()
            for fact_id, item in chunk:
                if fact_id in written:
                    continue
                item.tries += 1
                if item.tries < BOOKKEEPING_MAX_TRIES:
                    left[fact_id] = item
        return left

    def close(self) -> None:
        """Stop the background thread and write what is queued (called when the read context closes)."""
        self._stopped = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(5.0, self.flush_interval_s * 2))
        self.flush()


# Synchronous form (``flush_interval_s <= 0``): one retrieval, one UPDATE, locked rows skipped.
_RECORD_SQL = text(
    """
    UPDATE memory_facts f
    SET times_retrieved = f.times_retrieved + 1, last_retrieved_at = now()
    FROM (
        SELECT id FROM memory_facts
        WHERE agent_id = :agent AND id = ANY(CAST(:ids AS uuid[]))
        FOR UPDATE SKIP LOCKED
    ) AS locked
    WHERE f.id = locked.id
    """
)


def record_retrievals(sessions: sessionmaker[Session], agent_id: str, fact_ids: Sequence[str]) -> bool:
    """Increment ``times_retrieved`` and stamp ``last_retrieved_at`` of ``fact_ids`` in one UPDATE, now.

    Returns ``True`` when the counters were written; any error is logged and returns ``False``.
    """
    ids = sorted(set(fact_ids))
    if not ids:
        return True
    try:
        with sessions.begin() as session:
            session.execute(text(f"SET LOCAL lock_timeout = {int(BOOKKEEPING_LOCK_TIMEOUT_MS)}"))
            session.execute(text("SET LOCAL synchronous_commit = off"))
            session.execute(_RECORD_SQL, {"agent": agent_id, "ids": ids})
    except Exception:  # bookkeeping is best effort: the caller already has its answer
        logger.warning("could not record retrieval of %d facts for agent %s", len(ids), agent_id, exc_info=True)
        return False
    return True
