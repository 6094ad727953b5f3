"""The write pipeline's stages as functions of an event id, plus the synchronous dry run.

Each stage reads its input from PostgreSQL, computes outside any transaction (reads run
in autocommit, so no transaction stays open across an LLM or embedding call), then stores
its output and advances the run's status with a check-and-set: a stage that finds the run
already past it does nothing. ``upsert`` alone writes memory, in one short transaction
under the agent's advisory lock.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.orm import Session

from memory_core.agent_config import load_agent_overrides
from memory_core.db.vectors import vector_array
from memory_core.write.active_facts_view import ActiveFactsView
from memory_core.write.batching import BatchMember, extract_in_batches
from memory_core.write.context import WriteContext
from memory_core.write.embedding_prefetch import answered_fact_texts, prefetch_embeddings, with_chunk_embeddings
from memory_core.write.extract import (
    BatchShare,
    ExtractionResult,
    PreparedExtraction,
    PreRead,
    chunk_closest_facts,
    chunk_known_aliases,
    compute_extraction,
    finish_extraction,
    informed_cache_key,
    prepare_extraction,
)
from memory_core.write.reconcile import (
    CANDIDATES_PER_FACT,
    candidate_queries,
    reconcile_facts,
    reconcile_requests,
    shown_fact_ids,
)
from memory_core.write.reconcile_batching import ReconcileMember, reconcile_in_batches
from memory_core.write.repository import (
    FactRow,
    KnownAliases,
    NameLookup,
    closest_active_facts_many,
    lookup_names_many,
    read_point,
)
from memory_core.write.resolve import name_lookup_request, resolve_entities, speaker_entity
from memory_core.write.runs import RunView, StageCompletion, complete_stages, load_runs, relax_durability
from memory_core.write.schemas import (
    CorrectionResult,
    ExtractStageOutput,
    ReconcileStageOutput,
    ResolveStageOutput,
    TokenCount,
    TraceStep,
    WriteResult,
)
from memory_core.write.skill_calls import SkillCache
from memory_core.write.upsert import (
    ApplyOutcome,
    EntitySighting,
    apply_message,
    attribute_counts,
    lock_agent,
    merge_sightings,
    refresh_entity_counts_of_agents,
    register_attributes_of_agents,
    try_lock_agents,
)

StageOutcome = Literal["completed", "skipped", "missing"]

logger = logging.getLogger(__name__)


@contextmanager
def reading(ctx: WriteContext) -> Iterator[Session]:
    """A session whose every statement commits at once.

    Stages ``close()`` it before every LLM or embedding call, which hands its connection back
    to the pool: a thread waiting 500 ms on a model must not hold one of the pool's connections
    (64 extraction threads share a pool of 20).
    """
    with Session(bind=ctx.autocommit_engine) as session:
        yield session


REQUIRED_OUTPUTS: dict[str, tuple[str, ...]] = {
    "extract": (),
    "resolve": ("extract",),
    "reconcile": ("extract", "resolve"),
    "upsert": ("extract", "resolve", "reconcile"),
}


class StageInputMissingError(RuntimeError):
    """A run reached a stage without the outputs of the stages before it; waiting will not help."""


def _check_inputs(run: RunView, stage: str) -> None:
    missing = [name for name in REQUIRED_OUTPUTS[stage] if name not in run.stage_outputs]
    if missing:
        raise StageInputMissingError(
            f"run {run.event_id} is at status {run.status!r} without the output of {', '.join(missing)}; "
            "re-drive it from scratch"
        )


StageResult = StageOutcome | Exception
NEXT_STATUS: dict[str, str] = {
    "extract": "extracted",
    "resolve": "resolved",
    "reconcile": "reconciled",
    "upsert": "done",
}
EXPECTED_STATUS: dict[str, str] = {
    "extract": "received",
    "resolve": "extracted",
    "reconcile": "resolved",
    "upsert": "reconciled",
}

_UPDATE_EVENTS = text(
    """
    UPDATE memory_events e SET embedding_vec = x.vec, emotion_primary = x.emotion,
        emotion_intensity = x.intensity, energy_level = x.energy
    FROM unnest(CAST(:ids AS uuid[]), CAST(:vecs AS vector[]), CAST(:emotions AS text[]),
                CAST(:intensities AS float8[]), CAST(:energies AS text[])) AS x(id, vec, emotion, intensity, energy)
    WHERE e.id = x.id
    """
)


def _ready_runs(
    runs: dict[uuid.UUID, RunView], event_ids: Sequence[uuid.UUID], stage: str, outcomes: dict[uuid.UUID, StageResult]
) -> list[RunView]:
    """Runs waiting for ``stage`` with their inputs; the others get their outcome in ``outcomes``."""
    ready: list[RunView] = []
    for event_id in dict.fromkeys(event_ids):
        run = runs.get(event_id)
        if run is None:
            outcomes[event_id] = "missing"
        elif run.status != EXPECTED_STATUS[stage]:
            outcomes[event_id] = "skipped"
        else:
            try:
                _check_inputs(run, stage)
            except StageInputMissingError as error:
                outcomes[event_id] = error
                continue
            ready.append(run)
    return ready


@dataclass(frozen=True)
class _Computed:
    completion: StageCompletion
    event_row: dict[str, Any] | None = None


def _stage_completion(
    run: RunView, output: ExtractStageOutput | ResolveStageOutput | ReconcileStageOutput, started: float
) -> StageCompletion:
    """A computed stage's completion: its output as JSON, its duration since ``started`` and its tokens."""
    return StageCompletion(
        run.event_id,
        output.model_dump(mode="json"),
        (time.perf_counter() - started) * 1000,
        tokens=output.tokens.model_dump(),
    )


