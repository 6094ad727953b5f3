"""The keyword signal weighted by how rare each word is (inverse document frequency; ours).

The seeds' keyword signal (R4) scores a fact by the fraction of the query's keywords it
contains. Every keyword counts the same, so in "When did Caroline go to the support group?" a
fact that only names Caroline scores as much as one that only says "support": in a memory where
Caroline is one of two people talking, that lifts half of all facts by the same amount and tells
nothing about which of them answer. Search engines solved this long ago with inverse document
frequency: a word found in most documents carries almost no evidence, a rare one carries much.

Here ``keyword = sum of idf(matched keywords) / sum of idf(all keywords)`` with the BM25 idf
``ln(1 + (N - n + 0.5) / (n + 0.5))``, ``N`` the agent's facts in the searched validity window
and ``n`` those containing the keyword (the fact signal's prefix match on ``search_vector``).
With keywords that are all equally rare this is exactly the seeds' fraction; a query of one
keyword still scores 1.0 on a match. A fact "contains" a keyword as the keyword signal's SQL
decides (its text, as written or accent-folded, contains the word), so both agree on what
matched. Aggregation matches ("my friends" -> ``person:%``) keep their fixed score.

Counting ``n`` is done so that its cost stays bounded whatever the agent's size
(:func:`document_frequencies`):

* an agent with up to :data:`SCAN_MAX_FACTS` facts: one pass over its own facts (its b-tree),
  every keyword tested against each fact's ``search_vector``, and ``N`` counted in the same pass.
  The ``search_vector`` GIN index is table-wide, so for a small agent a word common elsewhere
  ("live" over a million facts) would cost a scan of everybody's matches to find a few of its own.
  The counts are remembered under the agent's exact fact count, which the caller has counted
  anyway: a fact added or deleted changes the count, and the next query counts again;
* a larger agent: ``N`` is its cached full count; a keyword that PostgreSQL's statistics
  (:mod:`memory_core.read.term_stats`) say is common in the table (at least
  :data:`COMMON_ESTIMATE_MIN` rows: what counting it would read) gets its ``n`` estimated as
  share x ``N``; any other keyword is counted through the GIN index (rare words have few matches
  in the whole table) up to :data:`DF_CAP`, and remembered per agent for :data:`DF_CACHE_TTL_S`
  (an idf moves slowly as memory grows). The estimate assumes the agent uses a common word as
  often as the table does: it can misjudge a word common elsewhere and rare in this agent, the
  price of never reading thousands of other agents' rows to answer one query.

The same weighting scores relevant conversations (:mod:`memory_core.read.conversations`), so
facts and events keep one scale. ``keyword_idf = false`` restores the plain fraction.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy.orm import Session

from memory_core.db.driver_reads import fetch_all
from memory_core.read.agent_index import database_key
from memory_core.read.entities import TimeWindow, fact_validity_sql, window_params
from memory_core.read.planner import fold_words, keyword_haystack, match_forms
from memory_core.read.rank import AGGREGATION_KEYWORD_SCORE, Candidate
from memory_core.read.signals import agent_counts
from memory_core.read.term_stats import estimated_share, term_stats

__all__ = [
    "COMMON_ESTIMATE_MIN",
    "DF_CACHE_TTL_S",
    "DF_CAP",
    "SCAN_MAX_FACTS",
    "bm25_idf",
    "counts_to_fold",
    "document_frequencies",
    "keyword_weights",
    "matched_keywords",
    "reweigh_keywords",
    "term_queries",
]

# Document frequencies counted through the index stop at this many facts ("very common").
DF_CAP = 2_000
# Agents with at most this many facts are counted in one pass over their own rows.
SCAN_MAX_FACTS = 5_000
# A keyword the statistics expect in at least this many rows of the table is estimated, not counted.
COMMON_ESTIMATE_MIN = 500
# Exact counts of a large agent's keywords are reused for this long.
DF_CACHE_TTL_S = 600.0

# One pass over the agent's facts: N and each keyword's n. MATERIALIZED keeps the planner on the
# agent's b-tree (the table-wide GIN index would visit every agent's matches of a common word).
# `terms` is MATERIALIZED too: inlined, its to_tsquery() was parsed again for every fact it was
# tested against (a 1,000-fact agent's four keywords: 7.6-9.1 ms; parsed once: 3.3-3.9 ms).
_SCAN_DF_SQL = """
WITH mine AS MATERIALIZED (
    SELECT f.search_vector FROM memory_facts f WHERE f.agent_id = :agent AND {validity}
),
terms AS MATERIALIZED (
    SELECT t.ord, to_tsquery('arandu_search', t.q) AS tq
    FROM unnest(CAST(:term_queries AS text[])) WITH ORDINALITY AS t(q, ord)
)
SELECT 0 AS ord, count(*) AS df FROM mine
UNION ALL
SELECT t.ord, (SELECT count(*) FROM mine m WHERE m.search_vector @@ t.tq) FROM terms t
"""

# Per keyword, the agent's matches through the GIN index, capped (rare words: few rows anywhere).
# The agent is a literal (:agent_literal, written in by fetch_all): this statement runs after a
# large agent's signal statement, which may have left the read transaction on generic plans
# (memory_core.read.signals), and only a plan that sees the agent's value can use the agent's
# own keyword index.
_INDEX_DF_SQL = """
SELECT t.ord, (
    SELECT count(*) FROM (
        SELECT 1 FROM memory_facts f
        WHERE f.agent_id = :agent_literal AND {validity} AND f.search_vector @@ to_tsquery('arandu_search', t.q)
        LIMIT :cap
    ) AS hit
) AS df
FROM unnest(CAST(:term_queries AS text[])) WITH ORDINALITY AS t(q, ord)
"""


class _DocumentFrequencyCache:
    """Exact keyword counts of large agents' current facts, per database, agent and term query."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, str, str], tuple[float, int]] = {}

    def get(self, key: tuple[str, str, str], now: float) -> int | None:
        with self._lock:
            cached = self._values.get(key)
        if cached is None or now - cached[0] >= DF_CACHE_TTL_S:
            return None
        return cached[1]

    def put(self, key: tuple[str, str, str], now: float, value: int) -> None:
        with self._lock:
            if len(self._values) > 100_000:
                self._values.clear()
            self._values[key] = (now, value)

    def clear(self) -> None:
        """Forget every count (tests)."""
        with self._lock:
            self._values.clear()

    def forget_agent(self, database: str, agent_id: str) -> None:
        """Forget the counts of one agent of ``database`` (it was erased)."""
        with self._lock:
            for key in [key for key in self._values if key[0] == database and key[1] == agent_id]:
                del self._values[key]


