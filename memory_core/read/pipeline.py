"""The read pipeline: ``retrieve()`` = plan -> entities -> signals -> rank -> spread -> rerank -> compress.

Transactions and calls, in order:

1. The planner (pure). Small talk stops here: no database, no embedding, no LLM.
2. The query embedding, before any connection is taken (a slow embedder must not hold one).
3. One read-only transaction: entity resolution + filter keys + aggregation prefixes + agent size
   (one statement), 1-hop expansion, the three signals (one statement; for a large agent the
   semantic search runs beside it on a side connection, :mod:`memory_core.read.side_reads`), relevant events,
   spreading activation and context extras (for such an agent the events are read on a side
   connection too, beside spreading). Merge and rank run in between, in Python.
4. The reranker, after that transaction ended (never hold a transaction across an LLM call).
5. Compression (pure), then retrieval bookkeeping: the returned ids are queued and a background
   thread writes the counters in batches (:mod:`memory_core.read.bookkeeping`).

Fail-safe (seeds "Filosofia de Design"): bad input raises (:class:`RetrievalRequestError`, or
:class:`~memory_core.config.ConfigOverrideError` for overrides, both ``ValueError``); anything
else that breaks is logged and degrades: without entities or signals the result is empty, without
events, spreading, patterns or the reranker it is merely poorer. Each degradation is named in
``warnings``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, wait
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from memory_core.config import ConfigOverrideError, MemoryConfig
from memory_core.errors import RetrievalError
from memory_core.providers.protocols import TokenUsage
from memory_core.read.agent_index import agent_indexes
from memory_core.read.compress import (
    CompressedContext,
    ContextEvent,
    ContextFact,
    compress_broad_context,
    compress_context,
    fresh_first,
)
from memory_core.read.context import ReadContext
from memory_core.read.conversations import fact_support, relevant_conversations
from memory_core.read.directives import directive_block
from memory_core.read.entities import (
    ExpandedQuery,
    QueryContext,
    TimeWindow,
    expand_query,
    resolve_query_context,
)
from memory_core.read.focus import weigh_graph_nodes
from memory_core.read.keywords import counts_to_fold, keyword_weights, reweigh_keywords
from memory_core.read.message_signal import facts_said_in, set_message_signal
from memory_core.read.planner import RetrievalPlan, finalize_plan, plan_retrieval
from memory_core.read.query_names import without_names
from memory_core.read.rank import Candidate, RankedFact, merge_candidates, rank_candidates, sort_ranked
from memory_core.read.rank import select_final as select_final_facts
from memory_core.read.read_transaction import begin_read, begin_read_for_agent, plan_generically
from memory_core.read.rerank import RerankOutcome, UsageReport, rerank
from memory_core.read.schemas import DirectiveBlock, RetrievedEvent, RetrieveResult, ScoredFact
from memory_core.read.side_reads import SideSubmit
from memory_core.read.signals import (
    EXACT_SCAN_MAX_FACTS,
    GraphNode,
    SignalRequest,
    SignalResult,
    run_signals,
    start_indexed_semantic,
)
from memory_core.read.spreading import (
    SPREADING_SEED_FACTS,
    ContextExtras,
    SpreadingResult,
    context_extras,
    spread_activation,
)

__all__ = ["AsOf", "RetrievalRequestError", "retrieve", "to_window"]

logger = logging.getLogger(__name__)

AsOf = datetime | tuple[datetime, datetime]

T = TypeVar("T")


class RetrievalRequestError(RetrievalError, ValueError):
    """The retrieval request itself is wrong (empty agent id, inverted time window...): not retried."""


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def to_window(as_of: AsOf | None) -> TimeWindow | None:
    """``as_of`` as a window: an instant ``t`` is ``[t, t]``; naive datetimes are UTC."""
    if as_of is None:
        return None
    if isinstance(as_of, datetime):
        moment = _utc(as_of)
        return TimeWindow(moment, moment)
    if isinstance(as_of, tuple | list) and len(as_of) == 2 and all(isinstance(m, datetime) for m in as_of):
        start, end = _utc(as_of[0]), _utc(as_of[1])
        if start > end:
            raise RetrievalRequestError("as_of window must start before it ends")
        return TimeWindow(start, end)
    raise RetrievalRequestError("as_of must be a datetime or a (start, end) pair of datetimes")


def _validate(agent_id: object, query: object, entity_keys: object, session_id: object) -> None:
    if not isinstance(agent_id, str) or not agent_id.strip():
        raise RetrievalRequestError("agent_id must be a non-empty string")
    if not isinstance(query, str):
        raise RetrievalRequestError("query must be a string")
    if entity_keys is not None and (
        isinstance(entity_keys, str)
        or not isinstance(entity_keys, Sequence)
        or not all(isinstance(key, str) for key in entity_keys)
    ):
        raise RetrievalRequestError("entity_keys must be a list of strings")
    if session_id is not None and not isinstance(session_id, str):
        raise RetrievalRequestError("session_id must be a string")


@dataclass
class _Run:
    """What one retrieval accumulates on its way through the stages."""

    ctx: ReadContext
    agent_id: str
    query: str
    config: MemoryConfig
    plan: RetrievalPlan
    window: TimeWindow | None
    session_id: str | None
    entity_keys: list[str] | None
    now: datetime
    verbose: bool
    warnings: list[str] = field(default_factory=list)
    # The request's config_overrides, applied again on top of the agent's stored config once read.
    overrides: Mapping[str, Any] | None = None
    trace: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    degraded: list[str] = field(default_factory=list)
    # The query's embedding without its names, for relevant conversations (memory_core.read.query_names).
    event_vector: list[float] | None = None

    def timed(self, stage: str, started: float) -> float:
        elapsed = (time.perf_counter() - started) * 1000.0
        self.timings[stage] = round(self.timings.get(stage, 0.0) + elapsed, 3)
        return elapsed

    def use_agent_config(self, stored: Mapping[str, Any] | None) -> None:
        """Run on the agent's config (``stored`` overrides on the service's), with the request's overrides on top.

        Raises :class:`~memory_core.config.ConfigOverrideError` when the request's overrides do
        not fit the agent's config.
        """
        if not stored:
            return
        config = self.ctx.configs.resolve(stored, self.overrides).config
        if config is self.config:
            return
        if (config.signal_max_facts, config.keyword_min_word_chars, config.keyword_max_terms) != (
            self.config.signal_max_facts,
            self.config.keyword_min_word_chars,
            self.config.keyword_max_terms,
        ):
            self.plan = _plan(self.query, config)
        self.config = config

    def degrade(self, stage: str, error: BaseException, consequence: str) -> None:
        logger.warning("retrieval stage %s failed for agent %s: %s", stage, self.agent_id, error, exc_info=True)
        self.degraded.append(stage)
        self.warnings.append(f"{stage} failed ({type(error).__name__}); {consequence}")


@dataclass
class _ReadOutcome:
    """What the read transaction produced."""

    query_context: QueryContext | None = None
    expansion: ExpandedQuery = field(default_factory=ExpandedQuery)
    signals: SignalResult | None = None
    ranked: list[RankedFact] = field(default_factory=list)
    events: list[RetrievedEvent] = field(default_factory=list)
    spreading: SpreadingResult | None = None
    spreading_unique: int = 0
    extras: ContextExtras = field(default_factory=ContextExtras)
    total_candidates: int = 0
    # True when the relevant conversations were read on a side connection beside spreading.
    events_beside: bool = False
    # Each candidate message's own relevance, by event id (memory_core.read.message_signal).
    message_relevance: dict[str, float] = field(default_factory=dict)


def _optional(run: _Run, session: Session, *, stage: str, consequence: str, work: Callable[[], T], default: T) -> T:
    """Run an optional stage; on failure log it, reset the transaction and go on without it."""
    started = time.perf_counter()
    try:
        return work()
    except Exception as error:  # fail-safe: an optional stage never breaks retrieval
        run.degrade(stage, error, consequence)
        # The failed statement aborted the transaction; the next stages read in a fresh one.
        session.rollback()
        begin_read(session)
        return default
    finally:
        run.timed(stage, started)


@contextmanager
def _read_slot(run: _Run) -> Iterator[None]:
    """Hold one of the process's read slots (memory_core.read.read_slots); the wait is the ``queued`` stage."""
    slots = run.ctx.read_slots
    if slots is None:
        yield
        return
    with slots.held() as waited:
        run.timings["queued"] = round(waited * 1000.0, 3)
        yield