def _compute_extract(
    ctx: WriteContext,
    session: Session,
    run: RunView,
    *,
    known_aliases: KnownAliases | None = None,
    pre_read: Mapping[uuid.UUID, PreRead] | None = None,
) -> _Computed:
    started = time.perf_counter()
    cache = SkillCache(ctx.sessions, run.event_id, run.stage_outputs.get("llm_cache") or {})
    result = compute_extraction(
        ctx,
        session,
        agent_id=run.agent_id,
        message=run.text,
        speaker=run.speaker,
        occurred_at=run.occurred_at,
        options=run.options,
        agent_config=run.agent_config,
        cache=cache,
        known_aliases=known_aliases,
        pre_read=(pre_read or {}).get(run.event_id),
    )
    return _extract_computed(run, result, started)


def _extract_computed(run: RunView, result: ExtractionResult, started: float) -> _Computed:
    emotion = result.emotion
    return _Computed(
        _stage_completion(run, result.output, started),
        {
            "id": str(run.event_id),
            "vec": result.event_embedding,
            "emotion": emotion.emotion if emotion else None,
            "intensity": emotion.intensity if emotion else None,
            "energy": emotion.energy if emotion else None,
        },
    )


@dataclass(frozen=True)
class _ResolveInput:
    """A run's extract output as ``resolve`` reads it, with what its agent knows of its names (read by the chunk)."""

    extract: ExtractStageOutput
    known: NameLookup
    # The run's share of the chunk's shared reads, counted in its stage duration.
    shared_read_s: float = 0.0


def _resolve_inputs(session: Session, ready: Sequence[RunView]) -> dict[uuid.UUID, _ResolveInput]:
    """The chunk's runs' extract outputs, with their name lookups read in one statement per agent.

    A run whose output does not parse is left out: computing it alone raises the same error,
    which then fails that run only.
    """
    started = time.perf_counter()
    extracts: dict[uuid.UUID, ExtractStageOutput] = {}
    for run in ready:
        try:
            extracts[run.event_id] = ExtractStageOutput.model_validate(run.stage_outputs["extract"])
        except (KeyError, ValidationError):
            continue
    agent_of = {run.event_id: run.agent_id for run in ready}
    found = lookup_names_many(
        session,
        [
            (agent_of[event_id], name_lookup_request(extract.extraction.entities))
            for event_id, extract in extracts.items()
        ],
    )
    share = (time.perf_counter() - started) / max(1, len(extracts))
    return {
        event_id: _ResolveInput(extract, known, share)
        for (event_id, extract), known in zip(extracts.items(), found, strict=True)
    }


def _compute_resolve(
    ctx: WriteContext,
    session: Session,
    run: RunView,
    *,
    prepared: Mapping[uuid.UUID, _ResolveInput] | None = None,
) -> _Computed:
    started = time.perf_counter()
    item = (prepared or {}).get(run.event_id)
    if item is not None:
        started -= item.shared_read_s
    extract = item.extract if item is not None else ExtractStageOutput.model_validate(run.stage_outputs["extract"])
    cache = SkillCache(ctx.sessions, run.event_id, run.stage_outputs.get("llm_cache") or {})
    output = resolve_entities(
        ctx,
        session,
        agent_id=run.agent_id,
        speaker=run.speaker,
        message=run.text,
        entities=extract.extraction.entities,
        config=ctx.config_for(run.options, run.agent_config),
        cache=cache,
        known=item.known if item is not None else None,
    )
    return _Computed(_stage_completion(run, output, started))


@dataclass(frozen=True)
class _ReconcileInput:
    """A run's extract and resolve outputs as ``reconcile`` reads them, with its facts' candidates once read."""

    extract: ExtractStageOutput
    resolution: ResolveStageOutput
    speaker_key: str
    candidates: list[list[FactRow]] | None = None
    # The run's share of the chunk's shared reads, counted in its stage duration.
    shared_read_s: float = 0.0


def _reconcile_input(run: RunView) -> _ReconcileInput:
    return _ReconcileInput(
        ExtractStageOutput.model_validate(run.stage_outputs["extract"]),
        ResolveStageOutput.model_validate(run.stage_outputs["resolve"]),
        speaker_entity(run.speaker)[0],
    )


