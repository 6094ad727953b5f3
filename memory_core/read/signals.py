"""Stage 2 of retrieval: the semantic, keyword and graph signals (seeds R3-R5).

The three fact signals run as **one SQL statement** (CTEs ``sem``, ``kw``, graph hops, ``broad``)
that returns every candidate once with what each signal saw; the pure ranking code then scores
them. Every CTE is scoped by ``agent_id`` and the same fact filter: validity (active, or the
time-travel window), ``min_confidence``, the optional session and ``entity_keys`` filters. User
text never reaches the SQL text: keywords are bound parameters (matched with ``strpos``, which
has no wildcards), and the SQL is assembled only from the fixed fragments below.

Vector search and a small agent in a large table
------------------------------------------------
A table-wide HNSW index walks everyone's facts to find one agent's: pgvector 0.6 returned at
most ``hnsw.ef_search`` tuples before the agent filter, and pgvector 0.8's iterative scans, which
walk on until enough rows pass it, measured slower and less accurate than an agent's own index
(docs/performance.md, "Vector search"). So there is none (migration 0010), and the strategy is
chosen per agent (:func:`_vector_strategy`):

* **agent_index** when the agent has a partial HNSW index of its own
  (:mod:`memory_core.read.agent_index`; built for agents with at least
  ``retrieval_agent_index_min_facts`` facts): every tuple it yields is the agent's, and
  ``SET LOCAL hnsw.ef_search`` is raised to ``retrieval_ef_search`` (300 by default).
* **exact** otherwise, and whenever an ``entity_keys`` filter narrows the candidates: the
  ``(agent_id, ...)`` b-tree narrows the scan to the agent's rows and they are ordered by true
  distance (the ``+ 0`` in the ORDER BY keeps the planner off any vector index an operator may
  have added). Comparing 1,000 vectors takes about a millisecond, 10,000 under twenty; a large
  agent whose index is not built yet is searched exactly (slower, never wrong) while the build
  runs in the background or Beat's agent indexer gets to it.
* **guard**: if the index scan still returns fewer rows than wanted, the semantic search is
  re-run exactly (a short answer is the symptom of the filtered-ANN problem).

The agent's fact count comes from the resolution statement, counted up to
:data:`EXACT_SCAN_MAX_FACTS` or the index threshold only (a bounded index scan); past it, a full
count is cached per agent for :data:`AGENT_COUNT_TTL_SEC`.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from memory_core.config import MemoryConfig
from memory_core.db.driver_reads import AGENT_LITERAL, fetch_all, fetch_scalar
from memory_core.db.vectors import vector_param
from memory_core.read.agent_index import agent_indexes, database_key
from memory_core.read.entities import TimeWindow, fact_validity_sql, window_params
from memory_core.read.planner import fold_words
from memory_core.read.rank import AGGREGATION_KEYWORD_SCORE, Candidate, graph_score, merge_candidates
from memory_core.read.read_transaction import plan_generically, set_ef_search
from memory_core.read.side_reads import SideSubmit
from memory_core.read.term_stats import estimated_share, term_stats
from memory_core.settings import DEFAULT_RETRIEVAL_EF_SEARCH

__all__ = [
    "AGENT_COUNT_TTL_SEC",
    "DECAYED_CONFIDENCE_SQL",
    "ELIGIBLE_CTE",
    "EXACT_SCAN_MAX_FACTS",
    "FACT_COLUMNS",
    "GraphNode",
    "SignalRequest",
    "SignalResult",
    "base_candidate",
    "confidence_params",
    "fact_filter_sql",
    "link_filter_sql",
    "run_signals",
    "start_indexed_semantic",
]

# An agent's facts are counted cheaply (a bounded index scan) up to this many; larger agents are
# counted in full, and that count is cached (see the module docstring).
EXACT_SCAN_MAX_FACTS = 20_000
# pgvector's largest ef_search.
_HNSW_EF_SEARCH_MAX = 1000
# A full count of a large agent's facts is reused for this long.
AGENT_COUNT_TTL_SEC = 600.0
# A keyword expected to match more of the agent's facts than this finds no candidates itself
# (it still counts in the keyword score of those the other words find): memory_core.read.term_stats.
KEYWORD_MAX_MATCHES = 1_000
# Graph BFS keeps at most this many entities per hop (strongest paths first).
GRAPH_FRONTIER_LIMIT = 100

# Searches of an agent's own partial index ask it for twice the rows they keep. The default
# ef_search (ARANDU_RETRIEVAL_EF_SEARCH) is 300: the walk's cost grows with it and recall
# flattens, and 300 keeps recall@10 above 0.95 with a margin at 100,000 facts
# (docs/performance.md, "A large agent's vector search").
AGENT_INDEX_OVERFETCH = 2

VectorStrategy = Literal["exact", "agent_index"]


def _folded(word: str) -> str:
    return "".join(fold_words(word)) or word


_COUNT_ACTIVE_SQL = "SELECT count(*) FROM memory_facts WHERE agent_id = :agent AND valid_to IS NULL"
_COUNT_ALL_SQL = "SELECT count(*) FROM memory_facts WHERE agent_id = :agent"


class _AgentCounts:
    """Full active-fact counts of large agents, cached briefly (they only steer the search strategy)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Keyed by database too: one process may serve several databases (tests do).
        self._values: dict[tuple[str, str, bool], tuple[float, int]] = {}

    def get(self, session: Session, agent_id: str, window: TimeWindow | None) -> int:
        key = (database_key(session), agent_id, window is None)
        now = time.monotonic()
        with self._lock:
            cached = self._values.get(key)
        if cached is not None and now - cached[0] < AGENT_COUNT_TTL_SEC:
            return cached[1]
        sql = _COUNT_ACTIVE_SQL if window is None else _COUNT_ALL_SQL
        count = int(fetch_scalar(session, sql, {"agent": agent_id}))
        with self._lock:
            if len(self._values) > 10_000:
                self._values.clear()
            self._values[key] = (now, count)
        return count

    def clear(self) -> None:
        with self._lock:
            self._values.clear()


agent_counts = _AgentCounts()


@dataclass(frozen=True, slots=True)
class GraphNode:
    """An entity the graph BFS starts from: a query entity (depth 0) or a primed neighbour (depth 1)."""

    key: str
    depth: int
    strength: float = 1.0
    edge_time: datetime | None = None


