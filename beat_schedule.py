"""The one table of periodic jobs run by Celery Beat: name -> task, cadence, queue, expiry.

Entries are added by the write pipeline (the sweeper) and by the maintenance jobs;
``workers.celery_app`` loads this table into ``beat_schedule``.
"""

from __future__ import annotations

from typing import Any

BEAT_SCHEDULE: dict[str, dict[str, Any]] = {
    # Re-enqueues write-pipeline runs that stopped moving (lost enqueue, worker killed mid-task).
    "pipeline-sweeper": {
        "task": "apply.sweep_stuck_runs",
        "schedule": 30.0,
        "options": {"queue": "apply", "expires": 25},
    },
}
