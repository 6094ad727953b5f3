"""The maintenance tasks: ``maintenance.<job>`` per job, and ``maintenance.fan_out`` that Beat calls.

A run is a ``maintenance_job_runs`` row before it is a task: Beat's fan-out (or the API) inserts
it ``queued`` under the per-(agent, job) guard, then sends ``maintenance.<job>`` with the run id
as both argument and Celery task id, so Flower's task and the API's run are the same id. The
task marks the run ``running``, calls the job, and records ``done`` with the job's result or
``failed`` with its error; a failure touches nothing but its own run. Each job has a soft time
limit (the job is interrupted and its run ``failed``) and a hard one (the prefork child is
killed; the run guard is released once the run is older than the hard limit, see
:func:`memory_core.maintenance.runs.release_stale_runs`). Every send carries ``expires``: a
task that waited longer is dropped by the worker and its run recorded ``skipped``. A job runs
on a context whose every transaction holds off the erasure of its agent and stops it once the
agent was erased (:func:`memory_core.maintenance.erasure.erasure_guarded`): such a run ends
``erased`` with nothing written and nothing recorded (its run row went with the agent).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import task_revoked
from sqlalchemy.orm import Session

from memory_core.agent_config import load_agent_overrides
from memory_core.maintenance.context import MaintenanceContext
from memory_core.maintenance.erasure import erasure_guarded
from memory_core.maintenance.registry import JOB_NAMES, JobFunction, job_function
from memory_core.maintenance.runs import (
    agents_with_new_events,
    claim_run,
    finish_run,
    get_run,
    release_stale_runs,
    request_runs,
    skip_queued_run,
)
from memory_core.read.agent_index import index_large_agents
from memory_core.settings import Settings
from memory_core.usage import UsageTally, account_skills, record_usage
from workers.maintenance_context import get_maintenance_context

logger = logging.getLogger("arandu.maintenance")

FAN_OUT_TASK = "maintenance.fan_out"
INDEX_TASK = "maintenance.index_large_agents"
# A pass starts no new index build after this long (the next pass goes on); one build of a very
# large agent may run past it, up to the task's soft limit.
INDEX_BUDGET_S = 600.0
# After its hard limit a run's child is dead for sure; this much later its guard is released.
GUARD_GRACE_S = 60.0


@dataclass(frozen=True)
class TimeLimits:
    """Seconds a job may run: at ``soft`` it is interrupted (run ``failed``), at ``hard`` its process is killed."""

    soft: float
    hard: float


# Bounded by the seeds' per-run caps (20 profiles at 15 s each, 10 summaries, one LLM call per
# cluster...); all well below the broker's visibility timeout (ARANDU_BROKER_VISIBILITY_TIMEOUT_S).
TIME_LIMITS: dict[str, TimeLimits] = {
    "importance": TimeLimits(soft=300, hard=360),
    "summaries": TimeLimits(soft=600, hard=660),
    "profiles": TimeLimits(soft=600, hard=660),
    "clustering": TimeLimits(soft=900, hard=960),
    "communities": TimeLimits(soft=900, hard=960),
    "consolidation": TimeLimits(soft=900, hard=960),
    "memify": TimeLimits(soft=600, hard=660),
    "emotional_trends": TimeLimits(soft=300, hard=360),
}
assert set(TIME_LIMITS) == set(JOB_NAMES), "every job needs time limits"
# An index build interrupted at the soft limit leaves an invalid index, dropped by the next build.
INDEX_LIMITS = TimeLimits(soft=1800, hard=1860)


def task_name(job: str) -> str:
    """``maintenance.<job>``."""
    return f"maintenance.{job}"


def running_stale_after_s(job: str) -> float:
    """How long a run of ``job`` may stay ``running`` before its guard counts as abandoned."""
    return TIME_LIMITS[job].hard + GUARD_GRACE_S


def queued_stale_after_s(settings: Settings) -> float:
    """How long a run may stay ``queued`` before its guard counts as lost (its task has expired by then)."""
    return settings.maintenance_task_expires_s + GUARD_GRACE_S


def release_stale_guards(session: Session, settings: Settings, job: str, agent_id: str | None = None) -> int:
    """Release ``job``'s guards left by killed workers or lost tasks (for one agent, or all)."""
    return release_stale_runs(
        session,
        job=job,
        agent_id=agent_id,
        running_for_s=running_stale_after_s(job),
        queued_for_s=queued_stale_after_s(settings),
    )