@dataclass
class SignalRequest:
    """Everything the signal statement needs."""

    agent_id: str
    config: MemoryConfig
    now: datetime
    query_vector: list[float] | None = None
    keywords: Sequence[str] = ()
    entity_patterns: Sequence[str] = ()
    graph_nodes: Sequence[GraphNode] = ()
    mentioned: frozenset[str] = frozenset()
    broad: bool = False
    window: TimeWindow | None = None
    session_id: str | None = None
    filter_keys: Sequence[str] | None = None
    agent_facts: int = 0
    table_rows: float = 0.0
    # Agents with at least this many facts get a partial vector index of their own (0 = never).
    agent_index_min_facts: int = 0
    # The HNSW candidate list of a search through that index (raised to what the search asks for).
    agent_index_ef_search: int = DEFAULT_RETRIEVAL_EF_SEARCH
    # The keywords that find candidates (None = all of them); see choose_search_keywords.
    search_keywords: Sequence[str] | None = None
    # Term queries whose document frequencies an exact pass over the agent's facts counts too
    # (memory_core.read.keywords.term_queries); the counts come back in SignalResult.term_counts.
    term_queries: Sequence[str] = ()
    # True when the read transaction already plans generically (plan_generically ran before).
    generic_plans_set: bool = False


@dataclass
class SignalResult:
    """Candidates of every signal, merged by fact id, and what each signal contributed."""

    candidates: list[Candidate] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    vector_strategy: str = "none"
    duration_ms: float = 0.0
    keywords_dropped: list[str] = field(default_factory=list)
    # 2 when the semantic search ran on a side connection beside the other signals' statement.
    statements: int = 1
    # True when that semantic search was started before the query's entities were resolved.
    semantic_started_early: bool = False
    # (facts counted, [matches of each of request.term_queries]) when the exact pass counted them.
    term_counts: tuple[int, list[int]] | None = None
    # True when the statement ran with a generic plan, leaving plan_cache_mode = force_generic_plan
    # set for the rest of the read transaction (see _plans_generically).
    generic_plans: bool = False
    # The HNSW candidate list of the search through the agent's own index (None: searched exactly).
    ef_search: int | None = None

    def summary(self) -> dict[str, Any]:
        """JSON-friendly form for the trace."""
        return {
            "candidates": len(self.candidates),
            "per_signal": dict(self.counts),
            "vector_strategy": self.vector_strategy,
            "ef_search": self.ef_search,
            "keywords_too_common": list(self.keywords_dropped),
            "duration_ms": round(self.duration_ms, 2),
            "statements": self.statements,
            "semantic_started_early": self.semantic_started_early,
            "generic_plans": self.generic_plans,
        }


# --- SQL fragments (fixed text; every value is a bound parameter) ------------------------

ELIGIBLE_CTE = """
eligible AS (
    SELECT l.fact_id AS id FROM memory_fact_entity_links l
    WHERE l.agent_id = :agent AND l.entity_key = ANY(CAST(:filter_keys AS text[]))
    UNION
    SELECT f0.id FROM memory_facts f0
    WHERE f0.agent_id = :agent AND f0.entity_key = ANY(CAST(:filter_keys AS text[]))
)"""

_SEM_EXACT_CTE = """
sem AS (
    SELECT f.id, f.embedding_vec <=> CAST(:vec AS vector) AS distance
    FROM memory_facts f
    WHERE {fact_filter} AND f.embedding_vec IS NOT NULL
    ORDER BY (f.embedding_vec <=> CAST(:vec AS vector)) + 0, f.id
    LIMIT :sem_limit
)"""

# An agent searched exactly, when the query also has words to search: one pass over the agent's
# facts feeds both the semantic CTE and the keyword pool (_KW_SCANNED_POOL). Searched apart, the
# keyword pool of a mid-size agent was planned as its b-tree bitmap ANDed with the table-wide
# GIN index, which for a word common elsewhere ("last", "week") reads every agent's matches
# (docs/performance.md, "Read statements"). The exact scan reads all the agent's rows anyway.
#
# The same pass can count the keywords' document frequencies (memory_core.read.keywords; else a
# second pass over the same rows): it then reads every
# fact valid in the window, as the counts need, flags those the signals may use (``usable``:
# min_confidence) and tests each keyword's term query once per fact (_TERM_COUNTS_CTE).
_EXACT_SCAN_CTE = """
scanned AS MATERIALIZED (
    SELECT f.id, f.embedding_vec <=> CAST(:vec AS vector) AS distance,
           f.search_vector @@ (SELECT to_tsquery('arandu_search', :tsquery)) AS kw_hit,
           f.fact_text, f.entity_key, f.importance, f.valid_from, f.search_vector{counted_columns}
    FROM memory_facts f
    WHERE {scan_filter}
),
sem AS (
    SELECT id, distance FROM scanned WHERE distance IS NOT NULL{usable}
    ORDER BY distance, id
    LIMIT :sem_limit
)"""

_TERM_HIT_COLUMN = "f.search_vector @@ (SELECT to_tsquery('arandu_search', :term_query_{index})) AS term_hit_{index}"
# The term queries are built in a subquery (an init plan, run once): written as a bare
# to_tsquery(:x) a generic plan runs it for every fact scanned (only a plan made for the
# parameters' values folds it to a constant), which made a 1,000-fact scan 8x slower.
# One row: the facts counted, then each term query's matches, as "N,n1,n2,..." (one short text
# on every candidate row is cheaper to fetch than an array, and the statement stays one).
_TERM_COUNTS_CTE = """
term_counts AS (
    SELECT concat_ws(',', count(*), {term_counts}) AS counts FROM scanned
)"""
_TERM_COUNT = "count(*) FILTER (WHERE term_hit_{index})"

# The agent's own partial HNSW index: the agent is a literal here so the planner can prove the
# index predicate even under a generic plan (see memory_core.read.agent_index).
_SEM_AGENT_INDEX_CTE = """
sem_ann AS (
    SELECT f.id, f.embedding_vec <=> CAST(:vec AS vector) AS distance
    FROM memory_facts f
    WHERE f.agent_id = :agent_literal AND {fact_filter} AND f.embedding_vec IS NOT NULL
    ORDER BY f.embedding_vec <=> CAST(:vec AS vector)
    LIMIT :ann_limit
),
sem AS (SELECT id, distance FROM sem_ann ORDER BY distance, id LIMIT :sem_limit)"""