def _serving(ctx: ReadContext) -> AbstractContextManager[None]:
    return ctx.side_reads.serving() if ctx.side_reads is not None else nullcontext()


def _side_submit(run: _Run) -> SideSubmit | None:
    """Start work on a side connection of this process (read-only, as the main transaction)."""
    side_reads = run.ctx.side_reads
    if side_reads is None or side_reads.connections <= 0:
        return None

    def submit(
        work: Callable[[Session], T], *, ef_search: int | None = None, generic_plans: bool = False
    ) -> Future[T] | None:
        return side_reads.submit(work, begin=partial(begin_read, ef_search=ef_search, generic_plans=generic_plans))

    return submit


def _graph_nodes(query_context: QueryContext, expansion: ExpandedQuery) -> list[GraphNode]:
    nodes: dict[str, GraphNode] = {}
    for key in [*query_context.mentioned_keys, *query_context.entity_filter.keys]:
        nodes.setdefault(key, GraphNode(key=key, depth=0))
    for neighbour in expansion.neighbours:
        if neighbour.key not in nodes:
            nodes[neighbour.key] = GraphNode(
                key=neighbour.key, depth=1, strength=neighbour.strength, edge_time=neighbour.edge_time
            )
    return list(nodes.values())


def _weighed_graph_nodes(run: _Run, query_context: QueryContext, expansion: ExpandedQuery) -> list[GraphNode]:
    """Graph seeds scaled by entity specificity (:mod:`memory_core.read.focus`), unless turned off."""
    nodes = _graph_nodes(query_context, expansion)
    if not nodes or not run.config.entity_specificity:
        return nodes
    counts = dict(query_context.fact_counts)
    counts.update(
        (neighbour.key, neighbour.fact_count) for neighbour in expansion.neighbours if neighbour.fact_count is not None
    )
    return weigh_graph_nodes(nodes, counts, run.config.graph_max_facts)