document_frequency_cache = _DocumentFrequencyCache()


def bm25_idf(total: int, containing: int) -> float:
    """``ln(1 + (N - n + 0.5) / (n + 0.5))``: near 0 for a word in every document, large for a rare one."""
    total = max(total, containing, 0)
    return math.log(1.0 + (total - containing + 0.5) / (containing + 0.5))


def document_frequencies(
    session: Session,
    agent_id: str,
    queries: Sequence[str],
    agent_facts: int,
    *,
    window: TimeWindow | None = None,
    table_rows: float = 0.0,
    counted: tuple[int, Sequence[int]] | None = None,
) -> tuple[int, list[int]]:
    """``(N, [n per term query])`` over the agent's facts in ``window``, at a bounded cost (module docstring).

    ``agent_facts`` is what the caller already counted (possibly capped, or 0 when it did not
    count); it only chooses the method. ``table_rows`` is the table's estimated size.
    ``counted`` is what the signal statement's pass counted for a small agent's ``queries``
    (:func:`counts_to_fold`): used and remembered instead of a pass of its own.
    """
    validity = fact_validity_sql("f", window)
    params = {"agent": agent_id, "term_queries": list(queries), **window_params(window)}
    if 0 < agent_facts <= SCAN_MAX_FACTS:
        return _scanned_frequencies(
            session, agent_id, queries, agent_facts, window=window, params=params, counted=counted
        )
    total = agent_counts.get(session, agent_id, window)
    if total <= SCAN_MAX_FACTS:
        return document_frequencies(session, agent_id, queries, max(total, 1), window=window, table_rows=table_rows)
    shares, ordered = term_stats.shares(session)
    database = database_key(session)
    now = time.monotonic()
    frequencies: list[int | None] = []
    for query in queries:
        forms = [part.strip().removesuffix(":*") for part in query.split("|")]
        share = estimated_share(shares, ordered, forms)
        if share * max(table_rows, total) >= COMMON_ESTIMATE_MIN:
            frequencies.append(min(total, round(share * total)))
        elif window is None:
            frequencies.append(document_frequency_cache.get((database, agent_id, query), now))
        else:
            frequencies.append(None)
    missing = [query for query, value in zip(queries, frequencies, strict=True) if value is None]
    if missing:
        # Planned for this agent's values (unless the read transaction is on generic plans
        # already): with them, and with the agent as a literal, PostgreSQL can use the agent's own
        # keyword index (its predicate names the agent; memory_core.read.agent_index).
        rows = fetch_all(
            session,
            _INDEX_DF_SQL.format(validity=validity),
            {**params, "term_queries": missing, "cap": DF_CAP},
            prepare=False,
            inline_agent=agent_id,
        )
        found = {missing[int(row.ord) - 1]: int(row.df) for row in rows}
        for query, value in found.items():
            if window is None:
                document_frequency_cache.put((database, agent_id, query), now, value)
        frequencies = [
            found[query] if value is None else value for query, value in zip(queries, frequencies, strict=True)
        ]
    return total, [int(value or 0) for value in frequencies]