# The keyword signal's pool: facts holding a searched word (the GIN index; the words too common
# to search were dropped beforehand), and the most important facts of the aggregation patterns
# ("my friends" -> person:%). Only the top :kw_limit of the pattern facts can make the cut (they
# all score matched = 0 unless a word matched too, and then the word part finds them), so that
# part reads the agent's importance index in order and stops (migration 0006) instead of
# reading every person fact of the agent to sort them.
# {agent_scope} names the agent as a literal when it has a keyword index of its own, for the
# planner to prove that partial index's predicate (memory_core.read.agent_index).
# The pool carries what ranking it needs, so its rows are not fetched a second time by id (for a
# large agent's common words, a thousand heap visits).
_KW_TEXT_POOL = (
    "SELECT f.id, f.fact_text, f.entity_key, f.importance, f.valid_from, {matched} AS matched FROM memory_facts f "
    "WHERE {agent_scope}{fact_filter} AND f.search_vector @@ (SELECT to_tsquery('arandu_search', :tsquery))"
)
_KW_SCANNED_POOL = (
    "SELECT id, fact_text, entity_key, importance, valid_from, {matched} AS matched FROM scanned WHERE kw_hit{usable}"
)
_KW_PATTERN_POOL = """(
        SELECT f.id, f.fact_text, f.entity_key, f.importance, f.valid_from, {matched} AS matched FROM memory_facts f
        WHERE {fact_filter} AND f.entity_key LIKE ANY(CAST(:entity_patterns AS text[]))
        ORDER BY f.importance DESC, f.valid_from DESC, f.id
        LIMIT :kw_limit
    )"""

# How many of the keywords each pooled fact holds ({matched} in each pool): each keyword's prefix
# query against the fact's stored tsvector, so a word matches with or without its accents, as the pool found it (the
# text-search configuration folds both sides, memory_core.db.text_search). Each query is an init
# plan, parsed once per statement, not once per row.
_KW_CTE = """
kw_pool AS (
    {pool}
),
kw AS (
    SELECT p.id, p.matched,
           p.entity_key LIKE ANY(CAST(:entity_patterns AS text[])) AS pattern_hit
    FROM kw_pool p
    ORDER BY matched DESC, pattern_hit DESC, p.importance DESC, p.valid_from DESC, p.id
    LIMIT :kw_limit
)"""
_KW_MATCH_TERM = "CAST(search_vector @@ (SELECT to_tsquery('arandu_search', :kw_query_{index})) AS int)"

_GRAPH_SEED_CTE = """
g0 AS (
    SELECT t.key, t.depth, t.strength, t.edge_time
    FROM unnest(CAST(:g_keys AS text[]), CAST(:g_depths AS int[]), CAST(:g_strengths AS float8[]),
                CAST(:g_times AS timestamptz[])) AS t(key, depth, strength, edge_time)
)"""

_GRAPH_HOP_CTE = """
{name} AS (
    SELECT key, depth, strength, edge_time FROM (
        SELECT DISTINCT ON (n.key) n.key, {depth} AS depth, n.strength, n.edge_time
        FROM (
            SELECT CASE WHEN r.source_entity_key = p.key THEN r.target_entity_key ELSE r.source_entity_key END AS key,
                   p.strength * r.strength AS strength,
                   GREATEST(r.valid_from, COALESCE(r.last_used_at, r.valid_from)) AS edge_time
            FROM {previous} p
            JOIN memory_entity_relationships r
              ON r.agent_id = :agent AND (r.source_entity_key = p.key OR r.target_entity_key = p.key)
            WHERE p.depth = {previous_depth} AND r.strength >= :min_edge_strength AND {edge_validity}
        ) n
        WHERE n.key NOT IN ({visited})
        ORDER BY n.key, n.strength DESC
    ) best
    ORDER BY strength DESC, key
    LIMIT :frontier
)"""

_GRAPH_LEVEL_KEYS = "SELECT key FROM {name}"

# The facts of one BFS level (the query's entities, the primed neighbours, then each hop),
# best path per fact. A deeper level is read only while the shallower ones found fewer than
# :graph_limit facts (the gate is a one-time filter: the level's facts are not even fetched),
# which is exact because ``graph`` orders by depth first: a large agent's hop-2 frontier (100
# entities, ~18,000 fact rows at 100,000 facts) is rarely needed.
_GRAPH_LEVEL_FACTS_CTE = """
{name} AS (
    SELECT DISTINCT ON (f.id) f.id, gl.key AS via_key, gl.depth, gl.strength, gl.edge_time,
           f.importance, f.valid_from
    FROM (
        SELECT l.fact_id AS id, g.key, g.depth, g.strength, g.edge_time
        FROM {level} g JOIN memory_fact_entity_links l ON l.agent_id = :agent AND l.entity_key = g.key
        UNION ALL
        SELECT f0.id, g.key, g.depth, g.strength, g.edge_time
        FROM {level} g JOIN memory_facts f0 ON f0.agent_id = :agent AND f0.entity_key = g.key
    ) gl JOIN memory_facts f ON f.id = gl.id
    WHERE {fact_filter} {gate}
    ORDER BY f.id, gl.depth, gl.strength DESC
)"""

_GRAPH_GATE = "AND (SELECT count(*) FROM ({found}) AS found) < :graph_limit AND f.id NOT IN ({found})"

# The same from the links (every fact is linked to its own subject), which carry their fact's
# ranking columns (migration 0011): each entity gives only its :graph_limit most important facts
# not found before, the first entries of ix_fact_entity_links_entity_ranked. Exact: a fact an
# entity leaves out is outranked by that many of the entity's facts, each on a path at least as
# good, so it could not make the :graph_limit either (a common entity's hundreds of facts are
# no longer read to keep a few; the facts themselves are not read at all).
_GRAPH_LEVEL_LINKS_CTE = """
{name} AS (
    SELECT DISTINCT ON (t.id) t.id, g.key AS via_key, g.depth, g.strength, g.edge_time, t.importance, t.valid_from
    FROM {level} g
    CROSS JOIN LATERAL (
        SELECT l.fact_id AS id, l.fact_importance AS importance, l.fact_valid_from AS valid_from
        FROM memory_fact_entity_links l
        WHERE l.agent_id = :agent AND l.entity_key = g.key AND {link_filter} {gate}
        ORDER BY l.fact_importance DESC, l.fact_valid_from DESC, l.fact_id
        LIMIT :graph_limit
    ) t
    ORDER BY t.id, g.depth, g.strength DESC
)"""

