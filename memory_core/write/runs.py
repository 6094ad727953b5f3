"""Pipeline-run bookkeeping: the state machine every stage advances, and progress queries."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import TextClause, bindparam, delete, func, literal, select, text, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from memory_core.config import MemoryConfig
from memory_core.db.models import MemoryEvent, PipelineRun, PipelineStageOutput
from memory_core.db.statements import sql
from memory_core.write.schemas import STAGE_INPUT_STATUS, STAGES, TERMINAL_STATUSES


@dataclass(frozen=True)
class RunView:
    """A run with its event, as read at the start of a stage."""

    event_id: uuid.UUID
    agent_id: str
    status: str
    stage: str | None
    attempts: int
    options: dict[str, Any]
    stage_outputs: dict[str, Any]
    text: str
    speaker: str
    session_id: str
    message_id: str | None
    occurred_at: datetime
    created_at: datetime
    timings: dict[str, Any] = field(default_factory=dict)
    # Arrival order among events (migration 0005); None for events stored before it.
    seq: int | None = None
    # The agent's stored MemoryConfig overrides (agent_configs), read with the run; None: none.
    agent_config: dict[str, Any] | None = None

    @property
    def arrival_key(self) -> tuple[datetime, int, str]:
        """Sort key of the order messages happened in: ``occurred_at``, then arrival, then id."""
        return (self.occurred_at, -1 if self.seq is None else self.seq, str(self.event_id))


def _load_runs_sql(*, for_update: bool, llm_cache: bool) -> TextClause:
    return sql(
        "SELECT r.event_id, r.agent_id, r.status, r.stage, r.attempts, r.options, "
        + ("r.llm_cache" if llm_cache else "NULL::jsonb AS llm_cache")
        + ", r.timings, r.created_at, e.text, e.speaker, e.session_id, e.message_id, e.occurred_at, e.seq, "
        # The agent's config in the same statement: no round trip more per chunk.
        "c.overrides AS agent_config "
        "FROM pipeline_runs r JOIN memory_events e ON e.id = r.event_id "
        "LEFT JOIN agent_configs c ON c.agent_id = r.agent_id "
        "WHERE r.event_id = ANY(CAST(:ids AS uuid[])) ORDER BY r.event_id" + (" FOR UPDATE OF r" if for_update else "")
    )


_LOAD_RUNS = {
    (for_update, llm_cache): _load_runs_sql(for_update=for_update, llm_cache=llm_cache)
    for for_update in (False, True)
    for llm_cache in (False, True)
}
_LOAD_OUTPUTS = sql(
    "SELECT event_id, stage, output FROM pipeline_stage_outputs "
    "WHERE event_id = ANY(CAST(:ids AS uuid[])) AND stage = ANY(CAST(:stages AS text[]))"
)


def load_runs(
    session: Session,
    event_ids: Sequence[uuid.UUID],
    *,
    for_update: bool = False,
    outputs: Sequence[str] = (),
    llm_cache: bool = True,
) -> dict[uuid.UUID, RunView]:
    """Several runs with their events and stored outputs in two statements (a chunk's reads).

    With ``for_update`` the run rows are locked in event-id order, so two overlapping chunks
    (a redelivery, a split-off retry) queue behind each other instead of deadlocking.
    ``llm_cache=False`` leaves the runs' LLM answers unread (``stage_outputs["llm_cache"]`` is
    empty): a stage that asks no skill (``upsert``) has no use for them, and with batched
    extraction they hold each message's whole answer.
    """
    if not event_ids:
        return {}
    # Named columns, not ORM entities: the event's embedding (parsed from text by pgvector) and
    # the run's result and usage are not needed by any stage, and decoding them cost more than
    # the query itself. Textual statements: through the ORM, compiling the selects (their cache
    # keys, the expanded IN lists) and loading their rows was a sixth of an apply worker's CPU.
    ids = [str(event_id) for event_id in dict.fromkeys(event_ids)]
    statement = _LOAD_RUNS[(for_update, llm_cache)]
    rows = session.execute(statement, {"ids": ids}).all()
    stored: dict[uuid.UUID, dict[str, Any]] = {row.event_id: {"llm_cache": dict(row.llm_cache or {})} for row in rows}
    if outputs and rows:
        found = session.execute(
            _LOAD_OUTPUTS, {"ids": [str(event_id) for event_id in stored], "stages": list(outputs)}
        ).all()
        for event_id, stage, output in found:
            stored[event_id][stage] = output
    return {
        row.event_id: RunView(
            event_id=row.event_id,
            agent_id=row.agent_id,
            status=row.status,
            stage=row.stage,
            attempts=row.attempts,
            options=dict(row.options or {}),
            stage_outputs=stored[row.event_id],
            text=row.text,
            speaker=row.speaker,
            session_id=row.session_id,
            message_id=row.message_id,
            occurred_at=row.occurred_at,
            created_at=row.created_at,
            timings=dict(row.timings or {}),
            seq=row.seq,
            agent_config=dict(row.agent_config) if row.agent_config else None,
        )
        for row in rows
    }


@dataclass(frozen=True)
class StageCompletion:
    """One event's finished stage: its output, how long it took, what it cost, and (upsert) its result."""

    event_id: uuid.UUID
    output: dict[str, Any]
    duration_ms: float
    tokens: dict[str, int] | None = None
    result: dict[str, Any] | None = None