def _reconcile_inputs(session: Session, ready: Sequence[RunView]) -> dict[uuid.UUID, _ReconcileInput]:
    """The chunk's runs' inputs, with every fact's closest active facts read in one statement.

    A run whose outputs do not parse is left out: computing it alone raises the same error,
    which then fails that run only.
    """
    started = time.perf_counter()
    inputs: dict[uuid.UUID, _ReconcileInput] = {}
    for run in ready:
        try:
            inputs[run.event_id] = _reconcile_input(run)
        except (KeyError, ValidationError):
            continue
    agent_of = {run.event_id: run.agent_id for run in ready}
    queries = {
        event_id: candidate_queries(
            agent_of[event_id],
            item.extract.facts,
            item.resolution.entities,
            item.speaker_key,
        )
        for event_id, item in inputs.items()
    }
    found = iter(
        closest_active_facts_many(
            session, [query for per_run in queries.values() for query in per_run], limit=CANDIDATES_PER_FACT
        )
    )
    share = (time.perf_counter() - started) / max(1, len(inputs))
    return {
        event_id: replace(item, candidates=[next(found) for _ in queries[event_id]], shared_read_s=share)
        for event_id, item in inputs.items()
    }


@dataclass(frozen=True)
class _ReconcileBatches:
    """What the chunk's batched decisions left each run: its LLM cache holding them, their tokens, the wait."""

    caches: dict[uuid.UUID, SkillCache]
    tokens: dict[uuid.UUID, TokenCount]
    waited_s: float = 0.0


def _compute_reconcile(
    ctx: WriteContext,
    session: Session,
    run: RunView,
    *,
    prepared: Mapping[uuid.UUID, _ReconcileInput] | None = None,
    batches: _ReconcileBatches | None = None,
) -> _Computed:
    started = time.perf_counter()
    item = (prepared or {}).get(run.event_id) or _reconcile_input(run)
    started -= item.shared_read_s
    cache = batches.caches.get(run.event_id) if batches is not None else None
    if cache is None:
        cache = SkillCache(ctx.sessions, run.event_id, run.stage_outputs.get("llm_cache") or {})
    batch_tokens = batches.tokens.get(run.event_id) if batches is not None else None
    if batch_tokens is not None and batches is not None:
        started -= batches.waited_s  # the message waited for its batch
    output = reconcile_facts(
        ctx,
        session,
        agent_id=run.agent_id,
        facts=item.extract.facts,
        entities=item.resolution.entities,
        speaker_key=item.speaker_key,
        occurred_at_iso=run.occurred_at.isoformat(),
        config=ctx.config_for(run.options, run.agent_config),
        cache=cache,
        candidates=item.candidates,
        batch_tokens=batch_tokens,
        shown=shown_fact_ids(item.extract.known_entities),
        known_as_of=item.extract.known_as_of,
        known_snapshot=item.extract.known_snapshot,
    )
    return _Computed(_stage_completion(run, output, started))


_COMPUTE: dict[str, Callable[[WriteContext, Session, RunView], _Computed]] = {
    "extract": _compute_extract,
    "resolve": _compute_resolve,
    "reconcile": _compute_reconcile,
}


def _batching(ctx: WriteContext) -> bool:
    """Whether the extract stage batches messages: an LLM with a batch skill, and batching on."""
    return ctx.skills.kind == "llm" and ctx.skills.extract_batch is not None and ctx.settings.pipeline_llm_batching


def _reconcile_batching(ctx: WriteContext) -> bool:
    """Whether the reconcile stage batches decisions: an LLM with a batch skill, and batching on."""
    return ctx.skills.kind == "llm" and ctx.skills.reconcile_batch is not None and ctx.settings.pipeline_llm_batching


def _reconcile_batched(
    ctx: WriteContext,
    session: Session,
    ready: Sequence[RunView],
    prepared: Mapping[uuid.UUID, _ReconcileInput],
    outcomes: dict[uuid.UUID, StageResult],
) -> _ReconcileBatches:
    """The decisions of the chunk's facts that need the reconcile skill, asked together per agent.

    See :mod:`memory_core.write.reconcile_batching`: each decision lands in its run's LLM cache
    under the key of its single call; a run failed by its batch (a rate limit, a request
    error) gets the error in ``outcomes``.
    """
    caches = {
        run.event_id: SkillCache(ctx.sessions, run.event_id, run.stage_outputs.get("llm_cache") or {}) for run in ready
    }
    members: list[ReconcileMember] = []
    for run in ready:
        item = prepared.get(run.event_id)
        if item is None or item.candidates is None:
            continue  # its own computation raises the error, for that run only
        try:
            requests = reconcile_requests(
                facts=item.extract.facts,
                entities=item.resolution.entities,
                speaker_key=item.speaker_key,
                occurred_at_iso=run.occurred_at.isoformat(),
                config=ctx.config_for(run.options, run.agent_config),
                candidates=item.candidates,
                shown=shown_fact_ids(item.extract.known_entities),
                known_as_of=item.extract.known_as_of,
                known_snapshot=item.extract.known_snapshot,
            )
        except Exception:  # noqa: S112 - its own computation raises it again, failing that run alone
            continue
        cache = caches[run.event_id]
        members.extend(
            ReconcileMember(run.event_id, run.agent_id, run.arrival_key, request)
            for request in requests
            # Decided already (a redelivered stage): nothing to ask again.
            if cache.get(request.cache_key) is None
        )
    if len(members) < 2:
        return _ReconcileBatches(caches, {})
    started = time.perf_counter()
    session.close()  # no pooled connection waits while the threads call the model
    batched = reconcile_in_batches(ctx, members, caches)
    outcomes.update(batched.failures)
    return _ReconcileBatches(caches, batched.tokens, time.perf_counter() - started)