_GRAPH_LINK_GATE = "AND (SELECT count(*) FROM ({found}) AS found) < :graph_limit AND l.fact_id NOT IN ({found})"

# A hop's frontier is read only while the shallower levels found fewer than :graph_limit facts:
# the gate above sits inside the level's lateral read of links, so without this one the hop's
# relationships were still read and sorted first (at 100,000 facts, "What are Olga's hobbies?"
# found its 30 facts at depth 0 and still walked 275 edges of 7 neighbours: 0.45 of the 2.8 ms
# statement). Also a one-time filter: the hop is not read at all when it fails.
_GRAPH_GATED_HOP = "(SELECT * FROM {hop} WHERE (SELECT count(*) FROM ({found}) AS found) < :graph_limit)"

_GRAPH_FOUND_IDS = "SELECT id FROM {name}"
_GRAPH_LEVEL_FACT_ROWS = "SELECT id, via_key, depth, strength, edge_time, importance, valid_from FROM {name}"

_GRAPH_FACTS_CTE = """
graph AS (
    SELECT id, via_key, depth, strength, edge_time FROM ({levels}) AS graph_best
    ORDER BY depth, strength DESC, importance DESC, valid_from DESC, id
    LIMIT :graph_limit
)"""

_BROAD_CTE = """
broad AS (
    SELECT f.id FROM memory_facts f
    WHERE {fact_filter}
    ORDER BY f.importance DESC, f.valid_from DESC, f.id
    LIMIT :broad_limit
)"""

# The columns a Candidate is built from (``f`` = memory_facts, ``ev`` = its source event), first in
# every statement base_candidate() reads, in this order (it reads them by position). Only what
# ranking, the context and the answer use: the fact's retrieval counters (memory_fact_usage), its
# creation time, type and correction count were read for every candidate and never looked at
# (spreading activation weighs its facts by those counters inside its own statement). Without
# them and their join: on the benchmark's 1,000-fact agent the signal statement took 2.56 instead
# of 2.74 ms, one primary-key probe fewer for each of its ~90 candidates.
# Ids come back as text: they are used as strings, and a uuid.UUID made and formatted for each of
# a retrieve's few hundred rows and three id columns cost ~0.5 ms of the API's CPU.
FACT_COLUMNS = """CAST(f.id AS text), f.entity_key, f.entity_name, f.attribute_key, f.fact_text,
       f.speaker, f.confidence, f.importance, f.valid_from, f.valid_to, f.reinforcement_count,
       f.last_confirmed_at, CAST(f.cluster_id AS text), CAST(f.source_event_id AS text), ev.message_id,
       (SELECT me.importance_score FROM memory_entities me
        WHERE me.agent_id = f.agent_id AND me.canonical_key = f.entity_key) AS entity_importance,
       GREATEST(f.created_at, f.last_confirmed_at) AS confidence_since"""

_FINAL_SELECT = """
SELECT {fact_columns},
       {similarity} AS similarity,
       {in_sem} AS in_sem,
       {kw_matched} AS kw_matched, {kw_pattern} AS kw_pattern,
       {g_key} AS g_key, {g_depth} AS g_depth, {g_strength} AS g_strength, {g_time} AS g_time,
       {in_broad} AS in_broad, {term_counts} AS term_counts
FROM ({candidates}) AS cand
JOIN memory_facts f ON f.id = cand.id
{joins}
LEFT JOIN memory_events ev ON ev.id = f.source_event_id
"""


# R6: ``min_confidence`` filters on the decayed confidence (seeds: "confidence after temporal decay
# ... is used as a filter"), the ``effective_confidence`` of memory_core.read.rank:
# ``max(min(confidence, floor), confidence x decay ** weeks)`` since the fact was stored or last
# confirmed. With the stored confidence at or above the threshold (checked beside it, and
# index-friendly), it passes when the floor alone does or the decayed value does; the decay is
# one power() per fact the other conditions kept. Measured from ``created_at`` (when this memory
# learnt it), not from when it was said: imported history would otherwise be filtered out whole.
DECAYED_CONFIDENCE_SQL = (
    "(CAST(:confidence_floor AS float8) >= :min_confidence OR f.confidence * power(CAST(:confidence_decay AS float8), "
    "GREATEST(0.0, date_part('epoch', CAST(:confidence_now AS timestamptz) - GREATEST(f.created_at, "
    "f.last_confirmed_at)) / 604800.0)) >= :min_confidence)"
)


def confidence_params(config: MemoryConfig, now: datetime) -> dict[str, Any]:
    """The parameters :data:`DECAYED_CONFIDENCE_SQL` (so :func:`fact_filter_sql`) binds, as of ``now``."""
    return {
        "min_confidence": config.min_confidence,
        "confidence_floor": config.confidence_floor,
        "confidence_decay": config.confidence_decay_per_week,
        "confidence_now": now,
    }


def fact_filter_sql(window: TimeWindow | None, *, session_filter: bool, entity_filter: bool) -> str:
    """The condition every fact signal applies to ``memory_facts f``.

    Binds ``:agent``, the confidence parameters (:func:`confidence_params`), the window parameters,
    ``:session_id`` when ``session_filter`` and needs the ``eligible`` CTE (:data:`ELIGIBLE_CTE`)
    when ``entity_filter``.
    """
    parts = [
        "f.agent_id = :agent",
        fact_validity_sql("f", window),
        "f.confidence >= :min_confidence",
        DECAYED_CONFIDENCE_SQL,
    ]
    if session_filter:
        parts.append(
            "EXISTS (SELECT 1 FROM memory_events se WHERE se.id = f.source_event_id "
            "AND se.agent_id = :agent AND se.session_id = :session_id)"
        )
    if entity_filter:
        parts.append("f.id IN (SELECT id FROM eligible)")
    return " AND ".join(parts)


