"""Flower (``python -m workers flower``) on loopback against the test broker: basic auth, and a
maintenance job triggered through the API, run by a real ``python -m workers worker --queue
maintenance`` (prefork pool, default context), visible both in Flower's ``/api/tasks`` and in
the jobs endpoint under the same id."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from memory_core.settings import Settings
from tests.support.api_server import auth_headers, serve_api
from tests.support.processes import PROJECT_ROOT, service_env
from tests.support.services import TestServices, free_port
from tests.workers.maintenance_support import jobs_settings, maintenance_app, new_agent, remember

FLOWER_USER = "ops"
FLOWER_PASSWORD = "flower-test-secret"


def _env(settings: Settings, home: Path, **extra: str | int) -> dict[str, str]:
    return service_env(
        database_url=settings.database_url,
        broker_url=settings.broker_url,
        broker_key_prefix=settings.broker_key_prefix,
        home=home,
        embedding_dimensions=384,
        log_level="WARNING",
        **extra,
    )


@contextmanager
def _process(args: list[str], env: dict[str, str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``python -m <args>``; SIGTERM (a warm shutdown for a worker) when the block ends."""
    log = log_path.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", *args], cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@contextmanager
def running_flower(settings: Settings, home: Path) -> Iterator[str]:
    """``python -m workers flower`` on a free loopback port; its base URL once /healthcheck answers."""
    port = free_port()
    env = _env(
        settings,
        home,
        flower_host="127.0.0.1",
        flower_port=port,
        flower_user=FLOWER_USER,
        flower_password=FLOWER_PASSWORD,
    )
    base_url = f"http://127.0.0.1:{port}"
    with _process(["workers", "flower"], env, home / "flower.log") as proc:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"flower exited: {(home / 'flower.log').read_text()}"
            try:
                if httpx.get(f"{base_url}/healthcheck", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "flower did not answer /healthcheck in 60 s"
            time.sleep(0.2)
        yield base_url


def _flower_task(flower: str, task_id: str, timeout_s: float = 120) -> dict[str, Any]:
    """The task as Flower's REST API lists it, once Flower has seen it succeed."""
    deadline = time.monotonic() + timeout_s
    seen: dict[str, Any] = {}
    while time.monotonic() < deadline:
        answer = httpx.get(
            f"{flower}/api/tasks",
            params={"taskname": "maintenance.importance", "limit": 100},
            auth=(FLOWER_USER, FLOWER_PASSWORD),
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        seen = answer.json()
        if task_id in seen and seen[task_id].get("state") == "SUCCESS":
            return dict(seen[task_id])
        time.sleep(0.5)
    raise AssertionError(f"Flower never showed task {task_id} as succeeded; it listed {sorted(seen)}")


def test_flower_requires_credentials_and_shows_a_job_triggered_through_the_api(
    services: TestServices, tmp_path: Path
) -> None:
    settings = jobs_settings(services, tmp_path)
    agent = new_agent("flower")
    remember(settings, agent, ["I live in Lisbon.", "My sister Julia is a doctor."])
    # The app only fixes the private queue prefix; Flower, the worker and the API are real processes
    # (the API in this one) reading it from their settings.
    with maintenance_app(settings) as (app, _):
        own: Settings = app.arandu_settings  # type: ignore[attr-defined]
        with running_flower(own, tmp_path) as flower:
            for path in ("/api/tasks", "/api/workers", "/"):
                assert httpx.get(f"{flower}{path}", timeout=10).status_code == 401, path
                wrong = httpx.get(f"{flower}{path}", auth=(FLOWER_USER, "wrong"), timeout=10)
                assert wrong.status_code == 401, path
            # Checked, not assumed: Flower 2.2 serves /metrics (Prometheus) and /healthcheck without
            # authentication, whatever --basic-auth says (README, "Flower").
            metrics = httpx.get(f"{flower}/metrics", timeout=10)
            assert metrics.status_code == 200
            assert "flower_" in metrics.text

            worker_env = _env(own, tmp_path, maintenance_concurrency=1)
            with (
                _process(["workers", "worker", "--queue", "maintenance"], worker_env, tmp_path / "worker.log"),
                serve_api(own) as api,
                httpx.Client(base_url=api, headers=auth_headers(), timeout=30) as http,
            ):
                accepted = http.post(f"/v1/agents/{agent}/jobs/importance")
                assert accepted.status_code == 202, accepted.text
                run_id = accepted.json()["job_run_id"]

                task = _flower_task(flower, run_id)
                assert task["name"] == "maintenance.importance"
                assert task["worker"].startswith("maintenance@")
                assert run_id in str(task["args"])
                assert task["runtime"] is not None
                assert task["runtime"] > 0

                [run] = http.get(f"/v1/agents/{agent}/jobs").json()["runs"]
                assert run["job_run_id"] == run_id
                assert run["task_id"] == run_id
                assert run["status"] == "done"
                assert run["trigger"] == "api"
