"""Re-process an agent: re-derive its whole memory from its event log, then switch to it at once.

Why a shadow agent
------------------
Every query of the service is scoped by ``agent_id``, and the write pipeline derives memory
from an event's run. So the new memory is derived by the ordinary pipeline under a hidden agent
id, the *shadow* ``~reprocess:<id>`` (:mod:`memory_core.shadow`): each live event is copied to
a shadow event (same text, speaker, session, ``occurred_at`` and options, inserted in the order
the live ones happened, its ``message_id`` holding the live event's id) with a run of its own,
and those runs go through extract -> resolve -> reconcile -> upsert exactly as a fresh import
of the same messages would, with today's skills and embedder. Retrieval and new messages keep
using the live memory meanwhile: nothing of the live agent is touched until the switch.

The switch
----------
When every shadow run is done or failed, one transaction, holding the locks the write pipeline
and erasure take and in their order (the agent's run rows, then its advisory lock), then this
re-process's row and the shadow's lock:

1. stops the agent's maintenance runs as erasure does (a job in flight would write what it
   derived from the old memory), then deletes the live derived memory (:data:`DERIVED_TABLES`,
   children first, the erasure's plan);
2. re-keys the shadow's derived rows to the live agent id, and points their event references
   (a fact's ``source_event_id``...) at the live events;
3. gives the live runs the shadow runs' state (status, error, result, stage outputs, LLM
   answers): a message that failed in the re-process is ``failed`` in the live log, and can be
   re-driven;
4. re-drives from scratch the live messages that arrived too late to be copied (see below);
5. adds the shadow's LLM usage to the agent's.

What is left of the shadow (its events and runs) is erased after the commit, and the live events
take the shadow's embeddings and emotion tags just before the switch's transaction: both are
long rewrites that the agent's messages need not wait for.

No event is deleted and no message changed (only its embedding and emotion tags are refreshed):
the log stays the source of truth.

Messages that arrive while it runs
----------------------------------
They are applied to the live memory as usual. Before switching, a *catch-up round* copies the
live events that have no shadow twin yet and waits for them (at most
:data:`MAX_CATCH_UP_ROUNDS` rounds, so a busy agent cannot hold the switch off for ever). The
few that still arrive after the last round are, in the switch's transaction, reset to
``received`` and re-driven from scratch once it commits: their old application disappears with
the old memory and they are applied once to the new one. A stage of such a message that was
in flight finds its run reset and does nothing, except an extraction that lands just after the
reset (its answer is kept: it was computed from the message itself).

Cancelling marks the row ``cancelled`` and erases the shadow; the live memory is untouched.
A re-process whose row disappeared (the agent was erased) is cleaned up the same way.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from sqlalchemy import Engine, RowMapping, TextClause, text
from sqlalchemy.orm import Session, sessionmaker

from memory_core.maintenance.erasure import (
    ForeignKey,
    agent_tables,
    delete_agent_rows,
    erase_agent,
    foreign_keys,
    plan_erasure,
    stop_maintenance,
)
from memory_core.read.agent_index import database_key
from memory_core.read.keywords import document_frequency_cache
from memory_core.shadow import shadow_agent_id
from memory_core.write.schemas import TERMINAL_STATUSES
from memory_core.write.upsert import lock_agent

__all__ = [
    "DERIVED_TABLES",
    "KEPT_TABLES",
    "MAX_CATCH_UP_ROUNDS",
    "Advance",
    "ReprocessRunningError",
    "ReprocessView",
    "advance_reprocess",
    "cancel_reprocess",
    "discard_shadows",
    "get_reprocess",
    "latest_reprocess",
    "orphan_shadows",
    "stalled_reprocesses",
    "start_reprocess",
]

logger = logging.getLogger(__name__)

#: The tables whose rows of an agent are derived from its events (by the write pipeline or the
#: maintenance jobs over its output): replaced whole by a re-process.
DERIVED_TABLES: tuple[str, ...] = (
    "memory_facts",
    "memory_fact_usage",
    "memory_fact_entity_links",
    "memory_entities",
    "memory_entity_aliases",
    "memory_entity_relationships",
    "memory_meta_observations",
    "memory_clusters",
    "memory_attribute_registry",
    "memory_directives",
    "memory_directive_blocks",
)
#: The tables with an agent column that a re-process keeps: the log itself and the bookkeeping
#: around it. A table in neither list is left alone (a test asks every new table to be classed).
KEPT_TABLES: tuple[str, ...] = (
    "memory_events",
    "pipeline_runs",
    "imports",
    "llm_usage",
    "maintenance_job_runs",
    "agent_reprocesses",
    "agent_configs",  # the shadow works on a copy; the live agent's config is never replaced
    "memory_pending_operations",  # what the agent's user is asked to confirm, not derived memory
)
#: Rounds of copying messages that arrived during the re-process before switching anyway.
MAX_CATCH_UP_ROUNDS = 3

Status = Literal["running", "done", "cancelled"]

# Live events without a shadow twin, copied in the order they happened (the shadow's seq keeps
# it), each with a run of its own carrying the live run's options.
_MIRROR_SQL = text(
    """
    WITH copied AS (
        INSERT INTO memory_events (agent_id, text, speaker, session_id, message_id, source, occurred_at)
        SELECT :shadow, e.text, e.speaker, e.session_id, CAST(e.id AS text), e.source, e.occurred_at
        FROM memory_events e
        WHERE e.agent_id = :agent AND NOT EXISTS (
            SELECT 1 FROM memory_events s WHERE s.agent_id = :shadow AND s.message_id = CAST(e.id AS text))
        ORDER BY e.occurred_at, e.seq NULLS FIRST, e.id
        RETURNING id, message_id
    )
    INSERT INTO pipeline_runs (event_id, agent_id, status, options)
    SELECT c.id, :shadow, 'received', COALESCE(r.options, '{}'::jsonb)
    FROM copied c LEFT JOIN pipeline_runs r ON r.event_id = CAST(c.message_id AS uuid)
    RETURNING event_id
    """
)
_UNMIRRORED_SQL = text(
    """
    SELECT count(*) FROM memory_events e
    WHERE e.agent_id = :agent AND NOT EXISTS (
        SELECT 1 FROM memory_events s WHERE s.agent_id = :shadow AND s.message_id = CAST(e.id AS text))
    """
)
_RUN_COUNTS_SQL = text("SELECT status, count(*) FROM pipeline_runs WHERE agent_id = :shadow GROUP BY status")
_VIEW_COLUMNS = (
    "id, agent_id, status, total, done, failed, requeued, catch_up_rounds, error, created_at, updated_at, finished_at"
)
_LOCK_RUNS_SQL = text("SELECT event_id FROM pipeline_runs WHERE agent_id = :agent ORDER BY event_id FOR UPDATE")

# --- the switch's statements (``:agent`` the live id, ``:shadow`` the shadow's) --------------------
_EVENTS_TAKE_EMBEDDINGS = text(
    """
    UPDATE memory_events l SET embedding_vec = s.embedding_vec, emotion_primary = s.emotion_primary,
        emotion_intensity = s.emotion_intensity, energy_level = s.energy_level
    FROM memory_events s
    WHERE s.agent_id = :shadow AND s.embedding_vec IS NOT NULL
      AND l.id = CAST(s.message_id AS uuid) AND l.agent_id = :agent
      -- The same embedder gave the same vector: no row to rewrite.
      AND (l.embedding_vec IS DISTINCT FROM s.embedding_vec
           OR l.emotion_primary IS DISTINCT FROM s.emotion_primary
           OR l.emotion_intensity IS DISTINCT FROM s.emotion_intensity
           OR l.energy_level IS DISTINCT FROM s.energy_level)
    """
)
_RUNS_TAKE_STATE = text(
    """
    UPDATE pipeline_runs l SET status = r.status, stage = r.stage, attempts = r.attempts,
        throttled_retries = r.throttled_retries, sweeps = r.sweeps, error = r.error, llm_cache = r.llm_cache,
        token_usage = r.token_usage, timings = r.timings, finished_at = r.finished_at, updated_at = now(),
        result = CASE WHEN r.result IS NULL THEN NULL
                      ELSE jsonb_set(r.result, '{event_id}', to_jsonb(CAST(l.event_id AS text))) END
    FROM memory_events s JOIN pipeline_runs r ON r.event_id = s.id
    WHERE s.agent_id = :shadow AND l.event_id = CAST(s.message_id AS uuid) AND l.agent_id = :agent
    """
)
_DROP_LIVE_OUTPUTS = text(
    """
    DELETE FROM pipeline_stage_outputs o USING memory_events s
    WHERE s.agent_id = :shadow AND o.event_id = CAST(s.message_id AS uuid)
    """
)
_MOVE_SHADOW_OUTPUTS = text(
    """
    UPDATE pipeline_stage_outputs o SET event_id = l.event_id
    FROM memory_events s JOIN pipeline_runs l ON l.event_id = CAST(s.message_id AS uuid) AND l.agent_id = :agent
    WHERE s.agent_id = :shadow AND o.event_id = s.id
    """
)
# Live messages the shadow never saw: applied to the old memory (or on their way to it), so
# applied again, once, to the new one.
_RESET_UNMIRRORED = text(
    """
    WITH reset AS (
        UPDATE pipeline_runs l SET status = 'received', stage = NULL, attempts = 0, throttled_retries = 0,
            sweeps = 0, error = NULL, llm_cache = '{}'::jsonb, token_usage = '{}'::jsonb, timings = '{}'::jsonb,
            result = NULL, finished_at = NULL, updated_at = now()
        WHERE l.agent_id = :agent AND NOT EXISTS (
            SELECT 1 FROM memory_events s WHERE s.agent_id = :shadow AND s.message_id = CAST(l.event_id AS text))
        RETURNING l.event_id
    ), cleared AS (
        DELETE FROM pipeline_stage_outputs o USING reset WHERE o.event_id = reset.event_id
    )
    SELECT event_id FROM reset
    """
)
_MOVE_USAGE = text(
    """
    WITH moved AS (DELETE FROM llm_usage WHERE agent_id = :shadow RETURNING *)
    INSERT INTO llm_usage AS u (agent_id, day, skill, model, calls, failures, input_tokens, output_tokens,
                                cached_input_tokens)
    SELECT :agent, day, skill, model, calls, failures, input_tokens, output_tokens, cached_input_tokens
    FROM moved ORDER BY day, skill, model
    ON CONFLICT (agent_id, day, skill, model) DO UPDATE SET
        calls = u.calls + excluded.calls,
        failures = u.failures + excluded.failures,
        input_tokens = u.input_tokens + excluded.input_tokens,
        output_tokens = u.output_tokens + excluded.output_tokens,
        cached_input_tokens = u.cached_input_tokens + excluded.cached_input_tokens,
        updated_at = now()
    """
)


@dataclass(frozen=True)
class ReprocessView:
    """A re-process and how far it got (counts of its shadow runs while it runs, final counts after)."""

    reprocess_id: uuid.UUID
    agent_id: str
    status: str
    total: int
    done: int
    failed: int
    pending: int
    requeued: int
    catch_up_rounds: int
    error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class Advance:
    """What one look at a running re-process did, and the events its caller must now enqueue."""

    outcome: Literal["waiting", "caught_up", "switched", "gone"]
    reprocess_id: uuid.UUID
    enqueue: list[str] = field(default_factory=list)
    pending: int = 0


class ReprocessRunningError(Exception):
    """The agent has a re-process running already (one at a time)."""

    def __init__(self, agent_id: str, running: uuid.UUID) -> None:
        super().__init__(f"agent {agent_id!r} is being re-processed already (re-process {running})")
        self.agent_id = agent_id
        self.running = running


def _view(session: Session, row: RowMapping) -> ReprocessView:
    reprocess_id = uuid.UUID(str(row["id"]))
    done, failed, total = int(row["done"]), int(row["failed"]), int(row["total"])
    pending = 0
    if row["status"] == "running":
        counts = {
            str(status): int(count)
            for status, count in session.execute(_RUN_COUNTS_SQL, {"shadow": shadow_agent_id(reprocess_id)}).all()
        }
        total = sum(counts.values())
        done = counts.get("done", 0)
        failed = counts.get("failed", 0)
        pending = sum(count for status, count in counts.items() if status not in TERMINAL_STATUSES)
    return ReprocessView(
        reprocess_id=reprocess_id,
        agent_id=str(row["agent_id"]),
        status=str(row["status"]),
        total=total,
        done=done,
        failed=failed,
        pending=pending,
        requeued=int(row["requeued"]),
        catch_up_rounds=int(row["catch_up_rounds"]),
        error=None if row["error"] is None else str(row["error"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        finished_at=row["finished_at"],
    )


def _mirror(session: Session, agent_id: str, shadow: str) -> list[str]:
    return [str(event_id) for event_id in session.execute(_MIRROR_SQL, {"agent": agent_id, "shadow": shadow}).scalars()]


def start_reprocess(session: Session, agent_id: str) -> tuple[ReprocessView, list[str]]:
    """Record a re-process of ``agent_id`` and copy its events to the shadow (in the caller's transaction).

    Returns the re-process and the shadow events to enqueue once the transaction commits.
    Raises :class:`ReprocessRunningError` when one is running already.
    """
    created = session.execute(
        text(
            "INSERT INTO agent_reprocesses (agent_id) VALUES (:agent) "
            "ON CONFLICT (agent_id) WHERE status = 'running' DO NOTHING RETURNING id"
        ),
        {"agent": agent_id},
    ).scalar()
    if created is None:
        running = session.execute(
            text("SELECT id FROM agent_reprocesses WHERE agent_id = :agent AND status = 'running'"),
            {"agent": agent_id},
        ).scalar_one()
        raise ReprocessRunningError(agent_id, running)
    reprocess_id = uuid.UUID(str(created))
    # The shadow derives under the agent's own config (a copy taken now; erased with the shadow).
    session.execute(
        text(
            "INSERT INTO agent_configs (agent_id, overrides, updated_at) "
            "SELECT :shadow, overrides, now() FROM agent_configs WHERE agent_id = :agent"
        ),
        {"shadow": shadow_agent_id(reprocess_id), "agent": agent_id},
    )
    queued = _mirror(session, agent_id, shadow_agent_id(reprocess_id))
    session.execute(
        text("UPDATE agent_reprocesses SET total = :total WHERE id = :id"), {"total": len(queued), "id": reprocess_id}
    )
    view = get_reprocess(session, agent_id, reprocess_id)
    assert view is not None
    return view, queued


def get_reprocess(session: Session, agent_id: str, reprocess_id: uuid.UUID) -> ReprocessView | None:
    """One re-process of ``agent_id`` (None when it has no such re-process)."""
    row = (
        session.execute(
            text(f"SELECT {_VIEW_COLUMNS} FROM agent_reprocesses WHERE id = :id AND agent_id = :agent"),  # noqa: S608
            {"id": reprocess_id, "agent": agent_id},
        )
        .mappings()
        .first()
    )
    return None if row is None else _view(session, row)


def latest_reprocess(session: Session, agent_id: str) -> ReprocessView | None:
    """The agent's most recent re-process (None when it never had one)."""
    row = (
        session.execute(
            text(
                f"SELECT {_VIEW_COLUMNS} FROM agent_reprocesses WHERE agent_id = :agent "  # noqa: S608
                "ORDER BY created_at DESC, id DESC LIMIT 1"
            ),
            {"agent": agent_id},
        )
        .mappings()
        .first()
    )
    return None if row is None else _view(session, row)


def cancel_reprocess(engine: Engine, agent_id: str) -> ReprocessView | None:
    """Cancel the agent's running re-process and erase its shadow; None when none was running.

    The live memory is untouched. The LLM calls the shadow already made stay counted for the agent.
    """
    sessions = sessionmaker(bind=engine, expire_on_commit=False)
    with sessions.begin() as session:
        # The row lock orders this after a switch in progress: that one wins, and this finds nothing.
        cancelled = session.execute(
            text(
                "UPDATE agent_reprocesses SET status = 'cancelled', finished_at = now(), updated_at = now() "
                "WHERE agent_id = :agent AND status = 'running' RETURNING id"
            ),
            {"agent": agent_id},
        ).scalar()
        if cancelled is None:
            return None
        reprocess_id = uuid.UUID(str(cancelled))
        shadow = shadow_agent_id(reprocess_id)
        counts = {str(s): int(c) for s, c in session.execute(_RUN_COUNTS_SQL, {"shadow": shadow}).all()}
        session.execute(
            text("UPDATE agent_reprocesses SET total = :total, done = :done, failed = :failed WHERE id = :id"),
            {
                "total": sum(counts.values()),
                "done": counts.get("done", 0),
                "failed": counts.get("failed", 0),
                "id": reprocess_id,
            },
        )
        session.execute(_MOVE_USAGE, {"agent": agent_id, "shadow": shadow})
    # Shadow tasks still queued find their runs gone and end as no-ops.
    erase_agent(engine, shadow)
    with sessions() as session:
        return get_reprocess(session, agent_id, reprocess_id)


def advance_reprocess(engine: Engine, reprocess_id: uuid.UUID, *, max_catch_up_rounds: int | None = None) -> Advance:
    """Look at a re-process once: wait, copy late messages (a catch-up round), or switch.

    Safe to call any number of times, from any process: every step re-checks under the
    re-process's row lock. A re-process that is no longer running has its shadow erased.
    """
    sessions = sessionmaker(bind=engine, expire_on_commit=False)
    shadow = shadow_agent_id(reprocess_id)
    with sessions.begin() as session:
        row = session.execute(
            text("SELECT agent_id, status, catch_up_rounds FROM agent_reprocesses WHERE id = :id FOR UPDATE"),
            {"id": reprocess_id},
        ).first()
        if row is None or row.status != "running":
            gone = True
        else:
            gone = False
            agent_id = str(row.agent_id)
            pending = _pending(session, shadow)
            if pending:
                session.execute(
                    text("UPDATE agent_reprocesses SET updated_at = now() WHERE id = :id"), {"id": reprocess_id}
                )
                return Advance("waiting", reprocess_id, pending=pending)
            late = int(session.execute(_UNMIRRORED_SQL, {"agent": agent_id, "shadow": shadow}).scalar_one())
            rounds = MAX_CATCH_UP_ROUNDS if max_catch_up_rounds is None else max_catch_up_rounds
            if late and int(row.catch_up_rounds) < rounds:
                queued = _mirror(session, agent_id, shadow)
                session.execute(
                    text(
                        "UPDATE agent_reprocesses SET catch_up_rounds = catch_up_rounds + 1, updated_at = now(), "
                        "total = total + :added WHERE id = :id"
                    ),
                    {"added": len(queued), "id": reprocess_id},
                )
                return Advance("caught_up", reprocess_id, enqueue=queued, pending=len(queued))
    if gone:
        _discard_shadow(engine, shadow)
        return Advance("gone", reprocess_id)
    return _switch(engine, reprocess_id, agent_id)


def _pending(session: Session, shadow: str) -> int:
    return int(
        session.execute(
            text("SELECT count(*) FROM pipeline_runs WHERE agent_id = :shadow AND status NOT IN ('done', 'failed')"),
            {"shadow": shadow},
        ).scalar_one()
    )


def _discard_shadow(engine: Engine, shadow: str) -> None:
    with engine.connect() as connection:
        exists = connection.execute(
            text("SELECT 1 FROM memory_events WHERE agent_id = :shadow LIMIT 1"), {"shadow": shadow}
        ).first()
    if exists is not None:
        erase_agent(engine, shadow)


def _rekey(table: str, keys: Sequence[ForeignKey]) -> TextClause:
    """The statement giving ``table``'s shadow rows to the agent, their event references pointed at the
    live events (one rewrite of each row: the facts are wide)."""
    sets = ["agent_id = :agent"]
    for key in keys:
        if key.child == table and key.parent == "memory_events" and key.parent_columns == ("id",):
            column = key.child_columns[0]
            sets.append(
                f'"{column}" = COALESCE((SELECT CAST(s.message_id AS uuid) FROM memory_events s '  # noqa: S608
                f'WHERE s.id = t."{column}" AND s.agent_id = :shadow), t."{column}")'
            )
    # Names from DERIVED_TABLES and the catalog; the agents are bound.
    return text(f'UPDATE "{table}" t SET {", ".join(sets)} WHERE t.agent_id = :shadow')  # noqa: S608


def _switch(engine: Engine, reprocess_id: uuid.UUID, agent_id: str) -> Advance:
    """Replace the live memory with the shadow's in one transaction (see the module docstring)."""
    sessions = sessionmaker(bind=engine, expire_on_commit=False)
    shadow = shadow_agent_id(reprocess_id)
    params = {"agent": agent_id, "shadow": shadow}
    with sessions.begin() as session:
        # Before the switch, without the agent's lock (its messages are not held up by this long
        # rewrite): the events' vectors are the current embedder's, whatever memory is live.
        session.execute(_EVENTS_TAKE_EMBEDDINGS, params)
    with sessions.begin() as session:
        # The write pipeline's and erasure's lock order: the agent's run rows, then its lock. An
        # apply of the agent in flight finishes first; any later one waits for the switch.
        session.execute(_LOCK_RUNS_SQL, {"agent": agent_id})
        lock_agent(session, agent_id)
        status = session.execute(
            text("SELECT status FROM agent_reprocesses WHERE id = :id FOR UPDATE"), {"id": reprocess_id}
        ).scalar()
        if status != "running" or _pending(session, shadow):
            # Cancelled meanwhile, or a catch-up round of another look started runs: look again later.
            return Advance("waiting" if status == "running" else "gone", reprocess_id)
        lock_agent(session, shadow)
        # A maintenance job of the agent in flight would go on writing what it derived from the
        # old memory: it is stopped as erasure stops it (Beat runs every job again after the switch).
        stop_maintenance(session, agent_id)
        counts = {str(s): int(c) for s, c in session.execute(_RUN_COUNTS_SQL, {"shadow": shadow}).all()}
        keys = foreign_keys(session)
        present = set(agent_tables(session))
        derived = [table for table in DERIVED_TABLES if table in present]
        replaced = delete_agent_rows(session, agent_id, plan_erasure(derived, keys))
        for table in derived:
            session.execute(_rekey(table, keys), params)
        session.execute(_RUNS_TAKE_STATE, params)
        session.execute(_DROP_LIVE_OUTPUTS, params)
        session.execute(_MOVE_SHADOW_OUTPUTS, params)
        requeue = [str(event_id) for event_id in session.execute(_RESET_UNMIRRORED, params).scalars()]
        session.execute(_MOVE_USAGE, params)
        session.execute(
            text(
                "UPDATE agent_reprocesses SET status = 'done', total = :total, done = :done, failed = :failed, "
                "requeued = :requeued, finished_at = now(), updated_at = now() WHERE id = :id"
            ),
            {
                "total": sum(counts.values()),
                "done": counts.get("done", 0),
                "failed": counts.get("failed", 0),
                "requeued": len(requeue),
                "id": reprocess_id,
            },
        )
    # What is left of the shadow (its events and runs) is nobody's memory any more: erased after
    # the commit, so the agent's messages do not wait for it (the sweeper finishes a crash's).
    erase_agent(engine, shadow)
    document_frequency_cache.forget_agent(database_key(engine), agent_id)
    logger.info(
        "re-process %s of agent %s switched: %s shadow runs, %d live rows replaced, %d late message(s) re-driven",
        reprocess_id,
        agent_id,
        counts,
        sum(replaced.values()),
        len(requeue),
    )
    return Advance("switched", reprocess_id, enqueue=requeue)


def stalled_reprocesses(session: Session, idle_s: float) -> list[uuid.UUID]:
    """Running re-processes nobody looked at for ``idle_s`` (their watcher task was lost)."""
    return [
        uuid.UUID(str(value))
        for value in session.execute(
            text(
                "SELECT id FROM agent_reprocesses WHERE status = 'running' "
                "AND updated_at < now() - make_interval(secs => :idle) ORDER BY updated_at LIMIT 100"
            ),
            {"idle": idle_s},
        ).scalars()
    ]


def orphan_shadows(session: Session) -> list[str]:
    """Shadows of re-processes cancelled or switched in the last day that still hold rows (the erasure
    after the cancel's or the switch's commit did not happen: a crash between the two)."""
    found: list[str] = []
    for value in session.execute(
        text(
            "SELECT id FROM agent_reprocesses WHERE status IN ('cancelled', 'done') "
            "AND finished_at > now() - interval '1 day' "
            "ORDER BY finished_at DESC LIMIT 100"
        )
    ).scalars():
        shadow = shadow_agent_id(str(value))
        if session.execute(
            text("SELECT 1 FROM memory_events WHERE agent_id = :shadow LIMIT 1"), {"shadow": shadow}
        ).first():
            found.append(shadow)
    return found


def discard_shadows(engine: Engine, shadows: Sequence[str]) -> int:
    """Erase the given shadow agents (see :func:`orphan_shadows`); how many were erased."""
    for shadow in shadows:
        erase_agent(engine, shadow)
    return len(shadows)