def link_filter_sql(window: TimeWindow | None, *, entity_filter: bool) -> str:
    """:func:`fact_filter_sql` on a link's copy of its fact's columns (``memory_fact_entity_links l``).

    Without the session condition: narrowed to a session, read the facts (their source event decides).
    The links carry their fact's stored confidence, not when it was stored or last confirmed: this
    keeps the facts whose stored confidence passes ``min_confidence`` (a necessary condition of
    the decayed one), and ranking drops those whose decayed confidence does not
    (:func:`memory_core.read.rank.rank_candidates`).
    """
    parts = [fact_validity_sql("l", window, prefix="fact_"), "l.fact_confidence >= :min_confidence"]
    if entity_filter:
        parts.append("l.fact_id IN (SELECT id FROM eligible)")
    return " AND ".join(parts)


def _fact_filter(request: SignalRequest) -> str:
    return fact_filter_sql(
        request.window,
        session_filter=request.session_id is not None,
        entity_filter=request.filter_keys is not None,
    )


def _graph_ctes(request: SignalRequest, fact_filter: str) -> list[str]:
    max_hops = request.config.graph_max_hops
    ctes = [_GRAPH_SEED_CTE]
    levels = ["g0"]
    visited = [_GRAPH_LEVEL_KEYS.format(name="g0")]
    previous, previous_depth = "g0", 1
    edge_validity = fact_validity_sql("r", request.window)
    for depth in range(2, max_hops + 1):
        name = f"hop{depth}"
        ctes.append(
            _GRAPH_HOP_CTE.format(
                name=name,
                depth=depth,
                previous=previous,
                previous_depth=previous_depth,
                edge_validity=edge_validity,
                visited=" UNION ALL ".join(visited),
            )
        )
        levels.append(name)
        visited.append(_GRAPH_LEVEL_KEYS.format(name=name))
        previous, previous_depth = name, depth
    # The query's own entities (depth 0) come before the primed neighbours (depth 1): two levels.
    levels = ["(SELECT * FROM g0 WHERE depth = 0)", "(SELECT * FROM g0 WHERE depth = 1)", *levels[1:]]
    # Narrowed to a session, a fact's source event decides: the facts themselves are read.
    from_links = request.session_id is None
    link_filter = link_filter_sql(request.window, entity_filter=request.filter_keys is not None)
    fact_levels: list[str] = []
    for index, nodes in enumerate(levels):
        name = f"graph_lvl{index}"
        gate = ""
        level = nodes
        if fact_levels:
            found = " UNION ALL ".join(_GRAPH_FOUND_IDS.format(name=earlier) for earlier in fact_levels)
            gate = (_GRAPH_LINK_GATE if from_links else _GRAPH_GATE).format(found=found)
            if nodes.startswith("hop"):
                level = _GRAPH_GATED_HOP.format(hop=nodes, found=found)
        if from_links:
            ctes.append(_GRAPH_LEVEL_LINKS_CTE.format(name=name, level=level, link_filter=link_filter, gate=gate))
        else:
            ctes.append(_GRAPH_LEVEL_FACTS_CTE.format(name=name, level=level, fact_filter=fact_filter, gate=gate))
        fact_levels.append(name)
    levels_sql = " UNION ALL ".join(_GRAPH_LEVEL_FACT_ROWS.format(name=name) for name in fact_levels)
    ctes.append(_GRAPH_FACTS_CTE.format(levels=levels_sql))
    return ctes


def _counts_terms(request: SignalRequest) -> bool:
    """Whether the exact pass also counts ``request.term_queries``.

    Only when no session or entity filter narrows it: the counts are over every fact valid in
    the window, so the pass then reads all of them.
    """
    return bool(request.term_queries) and request.session_id is None and request.filter_keys is None


def _exact_scan_ctes(
    request: SignalRequest, fact_filter: str, params: dict[str, Any], columns: dict[str, str]
) -> list[str]:
    """The one pass over an exactly searched agent's facts; with the keyword counts when asked."""
    if not _counts_terms(request):
        return [_EXACT_SCAN_CTE.format(counted_columns="", scan_filter=fact_filter, usable="")]
    indexes = range(len(request.term_queries))
    for index, query in zip(indexes, request.term_queries, strict=True):
        params[f"term_query_{index}"] = query
    counted_columns = (
        f",\n           (f.confidence >= :min_confidence AND {DECAYED_CONFIDENCE_SQL}) AS usable, "
        + ", ".join(_TERM_HIT_COLUMN.format(index=index) for index in indexes)
    )
    columns["term_counts"] = "(SELECT counts FROM term_counts)"
    scan = _EXACT_SCAN_CTE.format(
        counted_columns=counted_columns,
        scan_filter=f"f.agent_id = :agent AND {fact_validity_sql('f', request.window)}",
        usable=" AND usable",
    )
    counts = _TERM_COUNTS_CTE.format(term_counts=", ".join(_TERM_COUNT.format(index=index) for index in indexes))
    return [scan, counts]