def _scan_keys(database: str, agent_id: str, queries: Sequence[str], agent_facts: int) -> list[tuple[str, str, str]]:
    # N under "", then each term query, under the agent's exact fact count.
    return [(database, agent_id, f"{agent_facts}|{query}") for query in ["", *queries]]


def term_queries(keywords: Sequence[str]) -> list[str]:
    """One ``to_tsquery('arandu_search', ...)`` text per keyword: the word as a prefix.

    The configuration folds case and accents in the database, for documents and queries alike
    (:mod:`memory_core.db.text_search`), so "São" and "sao" are one query. Keywords are the
    planner's (letters and digits only), so they never carry tsquery syntax.
    """
    queries: list[str] = []
    for word in keywords:
        folded = "".join(fold_words(word))
        if folded and f"{folded}:*" not in queries:
            queries.append(f"{folded}:*")
    return queries


def counts_to_fold(
    session: Session, agent_id: str, keywords: Sequence[str], agent_facts: int, *, window: TimeWindow | None = None
) -> list[str]:
    """The term queries an exact pass over a small agent's facts should count (empty: none needed).

    :func:`keyword_weights` would count them in a pass of its own; the signal statement's pass
    over the same facts (memory_core.read.signals) counts them for a few tests per fact more.
    Empty when the agent is not counted by a scan, or its counts are remembered.
    """
    queries = term_queries(keywords)
    if not keywords or len(queries) != len(keywords) or not 0 < agent_facts <= SCAN_MAX_FACTS:
        return []
    if window is None:
        now = time.monotonic()
        keys = _scan_keys(database_key(session), agent_id, queries, agent_facts)
        if all(document_frequency_cache.get(key, now) is not None for key in keys):
            return []
    return queries


