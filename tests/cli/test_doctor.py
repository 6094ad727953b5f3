"""``arandu doctor`` on a real stack of its own: healthy, then naming the broker once it is stopped.

The stack runs on a Redis of this test (not the session's broker, which other tests use):
the three worker pools, Beat and Flower as real processes (``python -m workers ...``), the API
served in process, and the session's PostgreSQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
from typer.testing import CliRunner, Result

from arandu_cli.exit_codes import ExitCode
from arandu_cli.main import app as cli_app
from ops.embedded import EmbeddedRedis
from tests.support.api_server import TEST_API_KEY, api_settings, serve_api
from tests.support.processes import PROJECT_ROOT, service_env
from tests.support.services import TestServices, free_port

FLOWER_PASSWORD = "doctor-test-password"


@contextlib.contextmanager
def _process(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", *args], cwd=PROJECT_ROOT, env=env, stdout=sink, stderr=sink)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _doctor(env: dict[str, str], url: str, *extra: str) -> Result:
    return CliRunner().invoke(
        cli_app, ["--url", url, "--api-key", TEST_API_KEY, "doctor", *extra], env=env, catch_exceptions=False
    )


def _checks(result: Result) -> dict[str, dict[str, str]]:
    return {check["name"]: check for check in json.loads(result.stdout)["checks"]}


def test_doctor_passes_on_a_healthy_stack_and_names_the_broker_when_it_stops(
    migrated_database_url: str, services: TestServices, tmp_path: Path
) -> None:
    redis = EmbeddedRedis(tmp_path / "redis")
    redis.start()
    try:
        values: dict[str, str | int] = {
            "database_url": migrated_database_url,
            "broker_url": redis.url,
            "home": str(tmp_path / "home"),
            "api_keys": TEST_API_KEY,
            "embedding_dimensions": 384,
            "flower_port": free_port(),
            "flower_password": FLOWER_PASSWORD,
            "ingest_concurrency": 1,
            "apply_concurrency": 1,
            "log_level": "WARNING",
            # Beat's first task (the sweeper) after 3 s rather than 30: what the doctor waits to see.
            "pipeline_sweep_interval_s": 3,
        }
        env = service_env(**values)
        settings = api_settings(migrated_database_url, redis.url, tmp_path / "home", flower_password=FLOWER_PASSWORD)
        with contextlib.ExitStack() as stack:
            workers = [
                stack.enter_context(_process(["workers", "worker", "--queue", queue], env, tmp_path / f"{queue}.log"))
                for queue in ("ingest", "apply", "maintenance")
            ]
            beat = stack.enter_context(_process(["workers", "beat"], env, tmp_path / "beat.log"))
            flower = stack.enter_context(_process(["workers", "flower"], env, tmp_path / "flower.log"))
            background = [*workers, beat, flower]
            url = stack.enter_context(serve_api(settings))

            # Workers take a while to start on a busy machine, and Beat sends its first task after 3 s.
            deadline = time.monotonic() + 150
            while True:
                healthy = _doctor(env, url, "--json")
                checks = _checks(healthy)
                if healthy.exit_code == 0 and "published" in checks["beat"]["detail"]:
                    break
                assert time.monotonic() < deadline, healthy.stdout + "".join(
                    (tmp_path / f"{name}.log").read_text(errors="replace")[-2000:]
                    for name in ("ingest", "apply", "maintenance", "beat", "flower")
                )
                time.sleep(3)
            assert all(check["state"] == "ok" for check in checks.values()), checks
            assert set(checks) == {
                "database", "server support", "migrations", "embedding dimension", "broker",
                "worker ingest", "worker apply", "worker maintenance", "beat", "flower", "api",
            }  # fmt: skip
            assert "ingest@" in checks["worker ingest"]["detail"]
            assert re.match(r"PostgreSQL 18\.\d+, vector 0\.8\.\d+, unaccent ", checks["server support"]["detail"])
            # Background processes give the API the CPU first (ARANDU_WORKER_NICE, 10 by default).
            assert {psutil.Process(process.pid).nice() for process in background} == {min(19, os.nice(0) + 10)}
            # The last task Beat published: the sweeper (every 30 s) or, as often, a maintenance fan-out.
            assert re.match(r"published (apply\.sweep_stuck_runs|maintenance\.fan_out) ", checks["beat"]["detail"])
            assert "login accepted" in checks["flower"]["detail"]
            human = _doctor(env, url)
            assert human.exit_code == 0, human.stdout
            assert "everything answers." in human.stdout

            redis.stop()

            broken = _doctor(env, url, "--json")
            assert broken.exit_code == ExitCode.FAILED
            checks = _checks(broken)
            assert checks["broker"]["state"] == "failed"
            assert "cannot reach" in checks["broker"]["detail"]
            assert "ARANDU_BROKER_URL" in checks["broker"]["fix"]
            assert checks["database"]["state"] == "ok"
            assert checks["migrations"]["state"] == "ok"
            assert {checks[name]["state"] for name in ("worker ingest", "worker apply", "beat")} == {"skipped"}
            human = _doctor(env, url)
            assert human.exit_code == ExitCode.FAILED
            fixes = human.stdout.split("what to fix:")[1]
            assert "broker: start Redis" in fixes
            assert "database" not in fixes
    finally:
        redis.stop()


def test_doctor_names_what_the_database_server_lacks(tmp_path: Path) -> None:
    # The machine's own PostgreSQL 15 has no pgvector: a server a user might point at by mistake.
    env = service_env(database_url="postgresql+psycopg://postgres@127.0.0.1:5432/postgres", home=tmp_path)
    result = _doctor(env, f"http://127.0.0.1:{free_port()}", "--json")
    assert result.exit_code == ExitCode.FAILED
    checks = _checks(result)
    assert checks["database"]["state"] == "ok"
    assert checks["database"]["detail"].startswith("PostgreSQL 15")
    support = checks["server support"]
    assert support["state"] == "failed"
    assert "older than the 16" in support["detail"]
    assert "no pgvector extension" in support["detail"]
    assert "docs/production.md" in support["fix"]