def _statement(request: SignalRequest, strategy: VectorStrategy | None) -> tuple[str, dict[str, Any]]:
    config = request.config
    fact_filter = _fact_filter(request)
    budget = config.signal_max_facts * (2 if request.broad else 1)
    sem_limit = max(config.signal_max_facts, config.reranker_candidate_multiplier * config.topk_facts)
    params: dict[str, Any] = {
        "agent": request.agent_id,
        **confidence_params(config, request.now),
        **window_params(request.window),
    }
    if request.session_id is not None:
        params["session_id"] = request.session_id
    ctes: list[str] = []
    if request.filter_keys is not None:
        ctes.append(ELIGIBLE_CTE)
        params["filter_keys"] = list(request.filter_keys)
    sources: list[str] = []
    joins: list[str] = []
    columns = {
        "similarity": "NULL::float8",
        "in_sem": "false",
        "kw_matched": "NULL::int",
        "kw_pattern": "false",
        "g_key": "NULL::text",
        "g_depth": "NULL::int",
        "g_strength": "NULL::float8",
        "g_time": "NULL::timestamptz",
        "in_broad": "false",
        "term_counts": "NULL::text",
    }
    if request.query_vector is not None:
        params["vec"] = vector_param(request.query_vector)
        columns["similarity"] = "1 - (f.embedding_vec <=> CAST(:vec AS vector))"
    keywords = list(request.keywords)
    searched = keywords if request.search_keywords is None else list(request.search_keywords)
    patterns = list(request.entity_patterns)
    one_pass = strategy == "exact" and request.query_vector is not None and bool(searched)
    if request.query_vector is not None and strategy is not None:
        params["sem_limit"] = sem_limit
        if strategy == "agent_index":
            params["ann_limit"] = sem_limit * AGENT_INDEX_OVERFETCH
            ctes.append(_SEM_AGENT_INDEX_CTE.format(fact_filter=fact_filter))
        elif one_pass:
            ctes.extend(_exact_scan_ctes(request, fact_filter, params, columns))
        else:
            ctes.append(_SEM_EXACT_CTE.format(fact_filter=fact_filter))
        sources.append("SELECT id FROM sem")
        joins.append("LEFT JOIN sem ON sem.id = f.id")
        columns["in_sem"] = "sem.id IS NOT NULL"
    if searched or patterns:
        # One term per keyword, written out: a subquery over a keyword array cost ~8 us per row,
        # for a large agent's thousand rows.
        terms = []
        for index, word in enumerate(keywords):
            params[f"kw_query_{index}"] = f"{_folded(word)}:*"
            terms.append(_KW_MATCH_TERM.format(index=index))
        matched = " + ".join(terms) or "0"
        pools = []
        if searched:
            if one_pass:
                usable = " AND usable" if _counts_terms(request) else ""
                pools.append(_KW_SCANNED_POOL.format(usable=usable, matched=matched))
            else:
                scope = f"f.agent_id = {AGENT_LITERAL} AND " if strategy == "agent_index" else ""
                pools.append(_KW_TEXT_POOL.format(fact_filter=fact_filter, agent_scope=scope, matched=matched))
            # One form per word: the configuration folds accents in the database (db.text_search).
            forms = dict.fromkeys(_folded(word) for word in searched)
            params["tsquery"] = " | ".join(f"{form}:*" for form in forms)
        if patterns:
            pools.append(_KW_PATTERN_POOL.format(fact_filter=fact_filter, matched=matched))
        params["entity_patterns"] = patterns
        params["kw_limit"] = budget
        ctes.append(_KW_CTE.format(pool="\n    UNION\n    ".join(pools)))
        sources.append("SELECT id FROM kw")
        joins.append("LEFT JOIN kw ON kw.id = f.id")
        columns["kw_matched"] = "kw.matched"
        columns["kw_pattern"] = "COALESCE(kw.pattern_hit, false)"
    if request.graph_nodes:
        nodes = list(request.graph_nodes)
        params.update(
            {
                "g_keys": [node.key for node in nodes],
                "g_depths": [node.depth for node in nodes],
                "g_strengths": [node.strength for node in nodes],
                "g_times": [node.edge_time for node in nodes],
                "min_edge_strength": config.graph_min_edge_strength,
                "frontier": GRAPH_FRONTIER_LIMIT,
                "graph_limit": config.graph_max_facts * (2 if request.broad else 1),
            }
        )
        ctes.extend(_graph_ctes(request, fact_filter))
        sources.append("SELECT id FROM graph")
        joins.append("LEFT JOIN graph ON graph.id = f.id")
        columns.update(
            {
                "g_key": "graph.via_key",
                "g_depth": "graph.depth",
                "g_strength": "graph.strength",
                "g_time": "graph.edge_time",
            }
        )
    if request.broad:
        params["broad_limit"] = budget
        ctes.append(_BROAD_CTE.format(fact_filter=fact_filter))
        sources.append("SELECT id FROM broad")
        joins.append("LEFT JOIN broad ON broad.id = f.id")
        columns["in_broad"] = "broad.id IS NOT NULL"
    if not sources:
        return "", params
    sql = "WITH " + ",\n".join(cte.strip() for cte in ctes) + "\n"
    sql += _FINAL_SELECT.format(
        fact_columns=FACT_COLUMNS,
        candidates=" UNION ".join(sources),
        joins="\n".join(joins),
        **columns,
    )
    return sql, params


# base_candidate() reads a row's first columns by position, in this order (FACT_COLUMNS's).
_FACT_COLUMN_COUNT = 17


def base_candidate(row: Any) -> Candidate:
    """A candidate with no signal yet, from a row whose first columns are :data:`FACT_COLUMNS`.

    The columns are read by position: a row attribute lookup costs ~0.5 µs, and with 16 of them
    for each of the ~100-300 rows a retrieve reads, by name was a fifth of its Python CPU.
    """
    (
        fact_id,
        entity_key,
        entity_name,
        attribute_key,
        fact_text,
        speaker,
        confidence,
        importance,
        valid_from,
        valid_to,
        reinforcement_count,
        last_confirmed_at,
        cluster_id,
        source_event_id,
        message_id,
        entity_importance,
        confidence_since,
    ) = row[:_FACT_COLUMN_COUNT]
    return Candidate(
        fact_id=str(fact_id),
        entity_key=str(entity_key),
        fact_text=str(fact_text),
        valid_from=valid_from,
        entity_name=entity_name,
        attribute_key=attribute_key,
        speaker=speaker,
        confidence=float(confidence),
        importance=float(importance),
        valid_to=valid_to,
        reinforcement_count=int(reinforcement_count or 0),
        last_confirmed_at=last_confirmed_at,
        entity_importance=float(entity_importance) if entity_importance is not None else None,
        cluster_id=str(cluster_id) if cluster_id is not None else None,
        source_event_id=str(source_event_id) if source_event_id is not None else None,
        message_id=message_id,
        confidence_since=confidence_since,
    )


def _candidate(row: Any, request: SignalRequest) -> Candidate:
    config = request.config
    candidate = base_candidate(row)
    similarity = float(row.similarity) if row.similarity is not None else 0.0
    candidate.semantic = max(0.0, min(1.0, similarity))
    if row.in_sem and similarity >= config.min_similarity:
        candidate.sources.add("semantic")
    if row.kw_matched is not None:
        keyword = int(row.kw_matched) / len(request.keywords) if request.keywords else 0.0
        if row.kw_pattern:
            keyword = max(keyword, AGGREGATION_KEYWORD_SCORE)
        candidate.keyword = min(1.0, keyword)
        if candidate.keyword > 0.0:
            candidate.sources.add("keyword")
    if row.g_depth is not None:
        candidate.graph = graph_score(
            depth=int(row.g_depth),
            edge_strength=float(row.g_strength),
            fact_time=row.valid_from,
            edge_time=row.g_time,
            mentioned_in_query=str(row.g_key) in request.mentioned,
            now=request.now,
            config=config,
        )
        candidate.sources.add("graph")
    if row.in_broad:
        candidate.sources.add("broad")
    return candidate


