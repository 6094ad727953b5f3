"""``./ops/dev --no-demo``: the whole stack comes up, answers, and stops cleanly on SIGINT."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import httpx
import psutil

from ops.rss import stack_processes
from tests.support.ops_dev import running_ops_dev
from tests.support.processes import PROJECT_ROOT, service_env
from tests.support.services import free_port


def test_ops_dev_starts_everything_serves_probes_and_stops_on_sigint(tmp_path: Path) -> None:
    home = tmp_path / "home"
    api_port, flower_port = free_port(), free_port()
    env = service_env(home=home, api_port=api_port, flower_port=flower_port)
    with running_ops_dev(env, home, "--no-demo") as dev:
        proc = dev.proc
        dev.wait_ready(120)
        banner = dev.printed
        api_key = (home / "dev-api-key").read_text().strip()
        flower_password = (home / "dev-flower-password").read_text().strip()
        assert api_key in banner
        assert f"http://127.0.0.1:{api_port}" in banner

        ready = httpx.get(f"http://127.0.0.1:{api_port}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        flower = f"http://127.0.0.1:{flower_port}"
        assert httpx.get(f"{flower}/api/workers", timeout=10).status_code == 401
        workers = httpx.get(f"{flower}/api/workers", auth=("admin", flower_password), timeout=10)
        assert workers.status_code == 200

        started = stack_processes([proc.pid], [home / "pg", home / "redis"])
        names = " ".join(" ".join(p.cmdline()) for p in started if p.is_running())
        for expected in ("-m api", "--queue ingest", "--queue apply", "--queue maintenance", "beat", "flower"):
            assert expected in names
        assert "postgres" in names
        assert "redis-server" in names

        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, dev.printed
        _, alive = psutil.wait_procs([p for p in started if p.pid != proc.pid], timeout=10)
        assert not alive, f"left behind: {[' '.join(p.cmdline()) for p in alive]}"
        assert "stopped." in dev.printed


def test_ops_dev_on_a_postgresql_16_home_says_what_to_do_and_starts_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "pg").mkdir(parents=True)
    (home / "pg" / "PG_VERSION").write_text("16\n")
    env = service_env(home=home, api_port=free_port(), flower_port=free_port())
    result = subprocess.run(
        [str(PROJECT_ROOT / "ops" / "dev"), "--no-demo"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    said = result.stdout + result.stderr
    assert "PostgreSQL 16" in said
    assert "pg_dump" in said
    assert "Traceback" not in said
    assert (home / "pg" / "PG_VERSION").read_text() == "16\n"
    assert not stack_processes([], [home / "pg", home / "redis"])