def _in_threads(
    ctx: WriteContext, items: Sequence[RunView], work: Callable[[RunView, Session], Any]
) -> list[Any | Exception]:
    """``work(run, session)`` for every run, side by side, each on a reading session of its own; errors returned."""

    def attempt(run: RunView) -> Any | Exception:
        try:
            with reading(ctx) as own:
                return work(run, own)
        except Exception as error:  # the caller decides, per event, between retry and failure
            return error

    parallel = min(len(items), ctx.settings.pipeline_chunk_parallelism)
    if parallel <= 1:
        return [attempt(run) for run in items]
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="arandu-extract") as pool:
        return list(pool.map(attempt, items))


def _extract_batched(
    ctx: WriteContext,
    session: Session,
    ready: Sequence[RunView],
    outcomes: dict[uuid.UUID, StageResult],
    known: KnownAliases,
    *,
    pre_read: Mapping[uuid.UUID, PreRead],
) -> list[_Computed]:
    """The extract stage of a chunk with batched LLM calls (see :mod:`memory_core.write.batching`).

    Every message is prepared (pre-retrieval), then those of one agent and session share calls,
    then every message is finished as on its own: answers the batches stored are found in its
    LLM cache, and a message its batch could not answer makes its own call there. A message's
    stage duration runs from the chunk's start: it waited for its batch.
    """
    started = time.perf_counter()
    session.close()  # no pooled connection waits while the threads call the model
    caches = {
        run.event_id: SkillCache(ctx.sessions, run.event_id, run.stage_outputs.get("llm_cache") or {}) for run in ready
    }

    def prepare(run: RunView, own: Session) -> PreparedExtraction:
        return prepare_extraction(
            ctx,
            own,
            agent_id=run.agent_id,
            message=run.text,
            speaker=run.speaker,
            occurred_at=run.occurred_at,
            options=run.options,
            agent_config=run.agent_config,
            known_aliases=known,
            pre_read=pre_read.get(run.event_id),
        )

    prepared: dict[uuid.UUID, PreparedExtraction] = {}
    for run, result in zip(ready, _in_threads(ctx, ready, prepare), strict=True):
        if isinstance(result, Exception):
            outcomes[run.event_id] = result
        else:
            prepared[run.event_id] = result
    key = informed_cache_key(ctx)
    members = [
        BatchMember(run.event_id, run.agent_id, run.session_id, run.arrival_key, prepared[run.event_id])
        for run in ready
        if run.event_id in prepared
        and prepared[run.event_id].batchable
        # Answered already (a redelivered stage): nothing to ask again.
        and caches[run.event_id].get(key) is None
    ]
    batched = extract_in_batches(ctx, members, key, caches)
    for event_id, error in batched.failures.items():
        outcomes[event_id] = error
    remaining = [run for run in ready if run.event_id in prepared and run.event_id not in batched.failures]
    prefetch_embeddings(
        ctx, (text for run in remaining for text in answered_fact_texts(caches[run.event_id].get(key), run.speaker))
    )

    def finish(run: RunView, own: Session) -> _Computed:
        share: BatchShare | None = batched.shares.get(run.event_id)
        result = finish_extraction(ctx, own, prepared[run.event_id], cache=caches[run.event_id], batch=share)
        return _extract_computed(run, result, started)

    computed: list[_Computed] = []
    for run, result in zip(remaining, _in_threads(ctx, remaining, finish), strict=True):
        if isinstance(result, Exception):
            outcomes[run.event_id] = result
        else:
            computed.append(result)
    return computed