def _exact_semantic_rows(session: Session, request: SignalRequest) -> list[Any]:
    exact_only = SignalRequest(
        agent_id=request.agent_id,
        config=request.config,
        now=request.now,
        query_vector=request.query_vector,
        window=request.window,
        session_id=request.session_id,
        filter_keys=request.filter_keys,
    )
    sql, params = _statement(exact_only, "exact")
    return fetch_all(session, sql, params, prepare=False)


def run_signals(
    session: Session,
    request: SignalRequest,
    side: SideSubmit | None = None,
    semantic: Future[list[Any]] | None = None,
) -> SignalResult:
    """Run the semantic, keyword and graph signals; return merged candidates.

    One statement, unless ``side`` can take the semantic search of a large agent (an HNSW walk)
    to a second connection: it then runs beside the keyword and graph statement
    (:mod:`memory_core.read.side_reads`), and the two halves' candidates are merged by fact id.
    ``semantic`` is that search already started by :func:`start_indexed_semantic`; it is always
    waited for, and its rows are used when the agent is still searched through its own index.
    """
    started = time.perf_counter()
    config = request.config
    result = SignalResult()
    strategy: VectorStrategy | None = None
    ef_search = wanted = 0
    try:
        if request.query_vector is not None:
            wanted = _semantic_wanted(config)
            strategy = _vector_strategy(session, request)
            if strategy == "agent_index":
                ef_search = _agent_index_ef_search(request, wanted)
                result.ef_search = ef_search
            result.vector_strategy = strategy
        if strategy != "agent_index" and semantic is not None:
            wait([semantic])  # the agent's index went away meanwhile: its rows are not this search's
            semantic = None
        result.semantic_started_early = semantic is not None
        if request.keywords and request.search_keywords is None:
            indexed = strategy == "agent_index"
            request.search_keywords, result.keywords_dropped = choose_search_keywords(session, request, indexed)
        split = (
            _side_by_side_rows(session, request, strategy, ef_search, side, semantic=semantic) if ef_search else None
        )
    finally:
        # A side read never outlives its request, whatever failed before it was taken up.
        if semantic is not None:
            wait([semantic])
    if split is not None:
        rows, result.generic_plans = split
        result.statements = 2
    else:
        if ef_search:
            set_ef_search(session, ef_search)
        sql, params = _statement(request, strategy)
        rows = []
        if sql and strategy == "exact" and _plans_generically(request):
            if not request.generic_plans_set:
                plan_generically(session)
            result.generic_plans = True
            rows = fetch_all(session, sql, params, prepare=True, inline_agent=request.agent_id)
        elif sql:
            # Planned for this agent every time: the plan depends on its own indexes.
            rows = fetch_all(session, sql, params, prepare=False, inline_agent=request.agent_id)
        result.term_counts = _term_counts(rows, request)
    # `wanted` is the statement's :sem_limit: fewer semantic rows means the ANN scan came back short.
    if strategy == "agent_index" and sum(1 for row in rows if row.in_sem) < wanted:
        # The filtered ANN scan came back short (deleted or filtered rows in the agent's graph):
        # redo the semantic part exactly and let it decide which facts are semantic candidates.
        exact_rows = _exact_semantic_rows(session, request)
        exact_ids = {str(row.id) for row in exact_rows}
        merged = merge_candidates(_candidate(row, request) for row in [*rows, *exact_rows])
        for fact_id, candidate in merged.items():
            candidate.sources.discard("semantic")
            if fact_id in exact_ids and candidate.semantic >= config.min_similarity:
                candidate.sources.add("semantic")
        result.vector_strategy = f"{strategy}->exact"
        return _finish(result, list(merged.values()), started)
    merged = merge_candidates(_candidate(row, request) for row in rows)
    return _finish(result, list(merged.values()), started)


def _plans_generically(request: SignalRequest) -> bool:
    """Whether a signal statement that may keep one generic plan does, for this request.

    Two statements may (their callers decide which runs): an exactly searched agent's (no index
    of its own), whose plan is the same whoever the agent is: its rows through the
    ``(agent_id, ...)`` b-tree, every other signal through indexes led by the agent; planning it
    for its parameters cost more than running it (docs/performance.md, "Read statements"), and
    its text takes a few shapes only (17 for the benchmark's 200 questions). And the keyword and
    graph statement of an agent with indexes of its own, run beside its semantic search, which
    names the agent as a literal (:func:`_side_by_side_rows`); and that agent's semantic search
    on the side connection, which names the agent and its LIMITs as literals
    (:func:`_with_literal_limits`): the generic plan is
    the HNSW walk the parameters' plan is. Not for time travel, sessions or entity filters: their
    keyword counts are not folded into the statement, and the statement that counts them must be
    planned for its parameters.
    """
    return request.window is None and request.session_id is None and request.filter_keys is None


def _term_counts(rows: Sequence[Any], request: SignalRequest) -> tuple[int, list[int]] | None:
    """The keyword counts the exact pass made (every row carries them), or None when it made none."""
    if not rows or not request.term_queries or rows[0].term_counts is None:
        return None
    total, *counts = (int(value) for value in str(rows[0].term_counts).split(","))
    return (total, counts) if len(counts) == len(request.term_queries) else None


def start_indexed_semantic(request: SignalRequest, side: SideSubmit) -> Future[list[Any]] | None:
    """Start the semantic search of an agent that has its own vector index, on a side connection.

    Its statement needs only the query's vector, so the walk of the index (the longest part of a
    large agent's retrieve) can begin before the query's entities are resolved and overlap them
    as well as the keyword and graph statement. Give the future to :func:`run_signals`. ``None``
    when no side connection is free. Not for searches narrowed by ``entity_keys`` (exact).
    """
    if request.query_vector is None or request.filter_keys is not None:
        return None
    ef_search = _agent_index_ef_search(request, _semantic_wanted(request.config))
    return _submit_semantic(side, request, "agent_index", ef_search)


def _semantic_wanted(config: MemoryConfig) -> int:
    return max(config.signal_max_facts, config.reranker_candidate_multiplier * config.topk_facts)