def _counts_to_fold(run: _Run, session: Session, qctx: QueryContext) -> list[str]:
    """The keyword counts the signal statement's pass over a small agent's facts should make."""
    if not run.config.keyword_idf or not run.plan.keywords:
        return []
    return counts_to_fold(session, run.agent_id, run.plan.keywords, qctx.agent_facts, window=run.window)


def _keyword_idf(
    run: _Run, session: Session, qctx: QueryContext, counted: tuple[int, list[int]] | None
) -> list[float] | None:
    """The idf of each query keyword (:mod:`memory_core.read.keywords`); None keeps the plain fraction.

    ``counted``: the counts the signal statement made (then no statement of its own).
    """
    if not run.config.keyword_idf or not run.plan.keywords:
        return None
    return _optional(
        run,
        session,
        stage="keyword_idf",
        consequence="keywords were weighed equally",
        work=lambda: keyword_weights(
            session,
            run.agent_id,
            run.plan.keywords,
            qctx.agent_facts,
            window=run.window,
            table_rows=qctx.table_rows,
            counted=counted,
        ),
        default=None,
    )


def _plan(query: str, config: MemoryConfig) -> RetrievalPlan:
    return plan_retrieval(
        query,
        max_facts=config.signal_max_facts,
        keyword_min_chars=config.keyword_min_word_chars,
        keyword_max_terms=config.keyword_max_terms,
    )


def _read(run: _Run, session: Session, vector: list[float] | None) -> _ReadOutcome:
    # The agent's config comes in the round trip that opens the transaction.
    run.use_agent_config(begin_read_for_agent(session, run.agent_id))
    started = time.perf_counter()
    # An agent with a vector index of its own is searched through it whatever its size: its
    # facts need not be counted (a bounded scan of up to 20,000 index entries otherwise).
    threshold = run.ctx.settings.retrieval_agent_index_min_facts
    indexed = vector is not None and threshold > 0 and agent_indexes.has_index(session, run.agent_id)
    # Its semantic search needs nothing the next stages find: started now, on a side connection,
    # the walk of its index overlaps them.
    semantic = _start_indexed_semantic(run, vector, threshold) if indexed and not run.entity_keys else None
    try:
        return _read_stages(
            run, session, vector, indexed=indexed, threshold=threshold, semantic=semantic, started=started
        )
    finally:
        if semantic is not None:
            wait([semantic])  # never outlives the request, whichever stage failed


def _start_indexed_semantic(run: _Run, vector: list[float] | None, threshold: int) -> Future[list[Any]] | None:
    side = _side_submit(run)
    if side is None:
        return None
    request = SignalRequest(
        agent_id=run.agent_id,
        config=run.config,
        now=run.now,
        query_vector=vector,
        window=run.window,
        session_id=run.session_id,
        agent_index_min_facts=threshold,
        agent_index_ef_search=run.ctx.settings.retrieval_ef_search,
    )
    return start_indexed_semantic(request, side)


