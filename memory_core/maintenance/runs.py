"""Maintenance-run bookkeeping: one ``maintenance_job_runs`` row per run, and the run guard.

A run goes ``queued`` -> ``running`` -> ``done`` | ``failed`` | ``skipped``. The partial unique
index ``uq_job_runs_active`` (migration 0002) admits one queued or running run per (agent, job),
so two triggers racing (Beat and the API, or two Beats by mistake) can never start overlapping
runs: the loser's insert does nothing. A guard left by a process that died (a worker killed
mid-job, a task lost with the broker) is released by :func:`release_stale_runs` once it is older
than anything a live run could be, so it never blocks the job forever.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.orm import Session

from memory_core.db.models import MaintenanceJobRun
from memory_core.shadow import SHADOW_LIKE

ACTIVE_STATUSES: tuple[str, ...] = ("queued", "running")
FINAL_STATUSES: tuple[str, ...] = ("done", "failed", "skipped")
TRIGGERS: tuple[str, ...] = ("beat", "api")


@dataclass(frozen=True)
class JobRun:
    """One row of ``maintenance_job_runs``."""

    run_id: uuid.UUID
    agent_id: str
    job: str
    status: str
    trigger: str
    task_id: str | None
    result: dict[str, Any] | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_ms: float | None


@dataclass(frozen=True)
class RunRequest:
    """What :func:`request_run` did: ``created`` a new queued run, or found ``run_id`` already active."""

    run_id: uuid.UUID
    created: bool
    status: str


_COLUMNS = (
    MaintenanceJobRun.id,
    MaintenanceJobRun.agent_id,
    MaintenanceJobRun.job,
    MaintenanceJobRun.status,
    MaintenanceJobRun.trigger,
    MaintenanceJobRun.task_id,
    MaintenanceJobRun.result,
    MaintenanceJobRun.error,
    MaintenanceJobRun.created_at,
    MaintenanceJobRun.started_at,
    MaintenanceJobRun.finished_at,
    MaintenanceJobRun.duration_ms,
)


def _run(row: Any) -> JobRun:
    return JobRun(
        run_id=row.id,
        agent_id=row.agent_id,
        job=row.job,
        status=row.status,
        trigger=row.trigger,
        task_id=row.task_id,
        result=row.result,
        error=row.error,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        duration_ms=row.duration_ms,
    )


def release_stale_runs(
    session: Session,
    *,
    running_for_s: float,
    queued_for_s: float,
    job: str | None = None,
    agent_id: str | None = None,
) -> int:
    """Close active runs no live process can still own; return how many were released.

    A run ``running`` longer than ``running_for_s`` (past its hard time limit, so its worker was
    killed) becomes ``failed``; one ``queued`` longer than ``queued_for_s`` (past its task's
    expiry, so the task was lost or dropped) becomes ``skipped``. Either way the guard is free.
    """
    result = session.execute(
        text(
            """
            UPDATE maintenance_job_runs
               SET status = CASE WHEN status = 'running' THEN 'failed' ELSE 'skipped' END,
                   error = CASE WHEN status = 'running'
                       THEN 'abandoned: still running after ' || :running_for_s || ' s, past the hard time limit '
                            '(its worker was probably killed); the run guard was released'
                       ELSE 'never started: queued for more than ' || :queued_for_s || ' s '
                            '(the task expired or was lost); the run guard was released' END,
                   finished_at = clock_timestamp(),
                   duration_ms = CASE WHEN started_at IS NULL THEN NULL
                       ELSE extract(epoch FROM clock_timestamp() - started_at) * 1000 END
             WHERE status IN ('queued', 'running')
               AND (CAST(:job AS text) IS NULL OR job = :job)
               AND (CAST(:agent_id AS text) IS NULL OR agent_id = :agent_id)
               AND ((status = 'running' AND started_at < clock_timestamp() - make_interval(secs => :running_for_s))
                 OR (status = 'queued' AND created_at < clock_timestamp() - make_interval(secs => :queued_for_s)))
            """
        ),
        {"running_for_s": running_for_s, "queued_for_s": queued_for_s, "job": job, "agent_id": agent_id},
    )
    return int(getattr(result, "rowcount", 0) or 0)


def request_run(session: Session, agent_id: str, job: str, trigger: str) -> RunRequest:
    """Queue a run of ``job`` for ``agent_id`` unless one is already queued or running.

    Release stale guards first (:func:`release_stale_runs`) so a dead run does not answer here.
    """
    for _ in range(3):
        created = session.execute(
            text(
                """
                INSERT INTO maintenance_job_runs (agent_id, job, trigger, status)
                VALUES (:agent_id, :job, :trigger, 'queued')
                ON CONFLICT (agent_id, job) WHERE status IN ('queued', 'running') DO NOTHING
                RETURNING id
                """
            ),
            {"agent_id": agent_id, "job": job, "trigger": trigger},
        ).scalar()
        if created is not None:
            return RunRequest(run_id=created, created=True, status="queued")
        active = session.execute(
            text(
                "SELECT id, status FROM maintenance_job_runs "
                "WHERE agent_id = :agent_id AND job = :job AND status IN ('queued', 'running')"
            ),
            {"agent_id": agent_id, "job": job},
        ).first()
        if active is not None:
            return RunRequest(run_id=active.id, created=False, status=active.status)
        # The active run finished between the insert and the read: try again.
    raise RuntimeError(f"could not queue {job} for {agent_id}: its run guard kept changing")


def request_runs(session: Session, agent_ids: Sequence[str], job: str, trigger: str) -> dict[str, uuid.UUID]:
    """Queue a run of ``job`` for each agent that has none active; agent id -> new run id."""
    if not agent_ids:
        return {}
    rows = session.execute(
        text(
            """
            INSERT INTO maintenance_job_runs (agent_id, job, trigger, status)
            SELECT agent_id, :job, :trigger, 'queued' FROM unnest(CAST(:agents AS text[])) AS agent_id
            ON CONFLICT (agent_id, job) WHERE status IN ('queued', 'running') DO NOTHING
            RETURNING agent_id, id
            """
        ),
        {"agents": list(agent_ids), "job": job, "trigger": trigger},
    ).all()
    return {row.agent_id: row.id for row in rows}


def claim_run(session: Session, run_id: uuid.UUID, task_id: str) -> JobRun | None:
    """Mark a queued run ``running``; None when it is not queued (already taken, finished or released)."""
    row = session.execute(
        update(MaintenanceJobRun)
        .where(MaintenanceJobRun.id == run_id, MaintenanceJobRun.status == "queued")
        .values(status="running", started_at=func.clock_timestamp(), task_id=task_id)
        .returning(*_COLUMNS)
    ).first()
    return None if row is None else _run(row)


def finish_run(
    session: Session,
    run_id: uuid.UUID,
    status: str,
    *,
    result: dict[str, Any] | None = None,
    error: str | None = None,
) -> bool:
    """Close a running run as ``done``, ``failed`` or ``skipped`` with its duration; False if not running."""
    if status not in FINAL_STATUSES:
        raise ValueError(f"a run finishes as one of {FINAL_STATUSES}, not {status!r}")
    updated = session.execute(
        text(
            """
            UPDATE maintenance_job_runs
               SET status = :status, result = CAST(:result AS jsonb), error = :error,
                   finished_at = clock_timestamp(),
                   duration_ms = extract(epoch FROM clock_timestamp() - started_at) * 1000
             WHERE id = :run_id AND status = 'running'
            RETURNING id
            """
        ),
        {"run_id": run_id, "status": status, "result": _json(result), "error": error},
    ).first()
    return updated is not None


def skip_queued_run(session: Session, run_id: uuid.UUID, reason: str) -> bool:
    """Close a run that never started (its task expired, or could not be sent) as ``skipped``."""
    updated = session.execute(
        text(
            """
            UPDATE maintenance_job_runs
               SET status = 'skipped', error = :reason, finished_at = clock_timestamp()
             WHERE id = :run_id AND status = 'queued'
            RETURNING id
            """
        ),
        {"run_id": run_id, "reason": reason},
    ).first()
    return updated is not None


def agents_with_new_events(session: Session, job: str) -> list[str]:
    """Agents that received events since their last successful run of ``job`` (or never ran it).

    An agent whose memory a re-process replaced since counts too; a re-process's hidden shadow
    agent never does (:mod:`memory_core.shadow`).

    "Since" is measured from when that run was queued, so events arriving while it ran count
    for the next one. One pass over ``memory_events`` (a hash aggregate by agent); Beat calls
    this once per job per cadence, hours apart.
    """
    rows = session.execute(
        text(
            """
            WITH last_done AS (
                SELECT agent_id, max(created_at) AS last_run
                  FROM maintenance_job_runs
                 WHERE job = :job AND status = 'done'
                 GROUP BY agent_id
            ), latest_event AS (
                SELECT agent_id, max(last_event) AS last_event FROM (
                    SELECT agent_id, max(created_at) AS last_event
                      FROM memory_events
                     WHERE agent_id NOT LIKE :shadows
                     GROUP BY agent_id
                    UNION ALL
                    -- A re-process replaced the agent's memory: every job has new work.
                    SELECT agent_id, max(finished_at)
                      FROM agent_reprocesses
                     WHERE status = 'done'
                     GROUP BY agent_id
                ) changes
                GROUP BY agent_id
            )
            SELECT e.agent_id
              FROM latest_event e
              LEFT JOIN last_done d ON d.agent_id = e.agent_id
             WHERE d.last_run IS NULL OR e.last_event > d.last_run
             ORDER BY e.agent_id
            """
        ),
        {"job": job, "shadows": SHADOW_LIKE},
    ).scalars()
    return list(rows)


def get_run(session: Session, run_id: uuid.UUID) -> JobRun | None:
    """One run by id."""
    row = session.execute(select(*_COLUMNS).where(MaintenanceJobRun.id == run_id)).first()
    return None if row is None else _run(row)


def list_runs(session: Session, agent_id: str, *, limit: int, job: str | None = None) -> list[JobRun]:
    """The agent's most recent runs, newest first (of one job when ``job`` is given)."""
    statement = select(*_COLUMNS).where(MaintenanceJobRun.agent_id == agent_id)
    if job is not None:
        statement = statement.where(MaintenanceJobRun.job == job)
    statement = statement.order_by(MaintenanceJobRun.created_at.desc(), MaintenanceJobRun.id.desc()).limit(limit)
    rows = session.execute(statement).all()
    return [_run(row) for row in rows]


def _json(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, default=str)