_LOCK_RUNS_IN_ORDER = text(
    "SELECT event_id FROM pipeline_runs WHERE event_id = ANY(CAST(:ids AS uuid[])) ORDER BY event_id FOR NO KEY UPDATE"
)

_COMPLETE_STAGES = text(
    """
    WITH done AS (
        SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb))
            AS x(event_id uuid, ms float8, tokens jsonb, output jsonb, result jsonb)
    ), advanced AS (
        UPDATE pipeline_runs r SET
            status = CAST(:new_status AS varchar), stage = CAST(:stage AS varchar), error = NULL, updated_at = now(),
            sweeps = 0,
            timings = COALESCE(r.timings, '{}'::jsonb) || jsonb_build_object(CAST(:stage AS text), done.ms),
            token_usage = CASE WHEN done.tokens IS NULL THEN r.token_usage
                               ELSE COALESCE(r.token_usage, '{}'::jsonb)
                                    || jsonb_build_object(CAST(:stage AS text), done.tokens) END,
            finished_at = CASE WHEN CAST(:terminal AS boolean) THEN now() ELSE r.finished_at END,
            result = COALESCE(done.result, r.result)
        FROM done
        WHERE r.event_id = done.event_id AND r.status = CAST(:expected AS varchar)
        RETURNING r.event_id, r.agent_id
    ), stored AS (
        INSERT INTO pipeline_stage_outputs (event_id, stage, output)
        SELECT done.event_id, CAST(:stage AS varchar), done.output
        FROM done JOIN advanced ON advanced.event_id = done.event_id
        ON CONFLICT (event_id, stage) DO UPDATE SET output = EXCLUDED.output
    ), usage AS (
        -- The LLM calls behind the outputs stored here, counted with them (memory_core.usage).
        INSERT INTO llm_usage AS u (agent_id, day, skill, model, calls, failures, input_tokens, output_tokens,
                                    cached_input_tokens)
        SELECT advanced.agent_id, CAST(timezone('UTC', now()) AS date), call.skill, COALESCE(call.model, ''),
               COALESCE(sum(call.calls), 0), COALESCE(sum(call.failures), 0), COALESCE(sum(call.input_tokens), 0),
               COALESCE(sum(call.output_tokens), 0), COALESCE(sum(call.cached_input_tokens), 0)
        FROM done JOIN advanced ON advanced.event_id = done.event_id
        CROSS JOIN LATERAL jsonb_to_recordset(COALESCE(done.tokens -> 'by_skill', '[]'::jsonb))
            AS call(skill text, model text, calls bigint, failures bigint, input_tokens bigint,
                    output_tokens bigint, cached_input_tokens bigint)
        WHERE call.skill IS NOT NULL
        GROUP BY advanced.agent_id, call.skill, COALESCE(call.model, '')
        ORDER BY advanced.agent_id, call.skill, COALESCE(call.model, '')
        ON CONFLICT (agent_id, day, skill, model) DO UPDATE SET
            calls = u.calls + excluded.calls,
            failures = u.failures + excluded.failures,
            input_tokens = u.input_tokens + excluded.input_tokens,
            output_tokens = u.output_tokens + excluded.output_tokens,
            cached_input_tokens = u.cached_input_tokens + excluded.cached_input_tokens,
            updated_at = now()
    )
    SELECT event_id FROM advanced
    """
)