def _agent_index_ef_search(request: SignalRequest, wanted: int) -> int:
    # Never fewer candidates than the walk's LIMIT: without iterative scans an HNSW walk returns at
    # most ef_search rows.
    return min(_HNSW_EF_SEARCH_MAX, max(request.agent_index_ef_search, wanted * AGENT_INDEX_OVERFETCH))


def _semantic_only(request: SignalRequest) -> SignalRequest:
    return replace(
        request, keywords=(), search_keywords=(), entity_patterns=(), graph_nodes=(), broad=False, term_queries=()
    )


def _submit_semantic(
    side: SideSubmit, request: SignalRequest, strategy: VectorStrategy | None, ef_search: int
) -> Future[list[Any]] | None:
    """The semantic search on a side connection; with one generic plan when :func:`_plans_generically`."""
    generic = strategy == "agent_index" and _plans_generically(request)
    return side(_semantic_work(request, strategy, generic=generic), ef_search=ef_search, generic_plans=generic)


def _semantic_work(
    request: SignalRequest, strategy: VectorStrategy | None, *, generic: bool
) -> Callable[[Session], list[Any]]:
    def semantic_rows(side_session: Session) -> list[Any]:
        # Built on the side thread: a refused side read (busy process) costs no statement text.
        sem_sql, sem_params = _statement(_semantic_only(request), strategy)
        # ef_search (and, when generic, plan_cache_mode) was set as the side transaction opened
        # (SideSubmit): no round trip here.
        if not generic:
            return fetch_all(side_session, sem_sql, sem_params, prepare=False, inline_agent=request.agent_id)
        sem_sql, sem_params = _with_literal_limits(_AGENT_PARAMETER.sub(AGENT_LITERAL, sem_sql), sem_params)
        return fetch_all(side_session, sem_sql, sem_params, prepare=True, inline_agent=request.agent_id)

    return semantic_rows


_AGENT_PARAMETER = re.compile(r":agent\b")
_LIMIT_PARAMETERS = ("ann_limit", "sem_limit")


def _with_literal_limits(sql: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``sql`` with the HNSW walk's LIMITs written in, and the parameters left to bind.

    A generic plan must know how many rows the walk is asked for: with LIMIT $n PostgreSQL
    plans for a tenth of the agent's rows, which an HNSW index scan is no longer certain to
    win. They come from the config, so a deployment's statement text keeps one shape.
    """
    bound = dict(params)
    for name in _LIMIT_PARAMETERS:
        if name in bound:
            sql = re.sub(rf":{name}\b", str(int(bound.pop(name))), sql)
    return sql, bound


def _side_by_side_rows(
    session: Session,
    request: SignalRequest,
    strategy: VectorStrategy | None,
    ef_search: int,
    side: SideSubmit | None,
    *,
    semantic: Future[list[Any]] | None = None,
) -> tuple[list[Any], bool] | None:
    """The semantic rows (read on a side connection) and the other signals' rows; None if not split.

    With them, whether the other signals' statement ran with a generic plan (:func:`_plans_generically`).
    """
    rest_sql, rest_params = _statement(request, None)
    future = semantic
    if future is None:
        if side is None or not rest_sql:
            return None  # no side connections, or semantic search alone: nothing to run beside it
        future = _submit_semantic(side, request, strategy, ef_search)
        if future is None:
            return None  # every side connection is busy: one statement, as for a small agent
    generic = bool(rest_sql) and _plans_generically(request)
    try:
        if generic:
            # The agent as a literal throughout: a generic plan can then prove its own indexes'
            # predicates and knows how many rows it has (its b-tree range would be ANDed with its
            # keyword index otherwise: 23 ms for the benchmark's 100,000-fact agent).
            rest_sql = _AGENT_PARAMETER.sub(AGENT_LITERAL, rest_sql)
            plan_generically(session)
        # Prepared at once with its generic plan, or planned for its parameters every time.
        rest_rows = (
            fetch_all(session, rest_sql, rest_params, prepare=generic, inline_agent=request.agent_id)
            if rest_sql
            else []
        )
    finally:
        # Waited for even when the main statement failed: the side read must not outlive the request.
        semantic_rows = future.result()
    return [*semantic_rows, *rest_rows], generic


def choose_search_keywords(session: Session, request: SignalRequest, indexed: bool) -> tuple[list[str], list[str]]:
    """(keywords that find candidates, keywords too common to), by the agent's size and the term statistics."""
    keywords = list(request.keywords)
    if not keywords:
        return [], []
    agent_facts = request.agent_facts
    if indexed or agent_facts >= EXACT_SCAN_MAX_FACTS:
        agent_facts = agent_counts.get(session, request.agent_id, request.window)
    if agent_facts <= KEYWORD_MAX_MATCHES:
        return keywords, []
    shares, ordered = term_stats.shares(session)
    kept: list[str] = []
    dropped: list[str] = []
    for word in keywords:
        share = estimated_share(shares, ordered, list(dict.fromkeys((word, _folded(word)))))
        (dropped if share * agent_facts > KEYWORD_MAX_MATCHES else kept).append(word)
    return kept, dropped


def _vector_strategy(session: Session, request: SignalRequest) -> VectorStrategy:
    """The agent's own index when it has one, else an exact scan of the agent's facts.

    A large agent without its index gets one built in the background (the exact scan serves it
    meanwhile). Searches narrowed by ``entity_keys`` stay exact: their candidates are few.
    """
    narrowed = request.filter_keys is not None
    threshold = request.agent_index_min_facts
    if not narrowed and threshold > 0 and agent_indexes.has_index(session, request.agent_id):
        return "agent_index"
    # The bounded count reaches the threshold (memory_core.read.pipeline counts up to it).
    if threshold > 0 and request.agent_facts >= threshold and not agent_indexes.building(session, request.agent_id):
        bind = session.get_bind()
        agent_indexes.request(bind.engine if isinstance(bind, Connection) else bind, request.agent_id)
    return "exact"


def _finish(result: SignalResult, candidates: list[Candidate], started: float) -> SignalResult:
    # Semantic rows below min_similarity that no other signal found are not candidates.
    result.candidates = [candidate for candidate in candidates if candidate.sources]
    for name in ("semantic", "keyword", "graph", "broad"):
        result.counts[name] = sum(1 for candidate in result.candidates if name in candidate.sources)
    result.duration_ms = (time.perf_counter() - started) * 1000.0
    return result
