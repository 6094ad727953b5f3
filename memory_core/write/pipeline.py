"""The write pipeline's stages as functions of an event id, plus the synchronous dry run.

Each stage reads its input from PostgreSQL, computes outside any transaction (reads run
in autocommit, so no transaction stays open across an LLM or embedding call), then stores
its output and advances the run's status with a check-and-set: a stage that finds the run
already past it does nothing. ``upsert`` alone writes memory, in one short transaction
under the agent's advisory lock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import text
from sqlalchemy.orm import Session

from memory_core.write.context import WriteContext
from memory_core.write.extract import compute_extraction
from memory_core.write.reconcile import reconcile_facts
from memory_core.write.repository import vector_literal
from memory_core.write.resolve import resolve_entities, speaker_entity
from memory_core.write.runs import RunView, complete_stage, load_run, relax_durability
from memory_core.write.schemas import (
    ExtractStageOutput,
    ReconcileStageOutput,
    ResolveStageOutput,
    TokenCount,
    TraceStep,
    WriteResult,
)
from memory_core.write.skill_calls import SkillCache
from memory_core.write.upsert import ApplyOutcome, apply_message, lock_agent

StageOutcome = Literal["completed", "skipped", "missing"]


@contextmanager
def reading(ctx: WriteContext) -> Iterator[Session]:
    """A session whose every statement commits at once.

    Stages ``close()`` it before every LLM or embedding call, which hands its connection back
    to the pool: a thread waiting 500 ms on a model must not hold one of the pool's connections
    (64 extraction threads share a pool of 20).
    """
    autocommit = ctx.engine.execution_options(isolation_level="AUTOCOMMIT")
    with Session(bind=autocommit) as session:
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


def _begin(ctx: WriteContext, event_id: uuid.UUID, stage: str, expected: str) -> RunView | StageOutcome:
    with reading(ctx) as session:
        run = load_run(session, event_id, outputs=REQUIRED_OUTPUTS[stage])
    if run is None:
        return "missing"
    if run.status != expected:
        return "skipped"
    _check_inputs(run, stage)
    return run


def run_extract(ctx: WriteContext, event_id: uuid.UUID) -> StageOutcome:
    """Stage 1: extraction (LLM-bound). Stores the extraction and the event's embedding and emotion."""
    run = _begin(ctx, event_id, "extract", "received")
    if isinstance(run, str):
        return run
    started = time.perf_counter()
    cache = SkillCache(ctx.sessions, event_id, run.stage_outputs.get("llm_cache") or {})
    with reading(ctx) as session:
        result = compute_extraction(
            ctx,
            session,
            agent_id=run.agent_id,
            message=run.text,
            speaker=run.speaker,
            occurred_at=run.occurred_at,
            options=run.options,
            cache=cache,
        )
    duration = (time.perf_counter() - started) * 1000
    with ctx.sessions.begin() as session:
        if not complete_stage(
            session,
            event_id,
            "extract",
            result.output.model_dump(mode="json"),
            new_status="extracted",
            duration_ms=duration,
            tokens=result.output.tokens.model_dump(),
        ):
            return "skipped"
        emotion = result.emotion
        session.execute(
            text(
                "UPDATE memory_events SET embedding_vec = CAST(:vec AS vector), emotion_primary = :emotion, "
                "emotion_intensity = :intensity, energy_level = :energy WHERE id = :id"
            ),
            {
                "vec": _vector(result.event_embedding),
                "emotion": emotion.emotion if emotion else None,
                "intensity": emotion.intensity if emotion else None,
                "energy": emotion.energy if emotion else None,
                "id": str(event_id),
            },
        )
    return "completed"


def run_resolve(ctx: WriteContext, event_id: uuid.UUID) -> StageOutcome:
    """Stage 2: entity resolution (reads only; may ask the disambiguation skill)."""
    run = _begin(ctx, event_id, "resolve", "extracted")
    if isinstance(run, str):
        return run
    started = time.perf_counter()
    extract = ExtractStageOutput.model_validate(run.stage_outputs["extract"])
    cache = SkillCache(ctx.sessions, event_id, run.stage_outputs.get("llm_cache") or {})
    with reading(ctx) as session:
        output = resolve_entities(
            ctx,
            session,
            agent_id=run.agent_id,
            speaker=run.speaker,
            message=run.text,
            entities=extract.extraction.entities,
            config=ctx.config_for(run.options),
            cache=cache,
        )
    return _store(
        ctx,
        event_id,
        stage="resolve",
        status="resolved",
        output=output.model_dump(mode="json"),
        started=started,
        tokens=output.tokens,
    )