def complete_stages(
    session: Session, stage: str, completions: Sequence[StageCompletion], *, new_status: str
) -> set[uuid.UUID]:
    """Store every completion's output and advance its run, only where the run still waits for ``stage``.

    One statement for the whole chunk: the same check-and-set as :func:`complete_stage`, so a
    redelivered stage advances nothing. The LLM usage each completion's ``tokens`` carries
    (``by_skill``) is added to ``llm_usage`` for the runs that advanced, in the same statement:
    counted exactly when the output is stored, once. Returns the ids that advanced.
    """
    if not completions:
        return set()
    relax_durability(session)
    # The update would lock the chunk's runs in join order; erasure locks an agent's runs in
    # event-id order. Taking them in that order first makes the two queue instead of deadlocking.
    session.execute(_LOCK_RUNS_IN_ORDER, {"ids": sorted(str(item.event_id) for item in completions)})
    rows = [
        {
            "event_id": str(item.event_id),
            "ms": round(item.duration_ms, 2),
            "tokens": item.tokens,
            "output": item.output,
            "result": item.result,
        }
        for item in completions
    ]
    advanced = session.execute(
        _COMPLETE_STAGES,
        {
            "rows": orjson.dumps(rows).decode(),
            "new_status": new_status,
            "stage": stage,
            "expected": STAGE_INPUT_STATUS[stage],
            "terminal": new_status in TERMINAL_STATUSES,
        },
    ).scalars()
    return set(advanced)


def plan_chunks(
    session: Session, event_ids: Sequence[uuid.UUID], size: int, *, mix_agents: bool = False
) -> list[list[uuid.UUID]]:
    """Split events into chunks at most ``size`` long, each agent's in the order they happened.

    That order is ``occurred_at``, then arrival (``seq``: messages of one import often share a
    timestamp), then id.

    By default a chunk holds one agent's events, spread evenly over as few chunks as ``size``
    allows (40 events at 16 make chunks of 14, 13 and 13). With ``mix_agents`` (single messages
    from many agents, a few each) the events, grouped by agent, are cut into as few even chunks
    as ``size`` allows whatever their agents. Ids without an event (deleted since) are left out.
    """
    rows = session.execute(
        text(
            "SELECT id, agent_id FROM memory_events WHERE id = ANY(:ids) "
            "ORDER BY agent_id, occurred_at, seq NULLS FIRST, id"
        ),
        {"ids": [str(event_id) for event_id in event_ids]},
    ).all()
    if mix_agents:
        return _even_chunks([event_id for event_id, _ in rows], size)
    by_agent: dict[str, list[uuid.UUID]] = {}
    for event_id, agent_id in rows:
        by_agent.setdefault(agent_id, []).append(event_id)
    return [chunk for ids in by_agent.values() for chunk in _even_chunks(ids, size)]