def _scanned_frequencies(
    session: Session,
    agent_id: str,
    queries: Sequence[str],
    agent_facts: int,
    *,
    window: TimeWindow | None,
    params: dict[str, Any],
    counted: tuple[int, Sequence[int]] | None = None,
) -> tuple[int, list[int]]:
    """A small agent's ``(N, [n per term query])`` by one pass over its facts, remembered while N stays the same.

    The pass was a seventh of a small agent's retrieve. Its counts are kept under the agent's
    exact fact count (what the caller counted): a fact added or deleted changes the count and
    so the key, and the next query counts again. A fact replaced by a new version keeps the
    count, so its words can shift an idf for up to :data:`DF_CACHE_TTL_S`: one fact among at
    most :data:`SCAN_MAX_FACTS`. Time-travel windows are counted every time.
    """
    now = time.monotonic()
    # Nothing is remembered for a time-travel window.
    keys = _scan_keys(database_key(session), agent_id, queries, agent_facts) if window is None else []
    if counted is not None and len(counted[1]) == len(queries):
        values = [counted[0], *counted[1]]
    else:
        cached = [document_frequency_cache.get(key, now) for key in keys]
        if keys and all(value is not None for value in cached):
            return int(cached[0] or 0), [int(value or 0) for value in cached[1:]]
        sql = _SCAN_DF_SQL.format(validity=fact_validity_sql("f", window))
        counts = {int(row.ord): int(row.df) for row in fetch_all(session, sql, params)}
        values = [counts.get(position, 0) for position in range(len(queries) + 1)]
    for key, value in zip(keys, values, strict=False):
        document_frequency_cache.put(key, now, value)
    return values[0], values[1:]


def keyword_weights(
    session: Session,
    agent_id: str,
    keywords: Sequence[str],
    agent_facts: int,
    *,
    window: TimeWindow | None = None,
    table_rows: float = 0.0,
    counted: tuple[int, Sequence[int]] | None = None,
) -> list[float]:
    """The idf of each keyword over the agent's facts (see :func:`document_frequencies` for the cost).

    ``counted``: the counts the signal statement made of :func:`counts_to_fold`'s term queries.
    """
    queries = term_queries(keywords)
    if len(queries) != len(keywords) or not keywords:
        return [1.0] * len(keywords)
    total, counts = document_frequencies(
        session, agent_id, queries, agent_facts, window=window, table_rows=table_rows, counted=counted
    )
    return [bm25_idf(total, count) for count in counts]


def _keyword_forms(keywords: Sequence[str]) -> list[tuple[str, str]]:
    """Each keyword as written and accent-folded, after a space: the two word starts a fact may contain."""
    return [match_forms(word) for word in keywords]


def _matches(fact_text: str, forms: Sequence[tuple[str, str]]) -> list[bool]:
    folded = " " + " ".join(fold_words(fact_text))
    if fact_text.isascii():
        # A keyword (letters and digits) found after a space or word-start mark of the lower-cased
        # ASCII text starts one of its letter-and-digit runs too, and its written form is either
        # its folded form or not ASCII: the folded words alone decide, and the haystack (a
        # lower-casing and a translation per candidate) is not built.
        return [folded_word in folded for _, folded_word in forms]
    lowered = keyword_haystack(fact_text)
    return [plain in lowered or folded_word in lowered or folded_word in folded for plain, folded_word in forms]


def matched_keywords(fact_text: str, keywords: Sequence[str]) -> list[bool]:
    """Which keywords start a word of ``fact_text`` (as written or accent-folded), as the keyword SQL decides."""
    return _matches(fact_text, _keyword_forms(keywords))


def reweigh_keywords(
    candidates: Iterable[Candidate],
    keywords: Sequence[str],
    weights: Sequence[float],
    entity_patterns: Sequence[str] = (),
) -> None:
    """Set each candidate's keyword signal to the idf-weighted share of the keywords it contains."""
    total = sum(weights)
    prefixes = [pattern.removesuffix("%") for pattern in entity_patterns]
    forms = _keyword_forms(keywords)
    for candidate in candidates:
        if not keywords or total <= 0.0:
            continue
        matches = _matches(candidate.fact_text, forms)
        score = sum(weight for weight, hit in zip(weights, matches, strict=True) if hit) / total
        if prefixes and any(candidate.entity_key.startswith(prefix) for prefix in prefixes):
            score = max(score, AGGREGATION_KEYWORD_SCORE)
        candidate.keyword = min(1.0, score)
        if candidate.keyword > 0.0:
            candidate.sources.add("keyword")