def send_job_run(app: Celery, job: str, run_id: uuid.UUID, expires_s: float) -> None:
    """Publish ``maintenance.<job>`` for a committed queued run; its task id is the run id."""
    app.signature(task_name(job), args=(str(run_id),), immutable=True).apply_async(
        task_id=str(run_id), expires=expires_s
    )


def job_overrides(app: Celery) -> dict[str, JobFunction]:
    """The job functions that replace the registry's on ``app`` (empty unless someone plugged one in).

    Tests plug in a job that raises this way, to check that a failure stays in its own run.
    """
    overrides: dict[str, JobFunction] | None = getattr(app, "arandu_job_overrides", None)
    if overrides is None:
        overrides = {}
        setattr(app, "arandu_job_overrides", overrides)  # noqa: B010 - an attribute Celery does not declare
    return overrides


def _job(app: Celery, job: str) -> JobFunction:
    return job_overrides(app).get(job) or job_function(job)


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:4000]


def _run(task: Task, job: str, run_id: str) -> str:
    context = get_maintenance_context(task.app)
    run_uuid = uuid.UUID(run_id)
    with context.sessions.begin() as session:
        run = claim_run(session, run_uuid, str(task.request.id or run_id))
        # The agent's stored config, read in the claim's transaction (one primary-key lookup).
        stored_config = load_agent_overrides(session, run.agent_id) if run is not None else None
    if run is None:
        # Not queued any more: a second delivery of a run already taken, or a run whose guard
        # was released as stale. Running it now could overlap another run of the same job.
        logger.info("%s run %s is not queued any more; nothing to do", job, run_id)
        return "skipped"
    # Every transaction of the job holds off the agent's erasure, and finds out about one.
    guarded = erasure_guarded(context, run_uuid, run.agent_id)
    # The job's LLM calls, counted in memory and written with the run's end (one statement).
    usage = UsageTally()
    guarded = dataclasses.replace(guarded, skills=account_skills(guarded.skills, run.agent_id, usage))
    try:
        config = context.configs.for_agent(stored_config)
        result = dict(_job(task.app, job)(guarded, run.agent_id, config))
    except SoftTimeLimitExceeded as error:
        message = f"soft time limit of {TIME_LIMITS[job].soft:g} s exceeded"
        with context.sessions.begin() as session:
            _finish_with_usage(session, run_uuid, "failed", usage, error=message)
        logger.error("%s for agent %s: %s", job, run.agent_id, message)
        raise SoftTimeLimitExceeded(message) from error
    except Exception as error:
        if _erased(context, run_uuid):
            # The agent was erased mid-run (its run row with it): nothing to record, nothing failed.
            logger.info("%s for agent %s stopped: the agent was erased (%s)", job, run.agent_id, error)
            return "erased"
        with context.sessions.begin() as session:
            _finish_with_usage(session, run_uuid, "failed", usage, error=_error_text(error))
        logger.exception("%s for agent %s failed", job, run.agent_id)
        # Re-raised so Flower shows the task as FAILURE with its exception; the run row has it too.
        raise
    with context.sessions.begin() as session:
        finished = _finish_with_usage(session, run_uuid, "done", usage, result=result)
    if not finished and _erased(context, run_uuid):
        logger.info("%s for agent %s ended after the agent was erased", job, run.agent_id)
        return "erased"
    return "done"


def _finish_with_usage(
    session: Session,
    run_id: uuid.UUID,
    status: str,
    usage: UsageTally,
    *,
    result: dict[str, Any] | None = None,
    error: str | None = None,
) -> bool:
    """Record the run's end and, when its row is still there, the LLM usage of the job, in ``session``'s transaction.

    A run whose row is gone belongs to an erased agent: its usage must not bring the agent's id back.
    """
    finished = finish_run(session, run_id, status, result=result, error=error)
    if finished:
        record_usage(session, usage.drain())
    return finished


def _erased(context: MaintenanceContext, run_id: uuid.UUID) -> bool:
    """Whether the run's row is gone: only an erasure of its agent deletes it."""
    with context.sessions() as session:
        return get_run(session, run_id) is None