def _extract_pre_read(
    ctx: WriteContext, session: Session, ready: Sequence[RunView], known: KnownAliases
) -> dict[uuid.UUID, PreRead]:
    """Every message's vector, and its known entities' closest facts read in one statement for the chunk.

    Nothing a chunk's extraction does writes facts, so the lists are those each message would
    read on its own (a snapshot taken a little earlier, as the alias lookups already are). A
    message the embedder refuses gets none: its own preparation asks again and fails alone, so
    the chunk's other messages go on.
    """
    embedded: list[tuple[RunView, list[float] | None]] = []
    for run in ready:
        try:
            embedded.append((run, ctx.embedder.embed_one(run.text)))
        except Exception:  # its own preparation embeds it again and fails alone, as it always did
            logger.debug("embedding %s ahead failed; left to its own preparation", run.event_id, exc_info=True)
    closest = chunk_closest_facts(
        session,
        known,
        [
            (run.agent_id, run.text, run.speaker, vector, ctx.config_for(run.options, run.agent_config))
            for run, vector in embedded
        ],
    )
    # Right after the one statement that read them: what a reconcile call need not be asked about.
    read = read_point(session) if ctx.skills.kind == "llm" else None
    return {run.event_id: PreRead(vector, facts, read) for (run, vector), facts in zip(embedded, closest, strict=True)}


def _compute_all(
    ctx: WriteContext,
    session: Session,
    stage: str,
    ready: Sequence[RunView],
    outcomes: dict[uuid.UUID, StageResult],
) -> list[_Computed]:
    """Compute ``stage`` for every ready run; a run whose computation raised gets the error as its outcome.

    With LLM skills the runs of a chunk are computed at once, each on a reading session of its
    own, so their model calls overlap; offline skills are pure CPU and gain nothing from threads
    under the GIL, so they run one after the other on the chunk's reading ``session`` (one
    pooled connection for the whole chunk).
    """
    compute = _COMPUTE[stage]
    if stage == "extract" and ready:
        ctx = with_chunk_embeddings(ctx, [run.text for run in ready])
        # The alias and entity lookups of every message, one statement for the chunk.
        known = chunk_known_aliases(
            session,
            [(run.agent_id, run.text) for run in ready],
            [ctx.config_for(run.options, run.agent_config) for run in ready],
            [run.speaker for run in ready],
        )
        pre_read = _extract_pre_read(ctx, session, ready, known)
        if _batching(ctx):
            return _extract_batched(ctx, session, ready, outcomes, known, pre_read=pre_read)
        compute = functools.partial(_compute_extract, known_aliases=known, pre_read=pre_read)
    elif stage == "resolve" and ready:
        # What every message's agent knows of its names, one statement for the chunk's agent.
        compute = functools.partial(_compute_resolve, prepared=_resolve_inputs(session, ready))
    elif stage == "reconcile" and ready:
        # Every fact's closest active facts, one statement for the chunk (a snapshot, as each
        # run's own reads would be: nothing is written between them; upsert re-checks).
        prepared = _reconcile_inputs(session, ready)
        batches: _ReconcileBatches | None = None
        if _reconcile_batching(ctx):
            batches = _reconcile_batched(ctx, session, ready, prepared, outcomes)
            ready = [run for run in ready if run.event_id not in outcomes]
        compute = functools.partial(_compute_reconcile, prepared=prepared, batches=batches)

    def attempt(run: RunView, shared: Session | None) -> _Computed | Exception:
        try:
            if shared is not None:
                return compute(ctx, shared, run)
            with reading(ctx) as own:
                return compute(ctx, own, run)
        except Exception as error:  # the caller decides, per event, between retry and failure
            if shared is not None:
                shared.rollback()
            return error

    parallel = min(len(ready), ctx.settings.pipeline_chunk_parallelism)
    results: list[_Computed | Exception]
    if parallel > 1 and ctx.skills.kind != "offline":
        session.close()  # no pooled connection waits while the threads call the model
        with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix=f"arandu-{stage}") as pool:
            results = list(pool.map(lambda run: attempt(run, None), ready))
    else:
        results = [attempt(run, session) for run in ready]
    computed: list[_Computed] = []
    for run, result in zip(ready, results, strict=True):
        if isinstance(result, Exception):
            outcomes[run.event_id] = result
        else:
            computed.append(result)
    return computed


def run_stage_chunk(ctx: WriteContext, stage: str, event_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, StageResult]:
    """Run ``stage`` for several events: per event ``completed``, ``skipped``, ``missing`` or the error it raised.

    Reads are two statements for the whole chunk; outputs are stored, and runs advanced with
    the usual per-event check-and-set, in one statement. An error of one event does not stop
    the others; an error of the shared reads or writes raises (nothing was stored).
    """
    if stage == "upsert":
        return _upsert_chunk(ctx, event_ids)
    outcomes: dict[uuid.UUID, StageResult] = {}
    with reading(ctx) as session:
        runs = load_runs(session, event_ids, outputs=REQUIRED_OUTPUTS[stage])
        ready = _ready_runs(runs, event_ids, stage, outcomes)
        computed = _compute_all(ctx, session, stage, ready, outcomes)
    if computed:
        with ctx.sessions.begin() as session:
            advanced = complete_stages(
                session, stage, [item.completion for item in computed], new_status=NEXT_STATUS[stage]
            )
            rows = [item.event_row for item in computed if item.event_row and item.completion.event_id in advanced]
            if rows:
                session.execute(
                    _UPDATE_EVENTS,
                    {
                        "ids": [row["id"] for row in rows],
                        "vecs": vector_array(row["vec"] for row in rows),
                        "emotions": [row["emotion"] for row in rows],
                        "intensities": [None if row["intensity"] is None else float(row["intensity"]) for row in rows],
                        "energies": [row["energy"] for row in rows],
                    },
                )
        for item in computed:
            outcomes[item.completion.event_id] = "completed" if item.completion.event_id in advanced else "skipped"
    return outcomes