def _read_stages(
    run: _Run,
    session: Session,
    vector: list[float] | None,
    *,
    indexed: bool,
    threshold: int,
    semantic: Future[list[Any]] | None,
    started: float,
) -> _ReadOutcome:
    outcome = _ReadOutcome()
    config = run.config
    count_cap = 0 if indexed else max(EXACT_SCAN_MAX_FACTS, threshold) + 1
    qctx = resolve_query_context(
        session,
        run.agent_id,
        run.query,
        entity_keys=run.entity_keys,
        candidate_prefixes=run.plan.candidate_prefixes,
        window=run.window,
        count_cap=count_cap,
    )
    run.timed("entities", started)
    outcome.query_context = qctx
    run.warnings.extend(qctx.entity_filter.warnings)
    run.plan = finalize_plan(run.plan, qctx.existing_prefixes)
    if qctx.entity_filter.matches_nothing:
        return outcome

    generic_early = _plans_generically_from_expansion(run, qctx, vector, indexed=indexed)
    if generic_early:
        plan_generically(session)
    seeds = [*qctx.mentioned_keys, *qctx.entity_filter.keys]
    outcome.expansion = _optional(
        run,
        session,
        stage="expansion",
        consequence="related entities were not primed",
        work=lambda: expand_query(session, run.agent_id, seeds, window=run.window, generic=generic_early),
        default=ExpandedQuery(),
    )

    started = time.perf_counter()
    request = SignalRequest(
        agent_id=run.agent_id,
        config=config,
        now=run.now,
        query_vector=vector,
        keywords=run.plan.keywords,
        entity_patterns=[pattern.entity_pattern for pattern in run.plan.pattern_queries],
        graph_nodes=_weighed_graph_nodes(run, qctx, outcome.expansion),
        mentioned=frozenset(qctx.mentioned_keys),
        broad=run.plan.broad_query,
        window=run.window,
        session_id=run.session_id,
        filter_keys=qctx.entity_filter.keys if qctx.entity_filter.active else None,
        agent_facts=qctx.agent_facts,
        table_rows=qctx.table_rows,
        agent_index_min_facts=threshold,
        agent_index_ef_search=run.ctx.settings.retrieval_ef_search,
        term_queries=_counts_to_fold(run, session, qctx),
        # Unless a failed expansion rolled the transaction back (and its settings with it).
        generic_plans_set=generic_early and "expansion" not in run.degraded,
    )
    outcome.signals = run_signals(session, request, side=_side_submit(run), semantic=semantic)
    run.timed("signals", started)

    keyword_idf = _keyword_idf(run, session, qctx, outcome.signals.term_counts)
    # The statements after the signals (relevant conversations, spreading activation, patterns)
    # look rows up by agent and key, one plan fits every agent, and they are prepared: with a
    # generic plan they are not planned again. PostgreSQL's "auto" kept planning them for their
    # parameters (their generic estimates look costlier) although the generic plans ran faster:
    # executed prepared on the benchmark's agents, spreading 5.0 -> 3.5 ms (1k facts), 7.9 -> 6.4
    # (100k), conversations 2.5 -> 1.8, patterns 0.5 -> 0.3. Set once the statements planned for
    # their parameters (sent unprepared: a large agent's signals and keyword counts) have run;
    # for a small agent it was set before the expansion or by its signal statement
    # (_plans_generically_from_expansion, memory_core.read.signals).
    if not outcome.signals.generic_plans:
        plan_generically(session)
    started = time.perf_counter()
    merged = merge_candidates(outcome.signals.candidates)
    if keyword_idf is not None:
        reweigh_keywords(merged.values(), run.plan.keywords, keyword_idf, request.entity_patterns)
    outcome.ranked = rank_candidates(merged.values(), config, run.now)
    run.timed("rank", started)

    events_beside = _start_events(run, session, outcome, vector)
    try:
        seed_facts = [(fact.candidate.fact_id, fact.formula) for fact in outcome.ranked[:SPREADING_SEED_FACTS]]
        spreading = _optional(
            run,
            session,
            stage="spreading",
            consequence="related facts were not added",
            work=lambda: spread_activation(
                session,
                run.agent_id,
                seed_facts,
                config,
                now=run.now,
                query_vector=vector,
                window=run.window,
                session_id=run.session_id,
                filter_keys=request.filter_keys,
            ),
            default=SpreadingResult(),
        )
    finally:
        # Waited for whatever happened meanwhile: the side read must not outlive the request.
        if events_beside is not None:
            _finish_events(run, outcome, events_beside)
    outcome.spreading = spreading
    fresh = [candidate for candidate in spreading.candidates if candidate.fact_id not in merged]
    outcome.spreading_unique = len(fresh)
    if fresh:
        if keyword_idf is not None:
            reweigh_keywords(fresh, run.plan.keywords, keyword_idf, request.entity_patterns)
        outcome.ranked = sort_ranked([*outcome.ranked, *rank_candidates(fresh, config, run.now)])
    outcome.total_candidates = len(merged) + len(fresh)
    if outcome.message_relevance:
        outcome.ranked = _with_message_signal(run, session, outcome, request.filter_keys, keyword_idf)

    pool = outcome.ranked[: config.reranker_candidate_multiplier * config.topk_facts]
    outcome.extras = _optional(
        run,
        session,
        stage="patterns",
        consequence="observed patterns and clusters are missing",
        work=lambda: context_extras(
            session,
            run.agent_id,
            config,
            fact_ids=[fact.candidate.fact_id for fact in pool],
            cluster_ids=[fact.candidate.cluster_id for fact in pool if fact.candidate.cluster_id],
            now=run.now,
            query_vector=vector,
            broad=run.plan.broad_query,
        ),
        default=ContextExtras(),
    )
    return outcome