def _even_chunks(ids: list[uuid.UUID], size: int) -> list[list[uuid.UUID]]:
    """``ids`` cut, in order, into as few chunks of at most ``size`` as possible, of even lengths."""
    if not ids:
        return []
    count = -(-len(ids) // size)
    step, extra = divmod(len(ids), count)
    chunks: list[list[uuid.UUID]] = []
    offset = 0
    for index in range(count):
        length = step + (1 if index < extra else 0)
        chunks.append(ids[offset : offset + length])
        offset += length
    return chunks


def relax_durability(session: Session) -> None:
    """Do not wait for the WAL flush when this transaction commits.

    Safe for stage transactions only: if PostgreSQL crashed before flushing, the run would
    fall back to its previous status and the stage would run again, which is idempotent.
    The event itself (written by the API before it answers 202) is always flushed.
    """
    session.execute(text("SET LOCAL synchronous_commit = off"))


def _jsonb(value: Any) -> Any:
    return literal(value, type_=JSONB)


def complete_stage(
    session: Session,
    event_id: uuid.UUID,
    stage: str,
    output: dict[str, Any],
    *,
    new_status: str,
    duration_ms: float,
    tokens: dict[str, int] | None = None,
) -> bool:
    """Store ``stage``'s output and advance the status, only if the run still waits for it.

    Returns False (and writes nothing) when another delivery of the same stage got there
    first: the check-and-set on the status makes a redelivered stage a no-op. The output goes
    to a row of its own, so a stage never rewrites the (large) outputs of the stages before it.
    """
    expected = STAGE_INPUT_STATUS[stage]
    relax_durability(session)
    values: dict[str, Any] = {
        "status": new_status,
        "stage": stage,
        "error": None,
        "updated_at": func.now(),
        # Progress: the sweeper's count of re-enqueues without any starts again.
        "sweeps": 0,
        "timings": PipelineRun.timings.op("||")(func.jsonb_build_object(stage, round(duration_ms, 2))),
    }
    if tokens:
        values["token_usage"] = PipelineRun.token_usage.op("||")(func.jsonb_build_object(stage, _jsonb(tokens)))
    if new_status in TERMINAL_STATUSES:
        values["finished_at"] = func.now()
    result = session.execute(
        update(PipelineRun)
        .where(PipelineRun.event_id == event_id, PipelineRun.status == expected)
        .values(**values)
        .returning(PipelineRun.event_id)
    )
    if result.first() is None:
        return False
    session.execute(
        pg_insert(PipelineStageOutput)
        .values(event_id=event_id, stage=stage, output=output)
        .on_conflict_do_update(index_elements=["event_id", "stage"], set_={"output": output})
    )
    return True


def record_attempt(session: Session, event_id: uuid.UUID, stage: str, error: str) -> int:
    """Count a failed attempt at ``stage`` and return the new count."""
    attempts = session.execute(
        update(PipelineRun)
        .where(PipelineRun.event_id == event_id)
        .values(attempts=PipelineRun.attempts + 1, stage=stage, error=error[:4000], updated_at=func.now())
        .returning(PipelineRun.attempts)
    ).scalar_one_or_none()
    return int(attempts or 0)


def record_throttled(session: Session, event_id: uuid.UUID, stage: str, error: str) -> int:
    """Count a retry the provider asked for (rate limited, with Retry-After) and return the new count.

    Kept apart from :func:`record_attempt`: being told to wait is not a failure of the message.
    """
    throttled = session.execute(
        update(PipelineRun)
        .where(PipelineRun.event_id == event_id)
        .values(
            throttled_retries=PipelineRun.throttled_retries + 1, stage=stage, error=error[:4000], updated_at=func.now()
        )
        .returning(PipelineRun.throttled_retries)
    ).scalar_one_or_none()
    return int(throttled or 0)


def mark_failed(session: Session, event_id: uuid.UUID, stage: str, error: str) -> None:
    """Give up on the run: ``failed`` with the stage and the error, until someone re-drives it."""
    session.execute(
        update(PipelineRun)
        .where(PipelineRun.event_id == event_id, PipelineRun.status.notin_(TERMINAL_STATUSES))
        .values(status="failed", stage=stage, error=error[:4000], updated_at=func.now(), finished_at=func.now())
    )


def redrive(
    session: Session, event_id: uuid.UUID, *, from_scratch: bool, config: MemoryConfig | None = None
) -> str | None:
    """Reset a failed (or, ``from_scratch``, a done) run so the pipeline runs again.

    A failed run resumes at the stage that failed, keeping earlier stages' outputs; from
    scratch clears them and re-extracts (for example after changing the model), and a done
    run's facts and repetitions are withdrawn from memory first (:mod:`memory_core.write.withdraw`). Returns the
    stage to start from, or None when the run is in a state that cannot be re-driven.
    ``config`` is the agent's effective config, which the withdrawal follows.
    """
    run = session.get(PipelineRun, event_id, with_for_update=True)
    if run is None:
        return None
    if from_scratch and run.status in TERMINAL_STATUSES:
        if run.status == "done":
            # Imported here: the apply step's modules import this one.
            from memory_core.write.upsert import lock_agent
            from memory_core.write.withdraw import withdraw_result

            # What the old extraction wrote goes first: the new one must neither find it nor
            # count it as a repetition. The agent's lock, after the run's (the apply step's order).
            lock_agent(session, run.agent_id)
            occurred_at = session.execute(
                select(MemoryEvent.occurred_at).where(MemoryEvent.id == event_id)
            ).scalar_one()
            withdraw_result(session, run.agent_id, occurred_at, run.result, config)
        run.status = "received"
        run.llm_cache = {}
        run.result = None
        session.execute(delete(PipelineStageOutput).where(PipelineStageOutput.event_id == event_id))
        start = "extract"
    elif run.status == "failed":
        start = run.stage if run.stage in STAGES else "extract"
        run.status = STAGE_INPUT_STATUS[start]
    else:
        return None
    run.attempts = 0
    run.throttled_retries = 0
    run.sweeps = 0
    run.error = None
    run.finished_at = None
    run.updated_at = session.execute(select(func.now())).scalar_one()
    return start


def _restart_status_sql() -> str:
    """SQL of the status a failed run restarts in: its failed stage's input (``extract``'s when unknown)."""
    cases = " ".join(f"WHEN '{stage}' THEN '{STAGE_INPUT_STATUS[stage]}'" for stage in STAGES)
    return f"CASE r.stage {cases} ELSE 'received' END"


_REDRIVE_FAILED = text(
    f"""
    WITH chosen AS (
        SELECT event_id FROM pipeline_runs
        WHERE agent_id = :agent AND status = 'failed'
          AND (CAST(:ids AS uuid[]) IS NULL OR event_id = ANY(CAST(:ids AS uuid[])))
        ORDER BY created_at, event_id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    )
    UPDATE pipeline_runs r SET status = {_restart_status_sql()}, attempts = 0, throttled_retries = 0, sweeps = 0,
        error = NULL, finished_at = NULL, updated_at = now()
    FROM chosen WHERE r.event_id = chosen.event_id
    RETURNING r.event_id, CASE WHEN r.stage IN :stages THEN r.stage ELSE 'extract' END AS start
    """  # noqa: S608 - the CASE is built from the stage constants, no input reaches the text
).bindparams(bindparam("stages", expanding=True))


def redrive_failed(
    session: Session, agent_id: str, event_ids: Sequence[uuid.UUID] | None, *, limit: int
) -> dict[str, list[uuid.UUID]]:
    """:func:`redrive` for many failed runs of one agent at once: ``event_ids``, or every failed one.

    Each run resumes at the stage that failed, as a single re-drive does. At most ``limit``
    runs, oldest first; runs another transaction holds are left for the next call. Returns the
    runs re-driven by the stage to start them at.
    """
    rows = session.execute(
        _REDRIVE_FAILED,
        {
            "agent": agent_id,
            "ids": None if event_ids is None else [str(event_id) for event_id in event_ids],
            "limit": limit,
            "stages": list(STAGES),
        },
    ).all()
    by_stage: dict[str, list[uuid.UUID]] = {}
    for event_id, start in rows:
        by_stage.setdefault(str(start), []).append(event_id)
    return by_stage


def count_failed(session: Session, agent_id: str) -> int:
    """How many of the agent's runs are ``failed``."""
    return int(
        session.execute(
            select(func.count())
            .select_from(PipelineRun)
            .where(PipelineRun.agent_id == agent_id, PipelineRun.status == "failed")
        ).scalar_one()
    )


@dataclass(frozen=True)
class StuckRun:
    """A run that has not moved for too long, and the stage to restart it at."""

    event_id: uuid.UUID
    agent_id: str
    next_stage: str
    sweeps: int


NEXT_STAGE_FOR_STATUS: dict[str, str] = {status: stage for stage, status in STAGE_INPUT_STATUS.items()}


def claim_stuck_runs(session: Session, stale_after_s: float, limit: int) -> list[StuckRun]:
    """Runs idle in a non-terminal status for ``stale_after_s``; their clock is reset so they are claimed once."""
    rows = session.execute(
        text(
            """
            UPDATE pipeline_runs SET updated_at = now(), sweeps = sweeps + 1
            WHERE event_id IN (
                SELECT event_id FROM pipeline_runs
                WHERE status IN ('received', 'extracted', 'resolved', 'reconciled')
                  AND updated_at < now() - make_interval(secs => :stale)
                ORDER BY updated_at
                LIMIT :limit
                FOR UPDATE SKIP LOCKED
            )
            RETURNING event_id, agent_id, status, sweeps
            """
        ),
        {"stale": stale_after_s, "limit": limit},
    ).all()
    return [
        StuckRun(
            event_id=row.event_id,
            agent_id=row.agent_id,
            next_stage=NEXT_STAGE_FOR_STATUS[row.status],
            sweeps=row.sweeps,
        )
        for row in rows
    ]


def triage_stuck_runs(
    session: Session, *, stale_after_s: float, limit: int, max_sweeps: int
) -> tuple[list[StuckRun], list[StuckRun]]:
    """Claim the stuck runs (:func:`claim_stuck_runs`): ``(to re-enqueue, given up)``.

    A run claimed more than ``max_sweeps`` times since its last stage completed (completing a
    stage resets the count) is given up instead: ``failed`` at the stage it never got through,
    with an error that says so, until someone re-drives it. A message that kills every worker
    that takes it would otherwise be re-enqueued forever.
    """
    retry: list[StuckRun] = []
    given_up: list[StuckRun] = []
    for run in claim_stuck_runs(session, stale_after_s, limit):
        if run.sweeps <= max_sweeps:
            retry.append(run)
            continue
        given_up.append(run)
        mark_failed(
            session,
            run.event_id,
            run.next_stage,
            f"stuck before {run.next_stage}: re-enqueued {run.sweeps - 1} times without progress "
            "(a worker may be dying on this message)",
        )
    return retry, given_up


@dataclass(frozen=True)
class ImportProgress:
    """How far an import got, counted from its runs."""

    import_id: uuid.UUID
    agent_id: str
    total: int
    duplicates: int
    done: int
    failed: int
    pending: int
    created_at: datetime

    @property
    def status(self) -> str:
        """``done`` when every message is done, ``failed`` when all finished with some failed, else ``running``."""
        if self.pending > 0:
            return "running"
        return "failed" if self.failed else "done"


# The import and its runs' counts in one statement: clients poll this while an import runs (a
# benchmark's five imports, twice a second each), and through the ORM its two statements cost
# the API more CPU than the counting cost the database.
_IMPORT_PROGRESS = sql(
    "SELECT i.id, i.agent_id, i.total, i.duplicates, i.created_at, "
    "count(*) FILTER (WHERE r.status = 'done') AS done, count(*) FILTER (WHERE r.status = 'failed') AS failed "
    "FROM imports i LEFT JOIN pipeline_runs r ON r.import_id = i.id "
    "WHERE i.id = :id GROUP BY i.id"
)
_IMPORT_OWNER = sql("SELECT agent_id FROM imports WHERE id = :id")


def import_owner(session: Session, import_id: uuid.UUID) -> str | None:
    """The agent an import belongs to (None: no such import), by primary key."""
    owner = session.execute(_IMPORT_OWNER, {"id": import_id}).scalar()
    return None if owner is None else str(owner)


def import_progress(session: Session, import_id: uuid.UUID) -> ImportProgress | None:
    """Counts of an import's events by outcome."""
    record = session.execute(_IMPORT_PROGRESS, {"id": import_id}).first()
    if record is None:
        return None
    done = int(record.done)
    failed = int(record.failed)
    return ImportProgress(
        import_id=record.id,
        agent_id=record.agent_id,
        total=record.total,
        duplicates=record.duplicates,
        done=done,
        failed=failed,
        pending=max(record.total - done - failed, 0),
        created_at=record.created_at,
    )
