"""The per-(agent, job) run guard: runs never overlap, a dead run's guard does not block forever,
an expired task is recorded, and a job that raises fails only its own run."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError

from memory_core.config import MemoryConfig
from memory_core.maintenance.context import MaintenanceContext
from memory_core.maintenance.registry import job_function
from memory_core.maintenance.runs import request_run
from tests.support.services import TestServices
from tests.support.workers import running_worker
from tests.workers.maintenance_support import (
    Gate,
    JobRuns,
    fan_out,
    jobs_settings,
    maintenance_app,
    new_agent,
    remember,
)
from workers.tasks.maintenance import job_overrides, send_job_run


def test_a_second_run_of_a_running_job_is_refused_by_the_guard(services: TestServices, tmp_path: Path) -> None:
    settings = jobs_settings(services, tmp_path)
    runs = JobRuns(settings.database_url)
    busy, other = new_agent("busy"), new_agent("other")
    remember(settings, busy, ["I live in Lisbon."])
    try:
        with maintenance_app(settings) as (app, factory), running_worker(app, concurrency=3, queues=("maintenance",)):
            gate = Gate()
            job_overrides(app)["importance"] = gate
            fan_out(app, "importance")
            assert gate.entered.wait(60), "the first run never started"
            [first] = runs.of(busy, "importance")
            assert first["status"] == "running"

            # Another trigger for the same (agent, job), through the API's path: refused, same run.
            context = factory.built[0]
            with context.sessions.begin() as session:
                again = request_run(session, busy, "importance", "api")
            assert not again.created
            assert str(again.run_id) == first["id"]
            assert again.status == "running"

            # Beat's next fan-out skips the busy agent and serves the others.
            remember(settings, other, ["I work at Acme Labs."])
            remember(settings, busy, ["I moved to Porto."])
            fan_out(app, "importance")
            runs.wait(lambda: len(runs.of(other, "importance")) == 1, "a run for the other agent")
            assert len(runs.of(busy, "importance")) == 1

            # The database itself refuses a second active run, whoever tries.
            with pytest.raises(IntegrityError, match="uq_job_runs_active"):
                runs.execute(
                    "INSERT INTO maintenance_job_runs (agent_id, job, status, trigger) "
                    "VALUES (:agent, 'importance', 'queued', 'api')",
                    agent=busy,
                )

            gate.opened.set()
            [done] = runs.wait_finished(busy, "importance")
            assert done["status"] == "done"
            runs.wait_finished(other, "importance")
            # Once the run is over the job may run again.
            with context.sessions.begin() as session:
                assert request_run(session, busy, "importance", "api").created
    finally:
        runs.close()


def test_racing_triggers_queue_exactly_one_run(services: TestServices, tmp_path: Path) -> None:
    settings = jobs_settings(services, tmp_path)
    agent = new_agent("raced")
    with maintenance_app(settings) as (_, factory):
        context = factory(settings)
        barrier = threading.Barrier(8)
        created: list[bool] = []

        def trigger() -> None:
            barrier.wait()
            with context.sessions.begin() as session:
                created.append(request_run(session, agent, "importance", "beat").created)

        threads = [threading.Thread(target=trigger) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert sorted(created) == [False] * 7 + [True]


def test_a_guard_left_by_a_killed_worker_is_released_and_a_fresh_one_is_kept(
    services: TestServices, tmp_path: Path
) -> None:
    settings = jobs_settings(services, tmp_path)
    runs = JobRuns(settings.database_url)
    killed, lost, alive = new_agent("killed"), new_agent("lost"), new_agent("alive")
    for agent in (killed, lost, alive):
        remember(settings, agent, ["My sister Julia is a doctor."])
    long_ago = datetime.now(UTC) - timedelta(hours=3)
    # What a worker killed mid-job leaves (running, past the hard limit), what a task lost with the
    # broker leaves (queued, past its expiry), and a run that is genuinely still running.
    runs.execute(
        "INSERT INTO maintenance_job_runs (agent_id, job, status, trigger, created_at, started_at) "
        "VALUES (:killed, 'importance', 'running', 'beat', :at, :at), "
        "(:lost, 'importance', 'queued', 'beat', :at, NULL), "
        "(:alive, 'importance', 'running', 'beat', now(), now())",
        killed=killed,
        lost=lost,
        alive=alive,
        at=long_ago,
    )
    try:
        with maintenance_app(settings) as (app, _), running_worker(app, concurrency=2, queues=("maintenance",)):
            fan_out(app, "importance")
            stale, fresh = runs.wait_finished(killed, "importance", 2)
            assert stale["status"] == "failed"
            assert "abandoned" in stale["error"]
            assert "hard time limit" in stale["error"]
            assert fresh["status"] == "done"
            never, redo = runs.wait_finished(lost, "importance", 2)
            assert never["status"] == "skipped"
            assert "never started" in never["error"]
            assert redo["status"] == "done"
            [still] = runs.of(alive, "importance")
            assert still["status"] == "running", "a run younger than its hard limit keeps its guard"
    finally:
        runs.close()


def test_a_task_that_expired_in_the_queue_is_recorded_skipped(services: TestServices, tmp_path: Path) -> None:
    settings = jobs_settings(services, tmp_path)
    runs = JobRuns(settings.database_url)
    agent = new_agent("expired")
    try:
        with maintenance_app(settings) as (app, factory):
            context = factory(settings)
            with context.sessions.begin() as session:
                queued = request_run(session, agent, "importance", "api")
            # Sent while no worker listens, with a 1-second expiry; a worker arrives later.
            send_job_run(app, "importance", queued.run_id, 1)
            threading.Event().wait(2.5)
            with running_worker(app, concurrency=1, queues=("maintenance",)):
                [run] = runs.wait_finished(agent, "importance")
        assert run["status"] == "skipped"
        assert run["error"] == "expired before a worker started it"
        assert run["started_at"] is None
    finally:
        runs.close()


def test_a_job_that_raises_fails_only_its_own_run(services: TestServices, tmp_path: Path) -> None:
    settings = jobs_settings(services, tmp_path)
    runs = JobRuns(settings.database_url)
    healthy, broken, also_healthy = new_agent("healthy"), new_agent("broken"), new_agent("also")
    for agent in (healthy, broken, also_healthy):
        remember(settings, agent, ["I live in Lisbon.", "My dog Rex is three."])

    def importance_that_breaks_for_one_agent(
        context: MaintenanceContext, agent_id: str, config: MemoryConfig
    ) -> dict[str, Any]:
        if agent_id == broken:
            raise RuntimeError("importance exploded for this agent")
        return job_function("importance")(context, agent_id, config)

    try:
        with maintenance_app(settings) as (app, _), running_worker(app, concurrency=2, queues=("maintenance",)):
            job_overrides(app)["importance"] = importance_that_breaks_for_one_agent
            fan_out(app, "importance")
            [failed] = runs.wait_finished(broken, "importance")
            assert failed["status"] == "failed"
            assert failed["error"] == "RuntimeError: importance exploded for this agent"
            assert failed["finished_at"] is not None
            assert failed["duration_ms"] >= 0
            assert failed["result"] is None
            for agent in (healthy, also_healthy):
                [run] = runs.wait_finished(agent, "importance")
                assert run["status"] == "done"
                assert run["result"]["entities_scored"] >= 2

            # Other jobs of the same agent are unaffected (real offline skills).
            fan_out(app, "summaries")
            fan_out(app, "profiles")
            for agent in (healthy, broken, also_healthy):
                for job in ("summaries", "profiles"):
                    [run] = runs.wait_finished(agent, job)
                    assert run["status"] == "done", run
            [summaries] = runs.of(broken, "summaries")
            assert summaries["result"]["summaries_refreshed"] >= 1
            [profiles] = runs.of(broken, "profiles")
            assert profiles["result"]["profiles_updated"] >= 1

            # The failed run released its guard: the job runs again once fixed, with no new events
            # needed (only a successful run counts as "up to date").
            del job_overrides(app)["importance"]
            fan_out(app, "importance")
            first, second = runs.wait_finished(broken, "importance", 2)
            assert (first["status"], second["status"]) == ("failed", "done")
            assert [len(runs.of(agent, "importance")) for agent in (healthy, also_healthy)] == [1, 1]
    finally:
        runs.close()