def _with_message_signal(
    run: _Run,
    session: Session,
    outcome: _ReadOutcome,
    filter_keys: Sequence[str] | None,
    keyword_idf: Sequence[float] | None,
) -> list[RankedFact]:
    """The ranked facts with the message signal, and the facts of relevant messages no signal found.

    Only the facts whose signal rose are scored again; the others keep their ranking entry.
    """
    candidates = [fact.candidate for fact in outcome.ranked]
    raised = set_message_signal(candidates, outcome.message_relevance)
    said: list[Candidate] = _optional(
        run,
        session,
        stage="message_facts",
        consequence="facts of relevant messages that no other signal found are missing",
        work=lambda: facts_said_in(
            session,
            run.agent_id,
            outcome.message_relevance,
            (candidate.fact_id for candidate in candidates),
            run.config,
            now=run.now,
            window=run.window,
            session_id=run.session_id,
            filter_keys=filter_keys,
        ),
        default=[],
    )
    if said and keyword_idf is not None:
        reweigh_keywords(said, run.plan.keywords, keyword_idf)
    outcome.total_candidates += len(said)
    if not raised and not said:
        return outcome.ranked
    rescored = {id(candidate) for candidate in raised}
    kept = [fact for fact in outcome.ranked if id(fact.candidate) not in rescored]
    return sort_ranked([*kept, *rank_candidates([*raised, *said], run.config, run.now)])


def _plans_generically_from_expansion(
    run: _Run, qctx: QueryContext, vector: list[float] | None, *, indexed: bool
) -> bool:
    """Whether the read transaction plans generically from the 1-hop expansion on, not from the signals.

    For an agent searched exactly (no index of its own, at most EXACT_SCAN_MAX_FACTS facts) with
    no time travel, session or entity filter: its signal statement plans generically anyway
    (memory_core.read.signals) and nothing between the expansion and it must be planned for its
    parameters. The expansion then keeps one plan instead of being planned for every retrieve
    (on the benchmark's 1,000-fact agent: ~0.25 ms of PostgreSQL's time per retrieve, most of it
    the expansion's parse and plan for a 0.04 ms read).
    """
    return (
        vector is not None
        and not indexed
        and 0 < qctx.agent_facts <= EXACT_SCAN_MAX_FACTS
        and run.window is None
        and run.session_id is None
        and not qctx.entity_filter.active
    )


def _embed_query(ctx: ReadContext, config: MemoryConfig, query: str) -> tuple[list[float] | None, list[float] | None]:
    """The query's embedding, and the one relevant conversations compare messages with (None: the same).

    When the query names someone and ``event_query_unnamed_share`` is above 0, the latter mixes
    the query's embedding with the embedding of the query without its names (one embedder call
    for both; :mod:`memory_core.read.query_names`).
    """
    share = config.event_query_unnamed_share
    stripped = without_names(query) if share > 0 and config.topk_events > 0 else None
    if stripped is None:
        return ctx.embedder.embed_one(query), None
    full, bare = ctx.embedder.embed([query, stripped])
    return list(full), _mix(full, bare, share)


