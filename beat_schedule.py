"""The one table of periodic jobs run by Celery Beat: name -> task, cadence, queue, expiry.

Entries are added by the write pipeline (the sweeper) and by the maintenance jobs;
``workers.celery_app`` loads :func:`build_beat_schedule` into ``beat_schedule``.

Maintenance cadence follows the seeds (times in UTC). Importance runs first, because summaries
and profiles choose their entities by importance: it runs on the hour every 4 hours, and they
20 minutes later. Clustering and consolidation run every 6 hours at :40; communities (which
compare cluster embeddings) and emotional trends (which aggregate the emotions consolidation
tags) run daily after them, and memify daily at 03:00. Each entry sends
``maintenance.fan_out(job)``, which queues one run per agent with new events since that job's
last successful run for it (none for idle agents). ``ARANDU_MAINTENANCE_CADENCES`` (JSON,
seconds) replaces a job's time of day with a plain interval. Every 15 minutes the agent indexer
builds the own vector and keyword indexes of agents that grew past
``ARANDU_RETRIEVAL_AGENT_INDEX_MIN_FACTS`` (none when it is 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from celery.schedules import crontab

from memory_core.maintenance.registry import JOB_NAMES
from memory_core.settings import Settings, SettingsError

HOUR = 3600.0


@dataclass(frozen=True)
class Cadence:
    """When a maintenance job's fan-out runs: a crontab (UTC) and the period it implies, in seconds."""

    schedule: crontab
    period_s: float


MAINTENANCE_CADENCE: dict[str, Cadence] = {
    "importance": Cadence(crontab(minute="0", hour="*/4"), 4 * HOUR),
    "summaries": Cadence(crontab(minute="20", hour="*/4"), 4 * HOUR),
    "profiles": Cadence(crontab(minute="20", hour="*/4"), 4 * HOUR),
    "clustering": Cadence(crontab(minute="40", hour="*/6"), 6 * HOUR),
    "consolidation": Cadence(crontab(minute="40", hour="*/6"), 6 * HOUR),
    "communities": Cadence(crontab(minute="30", hour="2"), 24 * HOUR),
    "memify": Cadence(crontab(minute="0", hour="3"), 24 * HOUR),
    "emotional_trends": Cadence(crontab(minute="30", hour="3"), 24 * HOUR),
}
assert set(MAINTENANCE_CADENCE) == set(JOB_NAMES), "every maintenance job needs a cadence"

# A fan-out that waited this long (workers down, or busy with a long job) is dropped: the next
# one is never far off and would find the same agents.
MAX_FAN_OUT_EXPIRES_S = 1800.0

PIPELINE_SWEEPER: dict[str, Any] = {
    # Re-enqueues write-pipeline runs that stopped moving (lost enqueue, worker killed mid-task).
    "task": "apply.sweep_stuck_runs",
    "schedule": 30.0,
    "options": {"queue": "apply", "expires": 25},
}


AGENT_INDEXER: dict[str, Any] = {
    # Builds large agents' own indexes before their first search needs them (after an import).
    "task": "maintenance.index_large_agents",
    "schedule": 900.0,
    "options": {"queue": "maintenance", "expires": 600},
}


def maintenance_entry(job: str, schedule: crontab | float, period_s: float) -> dict[str, Any]:
    """The Beat entry of ``job``: its fan-out, expiring within half a period.

    The fan-out is a quick query plus sends, so it goes to the ``apply`` pool (threads that never
    run long tasks, like the sweeper): on the ``maintenance`` pool it would wait behind a job of up
    to 15 minutes and could expire, skipping a whole cycle. The runs it queues go to ``maintenance``.
    """
    return {
        "task": "maintenance.fan_out",
        "schedule": schedule,
        "args": (job,),
        "options": {"queue": "apply", "expires": min(MAX_FAN_OUT_EXPIRES_S, period_s / 2)},
    }


def build_beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """Every periodic entry, with ``settings.maintenance_cadences`` applied."""
    unknown = sorted(set(settings.maintenance_cadences) - set(JOB_NAMES))
    if unknown:
        raise SettingsError(
            f"invalid settings: ARANDU_MAINTENANCE_CADENCES names unknown job(s) {', '.join(unknown)}; "
            f"valid jobs: {', '.join(JOB_NAMES)}"
        )
    interval = settings.pipeline_sweep_interval_s
    sweeper = {**PIPELINE_SWEEPER, "schedule": interval, "options": {"queue": "apply", "expires": interval * 5 / 6}}
    schedule: dict[str, dict[str, Any]] = {"pipeline-sweeper": sweeper}
    if settings.retrieval_agent_index_min_facts > 0:
        schedule["agent-indexer"] = AGENT_INDEXER
    for job in JOB_NAMES:
        override = settings.maintenance_cadences.get(job)
        if override is not None:
            schedule[f"maintenance-{job}"] = maintenance_entry(job, override, override)
        else:
            cadence = MAINTENANCE_CADENCE[job]
            schedule[f"maintenance-{job}"] = maintenance_entry(job, cadence.schedule, cadence.period_s)
    return schedule
