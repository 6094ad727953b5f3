"""Retrieval bookkeeping (seeds R12): count how often each fact is returned, and when it last was.

``times_retrieved`` and ``last_retrieved_at`` feed dynamic importance, memify's vitality and the
entity importance job. They live in ``memory_fact_usage`` (migration 0009), one row per fact that
was ever returned, not in ``memory_facts``.

Why a table of their own
------------------------
A fact row carries its 384-float embedding, so a page of ``memory_facts`` holds about five rows
and seldom has room for a new row version: when the counters were columns of the fact, counting
a retrieval mostly wrote a new version of the fact in another page, with an entry in each of the
table's ~14 indexes, both HNSW graphs included (only 24-68% of those updates were HOT in the
benchmarks). A flush of ~1,000 facts cost 1-4 s of PostgreSQL time on the 1M-fact benchmark.
Now a retrieval never writes a fact row. A usage row is narrow and its pages are half empty
(fillfactor 50), so its new version normally fits on the same page, and the only index is the
primary key, which an update never changes: the update is HOT and touches no index. The first
count of a fact inserts its row (one primary-key entry), and the foreign key check takes a
``KEY SHARE`` lock on the fact row (it marks the row; no new version, no index entry).

Why the counts are written behind the request
---------------------------------------------
Even cheap, a write per retrieval costs a transaction and contends with the other API processes
counting the same popular facts. So a retrieval only *queues* its returned fact ids in
:class:`RetrievalBookkeeper`, in memory, and a background thread applies the queue every
``flush_interval_s`` in one upsert per batch: repeated retrievals of the same fact become one
``times_retrieved + n``, and ``last_retrieved_at`` is the time of the latest retrieval (not of
the flush). The upsert joins the facts on (id, agent), so it never counts one agent's retrieval
on another agent's fact and drops facts deleted meanwhile; it writes in fact-id order, so
concurrent flushes of several API processes wait for each other instead of deadlocking. A flush
that cannot get its locks within ``BOOKKEEPING_LOCK_TIMEOUT_MS`` (a fact being deleted, another
process's flush stuck) or fails otherwise keeps its counts queued for the next flush (a few
tries), so contention delays counts instead of losing them. What is lost: the queue of a process
that is killed without ``close()`` (at most ``flush_interval_s`` of counts; they only feed scores
that tolerate it). ``flush_interval_s <= 0`` writes synchronously in the request.
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

# A flush waits at most this long for a lock, then gives up and keeps its counts queued. What it
# may wait for: another process's flush of the same facts (milliseconds), memify's merge adding
# counts to the fact it keeps, and, for a fact's first count only (the foreign key check locks
# the fact row), a transaction that deletes the fact or holds it FOR UPDATE (the write path).
# Below PostgreSQL's default deadlock_timeout (1 s): in a lock cycle with one of those, the flush
# times out before the other side's deadlock check would pick a victim, so the flush yields.
BOOKKEEPING_LOCK_TIMEOUT_MS = 500
# Facts per upsert statement of a flush.
BOOKKEEPING_FLUSH_BATCH = 2000
# A queued count whose flush failed (lock timeout, lost connection) this many times in a row is dropped.
BOOKKEEPING_MAX_TRIES = 5
# The queue never grows past this many distinct facts: beyond it, a flush runs in the caller.
_MAX_PENDING = 50_000

# One row per queued fact, upserted. The join keeps only facts that exist and belong to the
# queued agent (a fact deleted since it was returned is dropped, and no agent counts on another's
# fact id); rows are written in id order, so two flushes touching the same facts lock them in the
# same order. RETURNING tells which facts were counted.
_UPSERT_SQL = """
    INSERT INTO memory_fact_usage (fact_id, agent_id, times_retrieved, last_retrieved_at)
    SELECT f.id, f.agent_id, {count}, {at}
    FROM {queued}
    JOIN memory_facts f ON f.id = q.id AND f.agent_id = {agent}
    ORDER BY q.id
    ON CONFLICT (fact_id) DO UPDATE
    SET times_retrieved = memory_fact_usage.times_retrieved + excluded.times_retrieved,
        last_retrieved_at = GREATEST(memory_fact_usage.last_retrieved_at, excluded.last_retrieved_at)
    RETURNING CAST(fact_id AS text)
"""

_APPLY_SQL = text(
    _UPSERT_SQL.format(
        queued="unnest(CAST(:agents AS text[]), CAST(:ids AS uuid[]), CAST(:ns AS int[]), "
        "CAST(:ats AS timestamptz[])) AS q(agent, id, n, at)",
        agent="q.agent",
        count="q.n",
        at="q.at",
    )
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
        """Write ``batch``; what could not be written and may be retried.

        A chunk whose statement failed (a lock wait past the timeout, a lost connection) is
        retried whole at the next flush. A fact the statement left out is gone or not the
        queued agent's: retrying cannot count it, so it is dropped.
        """
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
                for fact_id, item in chunk:
                    item.tries += 1
                    if item.tries < BOOKKEEPING_MAX_TRIES:
                        left[fact_id] = item
                continue
            dropped = len(chunk) - len(written)
            if dropped:
                logger.debug("%d retrieved facts were deleted (or not their agent's); not counted", dropped)
        return left

    def close(self) -> None:
        """Stop the background thread and write what is queued (called when the read context closes)."""
        self._stopped = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(5.0, self.flush_interval_s * 2))
        self.flush()


# Synchronous form (``flush_interval_s <= 0``): one retrieval, one upsert, now.
_RECORD_SQL = text(
    _UPSERT_SQL.format(
        queued="unnest(CAST(:ids AS uuid[])) AS q(id)",
        agent="CAST(:agent AS text)",
        count="1",
        at="now()",
    )
)


def record_retrievals(sessions: sessionmaker[Session], agent_id: str, fact_ids: Sequence[str]) -> bool:
    """Increment ``times_retrieved`` and stamp ``last_retrieved_at`` of ``fact_ids`` in one upsert, now.

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