@dataclass
class _Counters:
    """What a chunk's messages add to their agent's attribute registry and entity fact counts."""

    attributes: dict[str, tuple[int, str]] = field(default_factory=dict)
    entities: set[str] = field(default_factory=set)
    closed_facts: set[uuid.UUID] = field(default_factory=set)
    sightings: dict[str, EntitySighting] = field(default_factory=dict)

    def add(self, other: _Counters) -> None:
        """Fold in the counters of a message applied after those already added."""
        for key, (count, status) in other.attributes.items():
            seen, first_status = self.attributes.get(key, (0, status))
            self.attributes[key] = (seen + count, first_status)
        self.entities |= other.entities
        self.closed_facts |= other.closed_facts
        merge_sightings(self.sightings, other.sightings)


def _apply_one(
    ctx: WriteContext,
    session: Session,
    run: RunView,
    counters: _Counters,
    *,
    guarded: bool,
    facts_view: ActiveFactsView | None = None,
) -> StageCompletion:
    started = time.perf_counter()
    extract = ExtractStageOutput.model_validate(run.stage_outputs["extract"])
    resolution = ResolveStageOutput.model_validate(run.stage_outputs["resolve"])
    reconciliation = ReconcileStageOutput.model_validate(run.stage_outputs["reconcile"])
    config = ctx.config_for(run.options, run.agent_config)
    outcome = apply_message(
        session,
        run,
        extract=extract,
        resolution=resolution,
        reconciliation=reconciliation,
        config=config,
        speaker_key=speaker_entity(run.speaker)[0],
        offline=ctx.skills.kind == "offline",
        counters=False,
        guard_facts=guarded,
        facts_view=facts_view,
    )
    counters.add(
        _Counters(
            attribute_counts(reconciliation.decisions, config),
            outcome.touched_entities,
            outcome.closed_facts,
            outcome.sightings,
        )
    )
    duration = (time.perf_counter() - started) * 1000
    result = build_result(
        str(run.event_id),
        extract,
        resolution,
        reconciliation,
        outcome,
        duration_ms=sum(float(v) for v in run.timings.values()) + duration,
        verbose=bool(run.options.get("verbose")),
        upsert_ms=duration,
    )
    return StageCompletion(
        run.event_id,
        {"facts": len(outcome.added) + len(outcome.updated)},
        duration,
        result=result.model_dump(mode="json"),
    )


def _apply_runs(
    ctx: WriteContext,
    session: Session,
    ready: Sequence[RunView],
    outcomes: dict[uuid.UUID, StageResult],
    *,
    guarded: bool,
) -> tuple[list[StageCompletion], dict[str, _Counters]]:
    """Apply ``ready`` in order: completions and counter sums by agent.

    ``guarded``: each message in a savepoint of its own (a failing one gets its error in
    ``outcomes`` and the rest go on) and each fact in one too; otherwise the first error raises.
    """
    completions: list[StageCompletion] = []
    counters: dict[str, _Counters] = {}
    # Unguarded, any failure rolls the whole chunk back, this view with it.
    facts_view = None if guarded else ActiveFactsView(session)
    for run in ready:
        applied = _Counters()
        if not guarded or len(ready) == 1:
            # Alone, a failure rolls the whole transaction back: no savepoint needed.
            completions.append(_apply_one(ctx, session, run, applied, guarded=guarded, facts_view=facts_view))
        else:
            try:
                # One message failing (its savepoint rolled back) must not hold back the rest of the chunk.
                with session.begin_nested():
                    completions.append(_apply_one(ctx, session, run, applied, guarded=True))
            except Exception as error:
                outcomes[run.event_id] = error
                continue
        counters.setdefault(run.agent_id, _Counters()).add(applied)
    return completions, counters


