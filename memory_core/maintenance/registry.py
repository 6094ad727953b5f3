"""The maintenance jobs by name, in the order a full cycle runs them.

Importance runs first: summaries and profiles use its scores to pick which entities to
refresh. Clustering precedes communities (communities compare cluster embeddings), and
consolidation tags event emotions that emotional trends aggregate.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from memory_core.config import MemoryConfig
from memory_core.errors import AranduError
from memory_core.maintenance.context import MaintenanceContext

JOB_NAMES: tuple[str, ...] = (
    "importance",
    "summaries",
    "profiles",
    "clustering",
    "communities",
    "consolidation",
    "memify",
    "emotional_trends",
)

JobFunction = Callable[[MaintenanceContext, str, MemoryConfig], dict[str, Any]]


class UnknownJobError(AranduError):
    """A job name that is not one of :data:`JOB_NAMES`."""

    def __init__(self, job: str) -> None:
        super().__init__(f"unknown job {job!r}; valid jobs: {', '.join(JOB_NAMES)}")
        self.job = job


def job_function(job: str) -> JobFunction:
    """The ``run`` function of ``job``'s module (:mod:`memory_core.maintenance.<job>`)."""
    if job not in JOB_NAMES:
        raise UnknownJobError(job)
    module = importlib.import_module(f"memory_core.maintenance.{job}")
    function: JobFunction = module.run
    return function


def run_job(
    context: MaintenanceContext, agent_id: str, job: str, *, config: MemoryConfig | None = None
) -> dict[str, Any]:
    """Run ``job`` for ``agent_id`` now and return its result fields.

    Without ``config`` the job runs on the agent's effective config (the service's with the
    agent's stored overrides).
    """
    return job_function(job)(context, agent_id, config or context.config_for(agent_id))
