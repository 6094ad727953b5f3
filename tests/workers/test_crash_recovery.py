"""A worker killed with SIGKILL mid-pipeline: after a new worker starts, every event is done, once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx

from memory_core.db.migrate import upgrade
from memory_core.settings import Settings
from tests.support.api_server import serve_api
from tests.support.processes import PROJECT_ROOT, service_env
from tests.support.services import TestServices
from tests.support.workers import isolated_app, running_worker, wait_for_runs
from tests.workers.conftest import API_KEY
from tests.workers.memory_queries import MemoryInspector

MESSAGES = [f"My colleague Person{i} Smith works at Company{i} Labs and lives in Town{i}." for i in range(120)]


def _statuses(memory: MemoryInspector, agent: str) -> Counter[str]:
    return Counter(r["status"] for r in memory.rows("SELECT status FROM pipeline_runs WHERE agent_id = :a", a=agent))


def _all_facts(memory: MemoryInspector, agent: str) -> Counter[tuple[str, str]]:
    return Counter((f["entity_key"], f["fact_text"]) for f in memory.all_facts(agent))


def test_killed_worker_loses_nothing_and_applies_nothing_twice(
    write_settings: Settings, services: TestServices, tmp_path: Path
) -> None:
    # A database of its own: the sweeper re-enqueues every stale run it finds, and other tests
    # leave runs that no worker of theirs processes.
    database_url = services.new_database("arandu_crash")
    upgrade(write_settings.model_copy(update={"database_url": database_url}))
    app = isolated_app(
        write_settings.model_copy(
            update={"database_url": database_url, "pipeline_stale_after_s": 1.0, "pipeline_max_sweeps": 10000}
        )
    )
    own: Settings = app.arandu_settings  # type: ignore[attr-defined]
    memory = MemoryInspector(own.database_url)
    env = service_env(
        database_url=own.database_url,
        broker_url=own.broker_url,
        broker_key_prefix=own.broker_key_prefix,
        home=tmp_path / "worker-home",
        embedding_dimensions=384,
        ingest_concurrency=2,
        apply_concurrency=2,
    )
    crashed, control = "crash-agent", "control-agent"
    with serve_api(own) as base_url:
        client = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)
        workers = [
            subprocess.Popen(
                [sys.executable, "-m", "workers", "worker", "--queue", queue],
                cwd=PROJECT_ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            for queue in ("ingest", "apply")
        ]
        try:
            batch = [{"message": m, "speaker_name": "Rafael"} for m in MESSAGES]
            response = client.post(f"/v1/agents/{crashed}/messages/batch", json={"messages": batch})
            assert response.status_code == 202, response.text
            crashed_ids = response.json()["event_ids"]
            deadline = time.monotonic() + 60
            while _statuses(memory, crashed)["done"] < 5:
                assert time.monotonic() < deadline, "workers never started processing"
                time.sleep(0.05)
        finally:
            for worker in workers:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
        at_kill = _statuses(memory, crashed)
        assert at_kill["done"] < len(MESSAGES), "the crash came too late to test anything"

        with running_worker(app):
            response = client.post(f"/v1/agents/{control}/messages/batch", json={"messages": batch})
            control_ids = response.json()["event_ids"]
            # What Beat does every 30 s: re-enqueue runs that stopped moving.
            deadline = time.monotonic() + 180
            while _statuses(memory, crashed)["done"] < len(MESSAGES):
                assert time.monotonic() < deadline, f"stuck: {_statuses(memory, crashed)}"
                app.send_task("apply.sweep_stuck_runs", queue="apply")
                time.sleep(1.5)
            wait_for_runs(own.database_url, control_ids, timeout_s=180)
        client.close()

    assert _statuses(memory, crashed) == Counter({"done": len(MESSAGES)})
    assert wait_for_runs(own.database_url, crashed_ids, timeout_s=5) == dict.fromkeys(crashed_ids, "done")
    crashed_facts = _all_facts(memory, crashed)
    assert crashed_facts == _all_facts(memory, control)
    assert max(crashed_facts.values()) == 1
    memory.close()