def run_reconcile(ctx: WriteContext, event_id: uuid.UUID) -> StageOutcome:
    """Stage 3: reconciliation decisions from a snapshot of the active facts."""
    run = _begin(ctx, event_id, "reconcile", "resolved")
    if isinstance(run, str):
        return run
    started = time.perf_counter()
    extract = ExtractStageOutput.model_validate(run.stage_outputs["extract"])
    resolution = ResolveStageOutput.model_validate(run.stage_outputs["resolve"])
    cache = SkillCache(ctx.sessions, event_id, run.stage_outputs.get("llm_cache") or {})
    with reading(ctx) as session:
        output = reconcile_facts(
            ctx,
            session,
            agent_id=run.agent_id,
            facts=extract.facts,
            entities=resolution.entities,
            speaker_key=speaker_entity(run.speaker)[0],
            occurred_at_iso=run.occurred_at.isoformat(),
            config=ctx.config_for(run.options),
            cache=cache,
        )
    return _store(
        ctx,
        event_id,
        stage="reconcile",
        status="reconciled",
        output=output.model_dump(mode="json"),
        started=started,
        tokens=output.tokens,
    )


def run_upsert(ctx: WriteContext, event_id: uuid.UUID) -> StageOutcome:
    """Stage 4: apply the decisions under the agent's lock and finish the run, in one transaction."""
    started = time.perf_counter()
    with ctx.sessions.begin() as session:
        # The run row lock makes a concurrent redelivery of this stage wait, then see "done".
        run = load_run(session, event_id, for_update=True, outputs=REQUIRED_OUTPUTS["upsert"])
        if run is None:
            return "missing"
        if run.status != "reconciled":
            return "skipped"
        _check_inputs(run, "upsert")
        relax_durability(session)
        lock_agent(session, run.agent_id)
        extract = ExtractStageOutput.model_validate(run.stage_outputs["extract"])
        resolution = ResolveStageOutput.model_validate(run.stage_outputs["resolve"])
        reconciliation = ReconcileStageOutput.model_validate(run.stage_outputs["reconcile"])
        outcome = apply_message(
            session,
            run,
            extract=extract,
            resolution=resolution,
            reconciliation=reconciliation,
            config=ctx.config_for(run.options),
            speaker_key=speaker_entity(run.speaker)[0],
            offline=ctx.skills.kind == "offline",
        )
        duration = (time.perf_counter() - started) * 1000
        timings = session.execute(
            text("SELECT timings FROM pipeline_runs WHERE event_id = :id"), {"id": str(event_id)}
        ).scalar_one()
        result = build_result(
            str(event_id),
            extract,
            resolution,
            reconciliation,
            outcome,
            duration_ms=sum(float(v) for v in (timings or {}).values()) + duration,
            verbose=bool(run.options.get("verbose")),
            upsert_ms=duration,
        )
        completed = complete_stage(
            session,
            event_id,
            "upsert",
            {"facts": len(outcome.added) + len(outcome.updated)},
            new_status="done",
            duration_ms=duration,
        )
        if not completed:
            session.rollback()
            return "skipped"
        session.execute(
            text("UPDATE pipeline_runs SET result = CAST(:result AS jsonb) WHERE event_id = :id"),
            {"result": result.model_dump_json(), "id": str(event_id)},
        )
    return "completed"


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
        tokens_used=tokens,
        duration_ms=round(duration_ms, 2),
        success=True,
        error=extract.error,
        warnings=warnings,
        pipeline=trace,
    )


def _store(
    ctx: WriteContext,
    event_id: uuid.UUID,
    *,
    stage: str,
    status: str,
    output: dict[str, Any],
    started: float,
    tokens: TokenCount,
) -> StageOutcome:
    with ctx.sessions.begin() as session:
        done = complete_stage(
            session,
            event_id,
            stage,
            output,
            new_status=status,
            duration_ms=(time.perf_counter() - started) * 1000,
            tokens=tokens.model_dump(),
        )
    return "completed" if done else "skipped"


def _vector(vector: list[float] | None) -> str | None:
    return vector_literal(vector) if vector else None


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
    config = ctx.config_for(options)
    with reading(ctx) as session:
        extraction = compute_extraction(
            ctx, session, agent_id=agent_id, message=message, speaker=speaker, occurred_at=at, options=options
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