def _upsert_chunk(ctx: WriteContext, event_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, StageResult]:
    """Apply a chunk's decisions in one short transaction under its agents' locks, in arrival order.

    A chunk of single messages names many agents, and two such chunks often share one. So the
    locks are taken without waiting: the agents whose lock is free are applied here, and the
    agents other transactions hold are applied afterwards, together, in one more transaction
    that waits for their locks in sorted order. A transaction that holds locks it took without
    waiting never waits for another, and the waiting ones all wait in the same order, so no
    two can deadlock; and a chunk costs at most two transactions however busy its agents are.
    """
    outcomes, deferred = _upsert_under_locks(ctx, event_ids, wait_for_locks=False)
    if deferred:
        try:
            outcomes.update(_upsert_under_locks(ctx, deferred, wait_for_locks=True)[0])
        except Exception as error:  # the caller retries these events on their own
            outcomes.update(dict.fromkeys(deferred, error))
    return outcomes


def _upsert_under_locks(
    ctx: WriteContext, event_ids: Sequence[uuid.UUID], *, wait_for_locks: bool
) -> tuple[dict[uuid.UUID, StageResult], list[uuid.UUID]]:
    """One transaction: apply the events whose agents' locks it holds; the outcomes, and the events left.

    ``wait_for_locks`` waits for every agent's lock in sorted order (nothing is left); otherwise
    only a lone agent's lock is waited for, and several agents' locks are taken if free.
    """
    outcomes: dict[uuid.UUID, StageResult] = {}
    with ctx.sessions.begin() as session:
        # The run row locks make a concurrent redelivery of these events wait, then see "done".
        runs = load_runs(session, event_ids, for_update=True, outputs=REQUIRED_OUTPUTS["upsert"], llm_cache=False)
        ready = _ready_runs(runs, event_ids, "upsert", outcomes)
        if not ready:
            return outcomes, []
        relax_durability(session)
        agents = sorted({run.agent_id for run in ready})
        if wait_for_locks or len(agents) == 1:
            for agent_id in agents:
                lock_agent(session, agent_id)
            locked = set(agents)
        else:
            locked = try_lock_agents(session, agents)
        _apply_locked(ctx, session, [run for run in ready if run.agent_id in locked], outcomes)
    return outcomes, [run.event_id for run in ready if run.agent_id not in locked]


def _apply_locked(
    ctx: WriteContext, session: Session, ready: list[RunView], outcomes: dict[uuid.UUID, StageResult]
) -> None:
    """Apply ``ready`` (their agents locked) in arrival order and mark them done, in ``session``'s transaction."""
    if not ready:
        return
    ready.sort(key=lambda run: run.arrival_key)
    try:
        # Optimistic: the whole chunk under one savepoint, no savepoint per message or per fact
        # (a third of the stage's statements, and the Python around them). Anything failing rolls the chunk
        # back to here, and it is applied again guarded, with the outcome it would have had.
        with session.begin_nested():
            completions, counters = _apply_runs(ctx, session, ready, outcomes, guarded=False)
    except Exception:
        completions, counters = _apply_runs(ctx, session, ready, outcomes, guarded=True)
    # Sums over the chunk's messages, written once for all its agents (the same totals as
    # message by message).
    register_attributes_of_agents(session, {agent_id: total.attributes for agent_id, total in counters.items()})
    refresh_entity_counts_of_agents(
        session,
        {agent_id: (total.entities, total.closed_facts) for agent_id, total in counters.items()},
        {agent_id: total.sightings for agent_id, total in counters.items()},
    )
    advanced = complete_stages(session, "upsert", completions, new_status="done")
    if advanced != {item.event_id for item in completions}:
        # Impossible while the run rows are locked; if it happens, write nothing at all.
        raise RuntimeError(f"upsert: runs changed status under their row lock: {sorted(map(str, advanced))}")
    for item in completions:
        outcomes[item.event_id] = "completed"


def _single(outcomes: dict[uuid.UUID, StageResult], event_id: uuid.UUID) -> StageOutcome:
    outcome = outcomes[event_id]
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def run_extract(ctx: WriteContext, event_id: uuid.UUID) -> StageOutcome:
    """Stage 1: extraction (LLM-bound). Stores the extraction and the event's embedding and emotion."""
    return _single(run_stage_chunk(ctx, "extract", [event_id]), event_id)


def run_resolve(ctx: WriteContext, event_id: uuid.UUID) -> StageOutcome:
    """Stage 2: entity resolution (reads only; may ask the disambiguation skill)."""
    return _single(run_stage_chunk(ctx, "resolve", [event_id]), event_id)


def run_reconcile(ctx: WriteContext, event_id: uuid.UUID) -> StageOutcome:
    """Stage 3: reconciliation decisions from a snapshot of the active facts."""
    return _single(run_stage_chunk(ctx, "reconcile", [event_id]), event_id)


def run_upsert(ctx: WriteContext, event_id: uuid.UUID) -> StageOutcome:
    """Stage 4: apply the decisions under the agent's lock and finish the run, in one transaction."""
    return _single(run_stage_chunk(ctx, "upsert", [event_id]), event_id)