def _mix(full: Sequence[float], bare: Sequence[float], share: float) -> list[float]:
    """``(1 - share) x full + share x bare``, unit length (cosine similarity is read as ``1 - distance``)."""
    mixed = [(1.0 - share) * a + share * b for a, b in zip(full, bare, strict=True)]
    norm = math.sqrt(sum(value * value for value in mixed))
    return [value / norm for value in mixed] if norm > 0 else list(bare)


def _start_events(
    run: _Run, session: Session, outcome: _ReadOutcome, vector: list[float] | None
) -> Future[list[RetrievedEvent]] | None:
    """Read the relevant conversations: beside spreading activation when it can, else now, in line.

    Beside it (a side connection, :mod:`memory_core.read.side_reads`) only where the agent's
    semantic search ran on one too: the process had a free core then, and spreading activation
    waits on the database. A small agent (spreading reads a handful of entities) gained nothing
    and spent more CPU, so it reads them in line (docs/performance.md, "Concurrent retrieves").
    The result is the same either way: both read the facts ranked by the signals.
    """
    if vector is None:
        return None
    config = run.config
    support = fact_support(outcome.ranked[: config.reranker_candidate_multiplier * config.topk_facts])

    event_vector = run.event_vector if run.event_vector is not None else vector

    def read_events(events_session: Session) -> list[RetrievedEvent]:
        return relevant_conversations(
            events_session,
            run.agent_id,
            event_vector,
            run.plan.words,
            config,
            now=run.now,
            session_id=run.session_id,
            window=run.window,
            support=support,
            message_relevance=outcome.message_relevance,
            anchor=run.plan.anchor,
        )

    side = _side_submit(run) if outcome.signals is not None and outcome.signals.statements == 2 else None
    # generic_plans: as in the main transaction from here on (see _read_stages).
    beside = side(read_events, generic_plans=True) if side is not None else None
    outcome.events_beside = beside is not None
    if beside is None:
        outcome.events = _optional(
            run,
            session,
            stage="events",
            consequence="relevant conversations are missing",
            work=lambda: read_events(session),
            default=[],
        )
    return beside


def _finish_events(run: _Run, outcome: _ReadOutcome, beside: Future[list[RetrievedEvent]]) -> None:
    """The conversations read beside spreading (the ``events`` timing is the wait for them)."""
    started = time.perf_counter()
    try:
        outcome.events = beside.result()
    except Exception as error:  # fail-safe: the facts are still returned without the conversations
        run.degrade("events", error, "relevant conversations are missing")
    finally:
        run.timed("events", started)


def record_retrievals(ctx: ReadContext, agent_id: str, fact_ids: Sequence[str]) -> bool:
    """Count the retrieval of ``fact_ids`` (queued; written behind the request, see bookkeeping)."""
    if ctx.bookkeeper is None:
        return True
    return ctx.bookkeeper.record(agent_id, fact_ids)


def _scored(fact: RankedFact) -> ScoredFact:
    candidate = fact.candidate
    return ScoredFact(
        fact_id=candidate.fact_id,
        entity_name=candidate.entity_name,
        entity_key=candidate.entity_key,
        attribute_key=candidate.attribute_key,
        fact_text=candidate.fact_text,
        score=round(fact.score, 6),
        scores={name: round(value, 6) for name, value in fact.scores.items()},
        speaker=candidate.speaker,
        source_event_id=candidate.source_event_id,
        message_id=candidate.message_id,
        valid_from=candidate.valid_from,
        valid_to=candidate.valid_to,
    )


def _compress(
    run: _Run, facts: list[RankedFact], events: list[RetrievedEvent], extras: ContextExtras
) -> CompressedContext:
    context_facts = fresh_first(
        [
            ContextFact(
                text=fact.candidate.fact_text,
                score=fact.score,
                cluster_id=fact.candidate.cluster_id,
                source_event_id=fact.candidate.source_event_id,
                valid_from=fact.candidate.valid_from,
            )
            for fact in facts
        ],
        run.now,
        run.config.context_stale_threshold_days,
    )
    context_events = [
        ContextEvent(
            text=event.text,
            occurred_at=event.occurred_at,
            reply=event.reply_to is not None,
            event_id=event.event_id,
            speaker=event.speaker,
        )
        for event in events
    ]
    if run.plan.broad_query and extras.clusters:
        return compress_broad_context(
            context_facts, extras.clusters, context_events, run.config, patterns=extras.patterns
        )
    return compress_context(context_facts, context_events, run.config, patterns=extras.patterns)


