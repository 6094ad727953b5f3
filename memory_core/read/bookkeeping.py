"""Retrieval bookkeeping (seeds R12): count how often each fact is returned, and when it last was.

``times_retrieved`` and ``last_retrieved_at`` feed dynamic importance, memify's vitality and the
entity importance job. The update runs in its own short transaction *after* the read transaction
has ended, so it never holds locks while retrieval works, and a failure here never fails the
retrieval: it is logged and reported as ``False``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

__all__ = ["BOOKKEEPING_LOCK_TIMEOUT_MS", "record_retrievals"]

logger = logging.getLogger(__name__)

# A retrieval waits at most this long for a row a writer holds, then gives up on counting.
BOOKKEEPING_LOCK_TIMEOUT_MS = 1000

# A row another transaction holds (a concurrent retrieval counting the same fact, or a write)
# is skipped rather than waited for: under load, concurrent retrievals of the same facts would
# otherwise queue behind each other's counters. Counts may undercount under contention; they
# only feed importance and vitality scores, which tolerate that.
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
    """Increment ``times_retrieved`` and stamp ``last_retrieved_at`` of ``fact_ids`` in one UPDATE.

    Returns ``True`` when the counters were written; any error is logged and returns ``False``.
    """
    ids = sorted(set(fact_ids))
    if not ids:
        return True
    try:
        with sessions.begin() as session:
            session.execute(text(f"SET LOCAL lock_timeout = {int(BOOKKEEPING_LOCK_TIMEOUT_MS)}"))
            # Counters are not worth a WAL flush per retrieval: a crash may lose the last few.
            session.execute(text("SET LOCAL synchronous_commit = off"))
            session.execute(_RECORD_SQL, {"agent": agent_id, "ids": ids})
    except Exception:  # bookkeeping is best effort: the caller already has its answer
        logger.warning("could not record retrieval of %d facts for agent %s", len(ids), agent_id, exc_info=True)
        return False
    return True