def build_result(
    event_id: str,
    extract: ExtractStageOutput,
    resolution: ResolveStageOutput,
    reconciliation: ReconcileStageOutput,
    outcome: ApplyOutcome,
    *,
    duration_ms: float,
    verbose: bool,
    upsert_ms: float,
) -> WriteResult:
    """The seeds' WriteResult for one processed message."""
    tokens = extract.tokens.plus(resolution.tokens).plus(reconciliation.tokens)
    warnings = list(outcome.warnings)
    if extract.error:
        warnings.append(f"extraction: {extract.error}")
    trace: list[TraceStep] | None = None
    if verbose:
        trace = [
            *extract.trace,
            *resolution.trace,
            *reconciliation.trace,
            TraceStep(
                name="upsert",
                duration_ms=upsert_ms,
                data={"relationships": outcome.relationships, "warnings": outcome.warnings},
            ),
        ]
    return WriteResult(
        event_id=event_id,
        facts_added=outcome.added,
        facts_updated=outcome.updated,
        facts_unchanged=outcome.unchanged,
        facts_deleted=outcome.deleted,
        corrections=CorrectionResult(
            corrections_detected=len(outcome.corrected),
            corrected_keys=sorted({key for key in outcome.corrected.values() if key}),
            facts_corrected_ids=[str(fact_id) for fact_id in outcome.corrected],
        ),
        entities_resolved=[
            {
                "canonical_key": e.canonical_key,
                "display_name": e.display_name,
                "entity_type": e.entity_type,
                "method": e.method,
                "is_new": e.is_new,
            }
            for e in resolution.entities
        ],
        relationships=outcome.relationships,
        directives=outcome.directives,
        tokens_used=tokens,
        duration_ms=round(duration_ms, 2),
        success=True,
        error=extract.error,
        warnings=warnings,
        pipeline=trace,
    )


def dry_run(
    ctx: WriteContext,
    *,
    agent_id: str,
    message: str,
    speaker: str,
    session_id: str = "default",
    occurred_at: datetime | None = None,
    options: dict[str, Any] | None = None,
) -> WriteResult:
    """The whole pipeline computed synchronously and applied in a transaction that is rolled back.

    Nothing persists (no event, fact or entity), yet the result shows exactly what a real
    write would have done against the memory as it is now, and what it cost in tokens.
    """
    started = time.perf_counter()
    options = dict(options or {})
    at = occurred_at or datetime.now(UTC)
    speaker_key = speaker_entity(speaker)[0]
    with reading(ctx) as session:
        agent_config = load_agent_overrides(session, agent_id)
        config = ctx.config_for(options, agent_config)
        extraction = compute_extraction(
            ctx,
            session,
            agent_id=agent_id,
            message=message,
            speaker=speaker,
            occurred_at=at,
            options=options,
            agent_config=agent_config,
        )
        resolution = resolve_entities(
            ctx,
            session,
            agent_id=agent_id,
            speaker=speaker,
            message=message,
            entities=extraction.output.extraction.entities,
            config=config,
        )
        reconciliation = reconcile_facts(
            ctx,
            session,
            agent_id=agent_id,
            facts=extraction.output.facts,
            entities=resolution.entities,
            speaker_key=speaker_key,
            occurred_at_iso=at.isoformat(),
            config=config,
            shown=shown_fact_ids(extraction.output.known_entities),
            known_as_of=extraction.output.known_as_of,
            known_snapshot=extraction.output.known_snapshot,
        )
    event_id = uuid.uuid4()
    session = ctx.sessions()
    try:
        session.begin()
        lock_agent(session, agent_id)
        # The facts' foreign key needs the event; it disappears with the rollback.
        session.execute(
            text(
                "INSERT INTO memory_events (id, agent_id, text, speaker, session_id, occurred_at, source) "
                "VALUES (:id, :agent, :text, :speaker, :session, :at, 'dry_run')"
            ),
            {
                "id": str(event_id),
                "agent": agent_id,
                "text": message,
                "speaker": speaker,
                "session": session_id,
                "at": at,
            },
        )
        run = RunView(
            event_id=event_id,
            agent_id=agent_id,
            status="reconciled",
            stage=None,
            attempts=0,
            options=options,
            stage_outputs={},
            text=message,
            speaker=speaker,
            session_id=session_id,
            message_id=None,
            occurred_at=at,
            created_at=at,
            agent_config=agent_config,
        )
        outcome = apply_message(
            session,
            run,
            extract=extraction.output,
            resolution=resolution,
            reconciliation=reconciliation,
            config=config,
            speaker_key=speaker_key,
            offline=ctx.skills.kind == "offline",
        )
    finally:
        session.rollback()
        session.close()
    elapsed = (time.perf_counter() - started) * 1000
    result = build_result(
        str(event_id),
        extraction.output,
        resolution,
        reconciliation,
        outcome,
        duration_ms=elapsed,
        verbose=bool(options.get("verbose")),
        upsert_ms=0.0,
    )
    # Ids of rows that were rolled back would mislead: a dry run reports content only.
    for change in [*result.facts_added, *result.facts_updated]:
        change.fact_id = None
    return result