def _entities_trace(outcome: _ReadOutcome) -> dict[str, Any]:
    qctx = outcome.query_context
    if qctx is None:
        return {}
    sources: dict[str, list[str]] = {
        "deterministic": qctx.mentioned_keys,
        "filter": list(qctx.entity_filter.keys),
        "expansion": list(outcome.expansion.primed_entities),
    }
    return {
        "resolved": [entity.summary() for entity in qctx.entities],
        "entities_sources": sources,
        "filter": {
            "requested": qctx.entity_filter.requested,
            "resolved": qctx.entity_filter.resolved,
            "warnings": qctx.entity_filter.warnings,
        },
        "expansion": [
            {"key": n.key, "via": n.via, "rel_type": n.rel_type, "strength": n.strength}
            for n in outcome.expansion.neighbours
        ],
        "aggregation_prefixes": sorted(qctx.existing_prefixes),
    }


def _build_trace(
    run: _Run,
    outcome: _ReadOutcome,
    rerank_outcome: RerankOutcome | None,
    compressed: CompressedContext | None,
    recorded: bool | None,
) -> dict[str, Any]:
    trace: dict[str, Any] = {"plan": run.plan.summary()}
    entities = _entities_trace(outcome)
    if entities:
        trace["entities"] = entities
    if outcome.signals is not None:
        retrieval = outcome.signals.summary()
        retrieval["entities_sources"] = entities.get("entities_sources", {})
        if outcome.query_context is not None:
            retrieval["agent_facts_counted"] = outcome.query_context.agent_facts
        trace["retrieval"] = retrieval
        trace["rank"] = {
            "candidates": outcome.total_candidates,
            "top": [
                {"fact_id": f.candidate.fact_id, "formula": f.formula, "sources": sorted(f.candidate.sources)}
                for f in outcome.ranked[:10]
            ],
        }
        trace["events"] = {"count": len(outcome.events), "beside_spreading": outcome.events_beside}
    if outcome.spreading is not None:
        trace["spreading"] = outcome.spreading.summary(outcome.spreading_unique)
    trace["patterns"] = {"clusters": len(outcome.extras.clusters), "patterns": len(outcome.extras.patterns)}
    if rerank_outcome is not None:
        trace["rerank"] = rerank_outcome.summary()
    if compressed is not None:
        trace["compress"] = compressed.summary()
    if recorded is not None:
        trace["bookkeeping"] = {"recorded": recorded}
    trace["timings_ms"] = dict(run.timings)
    trace["degraded"] = list(run.degraded)
    return trace


def _usage_reporter(ctx: ReadContext, agent_id: str) -> UsageReport | None:
    """Where the reranker reports the LLM usage of ``agent_id``'s retrieval (queued, see memory_core.usage)."""
    usage = ctx.usage
    if usage is None:
        return None

    def report(skill: str, spent: TokenUsage, failed: bool) -> None:
        usage.record(agent_id, skill, spent, failed=failed)

    return report


def _directive_block(run: _Run, persona: str) -> DirectiveBlock:
    """The directive block of the run's agent; fail-safe (seeds): an empty block when it cannot be had."""
    block_started = time.perf_counter()
    try:
        return directive_block(
            run.ctx.sessions,
            run.agent_id,
            run.config,
            composer=run.ctx.directive_composer,
            persona=persona,
            report_usage=_usage_reporter(run.ctx, run.agent_id),
        )
    except Exception as error:  # fail-safe: the retrieval answers without its directives
        run.degrade("directives", error, "the directive block is empty")
        return DirectiveBlock()
    finally:
        run.timed("directives", block_started)


