"""How common a keyword is among facts, from PostgreSQL's own statistics, to keep the keyword signal cheap.

The keyword signal finds facts through the ``search_vector`` GIN index, then reads every match
from the heap to count which query words it contains and rank by importance. For a large agent
a common word ("live", "work", "friend") matches thousands of its facts, scattered over the
table: at 100,000 facts, "Where does Zeca White live?" read ~12,000 rows (~250 ms) to rank on
"zeca" and "white" in the end.

``ANALYZE`` already measures the most common lexemes of ``memory_facts.search_vector`` and the
share of rows holding each (``pg_stats.most_common_elems``). :func:`estimated_share` sums the
shares of the common lexemes a keyword prefix-matches (the signal matches ``word:*``). A
keyword whose estimated matches among the agent's facts exceed ``max_matches`` is not used to
*find* candidates — the rarer words of the query are — but it still counts in each candidate's
keyword score (the match count over all keywords). Small agents never drop a word (their
matches are few whatever the word); a large agent whose every keyword is common gets no keyword
candidates (the semantic and graph signals still run), and the trace says which words were
dropped.

Statistics are table-wide, not per agent, and as fresh as the last (auto)analyze; they are read
once per :data:`TERM_STATS_TTL_S` per process.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.orm import Session

__all__ = ["TERM_STATS_TTL_S", "TermStats", "estimated_share", "term_stats"]

TERM_STATS_TTL_S = 600.0

_STATS_SQL = text(
    """
    SELECT CAST(CAST(most_common_elems AS text) AS text[]) AS elems, most_common_elem_freqs AS freqs
    FROM pg_stats
    WHERE schemaname = current_schema() AND tablename = 'memory_facts' AND attname = 'search_vector'
    """
)


class TermStats:
    """The most common lexemes of ``memory_facts.search_vector`` and their row shares, cached."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded_at = -TERM_STATS_TTL_S
        self._shares: dict[str, float] = {}
        self._sorted: list[str] = []

    def shares(self, session: Session) -> tuple[dict[str, float], list[str]]:
        """Lexeme -> share of rows, and the lexemes sorted (for prefix look-ups)."""
        now = time.monotonic()
        with self._lock:
            if now - self._loaded_at < TERM_STATS_TTL_S:
                return self._shares, self._sorted
        row = session.execute(_STATS_SQL).first()
        shares: dict[str, float] = {}
        if row is not None and row.elems and row.freqs:
            # most_common_elem_freqs ends with three summary values (min, max, null share).
            for lexeme, share in zip(row.elems, row.freqs, strict=False):
                shares[str(lexeme)] = float(share)
        ordered = sorted(shares)
        with self._lock:
            self._shares, self._sorted, self._loaded_at = shares, ordered, now
        return shares, ordered

    def clear(self) -> None:
        """Forget the cached statistics (tests)."""
        with self._lock:
            self._loaded_at = -TERM_STATS_TTL_S
            self._shares, self._sorted = {}, []


term_stats = TermStats()


def estimated_share(shares: dict[str, float], ordered: Sequence[str], forms: Sequence[str]) -> float:
    """Estimated share of rows matching any of ``forms`` as a prefix (``form:*``), capped at 1.

    Summed over the common lexemes only (rows holding two of them count twice): words outside
    the statistics are rare.
    """
    seen: set[str] = set()
    total = 0.0
    for form in forms:
        start = bisect.bisect_left(ordered, form)
        for lexeme in ordered[start:]:
            if not lexeme.startswith(form):
                break
            if lexeme not in seen:
                seen.add(lexeme)
                total += shares[lexeme]
    return min(1.0, total)
