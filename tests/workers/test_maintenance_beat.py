"""Beat's maintenance schedule loads, and its fan-out queues one run per agent with new events.

The fan-out runs in a real worker against real PostgreSQL and Redis; no Beat process is
needed for that (Beat only sends ``maintenance.fan_out(job)`` on time), but the schedule
itself is loaded by Celery's own Beat scheduler.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from celery.beat import PersistentScheduler
from celery.schedules import crontab
from sqlalchemy import text

from beat_schedule import build_beat_schedule
from memory_core.maintenance.registry import JOB_NAMES
from memory_core.settings import Settings, SettingsError, load_settings
from tests.support.services import TestServices
from tests.support.workers import running_worker
from tests.workers.maintenance_support import JobRuns, fan_out, jobs_settings, maintenance_app, new_agent, remember
from workers.celery_app import create_celery_app


def test_beat_loads_the_schedule_with_expiring_fan_outs_and_importance_first(
    settings: Settings, tmp_path: Path
) -> None:
    app = create_celery_app(settings)
    scheduler = PersistentScheduler(app=app, schedule_filename=str(tmp_path / "celerybeat-schedule"), lazy=True)
    try:
        scheduler.setup_schedule()
        entries = scheduler.schedule
        assert {f"maintenance-{job}" for job in JOB_NAMES} | {"pipeline-sweeper"} <= set(entries)
        sweeper = entries["pipeline-sweeper"]
        assert sweeper.task == "apply.sweep_stuck_runs"
        assert sweeper.schedule.run_every == timedelta(seconds=30)
        for job in JOB_NAMES:
            entry = entries[f"maintenance-{job}"]
            assert entry.task == "maintenance.fan_out"
            assert tuple(entry.args) == (job,)
            assert entry.options["queue"] == "apply"  # never stuck behind a long job
            assert 0 < entry.options["expires"] <= 1800
            assert entry.task in app.tasks
    finally:
        scheduler.close()

    # A day of each job's crontab (UTC) as minutes after midnight.
    schedule = build_beat_schedule(settings)

    def day(job: str) -> list[int]:
        cadence: crontab = schedule[f"maintenance-{job}"]["schedule"]
        return sorted(hour * 60 + minute for hour in cadence.hour for minute in cadence.minute)

    importance = day("importance")
    assert len(importance) == 6, "importance runs every 4 hours"
    for job in ("summaries", "profiles"):
        assert len(day(job)) == 6
        # Each of their runs comes after an importance run of the same 4-hour slot.
        assert all(0 < late - early < 60 for early, late in zip(importance, day(job), strict=True))
    for job in ("clustering", "consolidation"):
        assert len(day(job)) == 4
    for job in ("memify", "communities", "emotional_trends"):
        assert len(day(job)) == 1
    # Communities compare cluster embeddings, emotional trends read consolidation's emotion tags.
    assert day("communities")[0] > day("clustering")[0]
    assert day("emotional_trends")[0] > day("consolidation")[0]


def test_cadence_overrides_apply_and_unknown_jobs_are_refused(settings: Settings) -> None:
    faster = settings.model_copy(update={"maintenance_cadences": {"importance": 600.0}})
    entry = build_beat_schedule(faster)["maintenance-importance"]
    assert entry["schedule"] == 600.0
    assert entry["options"]["expires"] == 300.0
    wrong = settings.model_copy(update={"maintenance_cadences": {"importanse": 600.0}})
    with pytest.raises(SettingsError, match=r"ARANDU_MAINTENANCE_CADENCES.*importanse"):
        build_beat_schedule(wrong)


def test_cadences_come_from_the_environment_and_bad_values_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARANDU_MAINTENANCE_CADENCES", '{"importance": 7200, "memify": 43200}')
    assert load_settings().maintenance_cadences == {"importance": 7200.0, "memify": 43200.0}
    for bad in ('{"importance": 5}', '{"importance": "often"}', "every hour"):
        monkeypatch.setenv("ARANDU_MAINTENANCE_CADENCES", bad)
        with pytest.raises(SettingsError, match="ARANDU_MAINTENANCE_CADENCES"):
            load_settings()


def test_fan_out_queues_one_run_per_agent_with_new_events_and_none_for_idle_agents(
    services: TestServices, tmp_path: Path
) -> None:
    settings = jobs_settings(services, tmp_path)
    runs = JobRuns(settings.database_url)
    first, second, late = new_agent("first"), new_agent("second"), new_agent("late")
    remember(settings, first, ["I live in Lisbon.", "My sister Julia is a doctor."])
    remember(settings, second, ["I have a dog named Rex.", "I work at Acme Labs."])
    try:
        with maintenance_app(settings) as (app, factory), running_worker(app, concurrency=2, queues=("maintenance",)):
            fan_out(app, "importance")
            for agent in (first, second):
                [run] = runs.wait_finished(agent, "importance")
                assert run["status"] == "done", run
                assert run["trigger"] == "beat"
                assert run["task_id"] == run["id"], "the Celery task id is the run id (Flower shows the same id)"
                assert run["result"]["entities_scored"] >= 2
                assert run["started_at"] >= run["created_at"]
                assert run["finished_at"] >= run["started_at"]
                assert run["duration_ms"] > 0
                assert run["error"] is None

            # Only ``first`` talks again, and ``late`` appears; ``second`` stays idle.
            remember(settings, first, ["I moved to Porto."])
            remember(settings, late, ["My cat Mia is ten years old."])
            fan_out(app, "importance")
            assert [run["status"] for run in runs.wait_finished(first, "importance", 2)] == ["done", "done"]
            assert [run["status"] for run in runs.wait_finished(late, "importance")] == ["done"]
            # The second fan-out committed every run it queued at once, so ``second`` has its answer.
            assert len(runs.of(second, "importance")) == 1

            # A third fan-out when only a newcomer talked: the newcomer's run proves it ran, and
            # nobody else got one.
            newcomer = new_agent("newcomer")
            remember(settings, newcomer, ["Bruno plays the guitar."])
            fan_out(app, "importance")
            runs.wait_finished(newcomer, "importance")
            assert [len(runs.of(agent, "importance")) for agent in (first, second, late)] == [2, 1, 1]
            # One context per worker process, built on first use and reused by every task.
            assert factory.calls == 1
    finally:
        runs.close()


def test_beat_builds_large_agents_indexes_before_their_first_search(services: TestServices, tmp_path: Path) -> None:
    settings = jobs_settings(services, tmp_path).model_copy(update={"retrieval_agent_index_min_facts": 4})
    entry = build_beat_schedule(settings)["agent-indexer"]
    assert (entry["task"], entry["options"]["queue"]) == ("maintenance.index_large_agents", "maintenance")
    assert "agent-indexer" not in build_beat_schedule(
        settings.model_copy(update={"retrieval_agent_index_min_facts": 0})
    )
    large, small = new_agent("large"), new_agent("small")
    remember(settings, large, [f"Marina lives in city number {n}." for n in range(6)] + ["Marina works at Acme."])
    remember(settings, small, ["Marina works at Vertix."])
    runs = JobRuns(settings.database_url)

    def agent_indexes() -> list[str]:
        with runs.engine.connect() as connection:
            return sorted(
                connection.execute(
                    text(
                        "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i "
                        "WHERE i.indrelid = 'memory_facts'::regclass AND i.indisvalid "
                        "AND pg_get_expr(i.indpred, i.indrelid) LIKE '(agent_id%'"
                    )
                ).scalars()
            )

    try:
        assert agent_indexes() == []
        with maintenance_app(settings) as (app, _), running_worker(app, concurrency=1, queues=("maintenance",)):
            app.signature(entry["task"]).apply_async(**entry["options"])
            # Both of the large agent's indexes (vector and keyword), none for the small one.
            runs.wait(lambda: len(agent_indexes()) == 2, "the large agent's indexes", timeout_s=120)
        assert agent_indexes() == [f"(agent_id = '{large}'::text)"] * 2
    finally:
        runs.close()