def retrieve(
    ctx: ReadContext,
    *,
    agent_id: str,
    query: str,
    entity_keys: Sequence[str] | None = None,
    session_id: str | None = None,
    as_of: AsOf | None = None,
    config_overrides: Mapping[str, Any] | None = None,
    verbose: bool = False,
    include_directives: bool = False,
    persona: str = "",
) -> RetrieveResult:
    """What memory knows that is relevant to ``query``, for ``agent_id`` only.

    ``entity_keys`` keeps facts linked to any of them (canonical keys or aliases; unknown keys
    become ``warnings``). ``session_id`` keeps facts and events from that conversation.
    ``as_of`` travels in time: a datetime returns the facts valid at that instant
    (``valid_from <= t < valid_to``), a ``(start, end)`` pair those valid at any time in it.
    ``config_overrides`` change the config for this call (unknown keys are ignored with a
    warning; bad values raise :class:`~memory_core.config.ConfigOverrideError`).
    ``include_directives`` adds the agent's directive block (procedural memory, merged with
    ``persona``) as ``directives`` and at the top of ``context``, within ``directive_max_tokens``.
    """
    started = time.perf_counter()
    _validate(agent_id, query, entity_keys, session_id)
    window = to_window(as_of)
    # Checked here against the service config (a bad override fails before any work); applied
    # again on the agent's config once the read transaction has read it.
    resolution = ctx.configs.resolve(None, config_overrides)
    config = resolution.config

    plan_started = time.perf_counter()
    plan = _plan(query, config)
    now = datetime.now(UTC)
    run = _Run(
        ctx=ctx,
        agent_id=agent_id,
        query=query,
        config=config,
        plan=plan,
        window=window,
        session_id=session_id,
        entity_keys=list(entity_keys) if entity_keys is not None else None,
        now=min(now, window.end) if window is not None else now,
        verbose=verbose,
        warnings=list(resolution.warnings),
        overrides=config_overrides,
    )
    run.timed("plan", plan_started)

    def result(**fields: Any) -> RetrieveResult:
        if include_directives:
            block = _directive_block(run, persona)
            fields["directives"] = block
            if block.text:
                rest = fields.get("context") or ""
                fields["context"] = f"{block.text}\n\n{rest}" if rest else block.text
        return RetrieveResult(
            config_effective=run.config.effective(),
            warnings=run.warnings,
            duration_ms=round((time.perf_counter() - started) * 1000.0, 3),
            **fields,
        )

    if plan.strategy == "skip":
        # A greeting reads nothing, the agent's stored config included: its config_effective is
        # the service's with the request's overrides.
        skipped = {"plan": plan.summary(), "timings_ms": dict(run.timings), "degraded": []}
        return result(trace=skipped if verbose else None)

    vector: list[float] | None = None
    embed_started = time.perf_counter()
    try:
        vector, run.event_vector = _embed_query(ctx, config, query)
    except Exception as error:  # fail-safe: keyword and graph signals still work without a vector
        run.degrade("embedding", error, "semantic search and relevant conversations are off")
    run.timed("embedding", embed_started)

    outcome = _ReadOutcome()
    try:
        with _read_slot(run), ctx.sessions() as session, _serving(ctx):
            outcome = _read(run, session, vector)
            # End the read-only transaction with COMMIT: a ROLLBACK (what the pool would send
            # when the session closes) makes psycopg discard the connection's prepared
            # statements and its execution counts, so no read statement was ever prepared.
            session.commit()
    except ConfigOverrideError:  # the request's overrides do not fit the agent's config: the caller's 422
        raise
    except Exception as error:  # fail-safe: the seeds return an empty result rather than crash
        run.degrade("retrieval", error, "no facts could be retrieved")
        outcome = _ReadOutcome(query_context=outcome.query_context)
        return result(trace=_build_trace(run, outcome, None, None, None) if verbose else None)

    rerank_started = time.perf_counter()
    try:
        reranked = rerank(query, outcome.ranked, ctx.reranker, run.config, report_usage=_usage_reporter(ctx, agent_id))
    except Exception as error:  # fail-safe: keep the formula ranking
        run.degrade("rerank", error, "the formula ranking was kept")
        reranked = RerankOutcome(facts=outcome.ranked, applied=False, reason="error")
    run.timed("rerank", rerank_started)

    final = select_final_facts(reranked.facts, run.config)

    compress_started = time.perf_counter()
    try:
        compressed = _compress(run, final, outcome.events, outcome.extras)
    except Exception as error:  # fail-safe: facts are still returned without a context string
        run.degrade("compress", error, "the context string is empty")
        compressed = CompressedContext(context_text="")
    run.timed("compress", compress_started)

    book_started = time.perf_counter()
    recorded = record_retrievals(ctx, agent_id, [fact.candidate.fact_id for fact in final])
    run.timed("bookkeeping", book_started)

    return result(
        facts=[_scored(fact) for fact in final],
        events=outcome.events,
        context=compressed.context_text,
        total_candidates=outcome.total_candidates,
        trace=_build_trace(run, outcome, reranked, compressed, recorded) if verbose else None,
    )