def _fan_out(task: Task, job: str) -> int:
    context = get_maintenance_context(task.app)
    settings = context.settings
    # One transaction: the guard rows exist before any task is sent, so a run finishing at
    # once cannot race its own row.
    with context.sessions.begin() as session:
        released = release_stale_guards(session, settings, job)
        agents = agents_with_new_events(session, job)
        created = request_runs(session, agents, job, "beat")
    for run_id in created.values():
        send_job_run(task.app, job, run_id, settings.maintenance_task_expires_s)
    busy = len(agents) - len(created)
    logger.info(
        "%s: %d agent(s) with new events, %d run(s) queued, %d still running, %d stale guard(s) released",
        job,
        len(agents),
        len(created),
        busy,
        released,
    )
    return len(created)


def _define_job_task(app: Celery, job: str) -> None:
    limits = TIME_LIMITS[job]

    def run(self: Task, run_id: str) -> str:
        return _run(self, job, run_id)

    run.__name__ = f"maintenance_{job}"
    run.__doc__ = f"Run the {job} job for the agent of a queued maintenance run."
    app.task(
        name=task_name(job),
        bind=True,
        shared=False,
        max_retries=0,
        soft_time_limit=limits.soft,
        time_limit=limits.hard,
    )(run)


def register_maintenance_tasks(app: Celery) -> None:
    """Define ``maintenance.<job>`` for every job, ``maintenance.fan_out`` and the agent indexer on ``app``."""
    for job in JOB_NAMES:
        _define_job_task(app, job)

    @app.task(name=FAN_OUT_TASK, bind=True, shared=False, max_retries=0, soft_time_limit=120, time_limit=180)
    def fan_out(self: Task, job: str) -> int:
        """Queue one run of ``job`` per agent with new events since its last successful run."""
        if job not in JOB_NAMES:
            raise ValueError(f"unknown job {job!r}; valid jobs: {', '.join(JOB_NAMES)}")
        return _fan_out(self, job)

    @app.task(
        name=INDEX_TASK,
        bind=True,
        shared=False,
        max_retries=0,
        soft_time_limit=INDEX_LIMITS.soft,
        time_limit=INDEX_LIMITS.hard,
    )
    def index_agents(self: Task) -> dict[str, Any]:
        """Build the own vector and keyword indexes of the agents past the threshold that lack them.

        Otherwise a large agent gets them only after its first search (searched exactly, slowly,
        meanwhile): after a bulk import, that first search is a user's.
        """
        context = get_maintenance_context(self.app)
        threshold = context.settings.retrieval_agent_index_min_facts
        if threshold <= 0:
            return {"min_facts": 0, "agents": [], "left": 0}
        done = index_large_agents(context.engine, threshold, budget_s=INDEX_BUDGET_S)
        for agent_id, facts, outcome in done.outcomes:
            logger.info("agent %s (%d facts): %s in %.1f s", agent_id, facts, outcome.reason, outcome.seconds)
        return {
            "min_facts": threshold,
            "agents": [
                {"agent_id": agent_id, "facts": facts, "built": outcome.created, "reason": outcome.reason}
                for agent_id, facts, outcome in done.outcomes
            ],
            "left": done.left,
        }


def _on_revoked(sender: Any = None, request: Any = None, expired: bool = False, **_: Any) -> None:
    """Record a maintenance task the worker dropped unstarted (expired, or revoked) as a ``skipped`` run."""
    name = getattr(sender, "name", "") or ""
    if not name.startswith("maintenance.") or name == FAN_OUT_TASK or sender is None:
        return
    args = getattr(request, "args", None) or ()
    if not args:
        return
    try:
        run_id = uuid.UUID(str(args[0]))
    except ValueError:
        return
    reason = "expired before a worker started it" if expired else "revoked before a worker started it"
    try:
        context = get_maintenance_context(sender.app)
        with context.sessions.begin() as session:
            skip_queued_run(session, run_id, reason)
    except Exception:
        # The guard is released later anyway (release_stale_runs): this is bookkeeping, not safety.
        logger.exception("could not record maintenance run %s as skipped", run_id)


task_revoked.connect(_on_revoked, dispatch_uid="arandu-maintenance-revoked", weak=False)
