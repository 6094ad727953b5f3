"""The first hour of a new user, on a stack started by ``./ops/dev``: the README's walk-through runs
as written, ``arandu doctor`` and ``arandu db`` find the stack and name a stopped worker, and the
demo says which of its messages were already known."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from ops.demo import run_demo
from tests.support.ops_dev import running_ops_dev
from tests.support.processes import PROJECT_ROOT, service_env
from tests.support.services import free_port
from tests.support.walkthrough import Shell, parse_steps

README = PROJECT_ROOT / "README.md"


@dataclass(frozen=True)
class DevStack:
    """A running ``./ops/dev`` and what a user of it knows."""

    proc: subprocess.Popen[str]
    home: Path
    api_port: int
    flower_port: int
    output: list[str]

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def user_env(self, **extra: str) -> dict[str, str]:
        """A user's shell: no ARANDU_ settings but the stack's home and ports (as exported by the user)."""
        env = {key: value for key, value in os.environ.items() if not key.startswith("ARANDU_")}
        env.pop("OPENAI_API_KEY", None)
        env.update(LANG="C.UTF-8", ARANDU_HOME=str(self.home), **extra)
        return env

    def child(self, fragment: str) -> psutil.Process:
        """The stack's process whose command line contains ``fragment``."""
        for process in psutil.Process(self.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if fragment in " ".join(process.cmdline()):
                    return process
        raise AssertionError(f"no process of the stack runs {fragment!r}")


@pytest.fixture(scope="module")
def dev_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    """``./ops/dev --no-demo`` on free ports in a fresh home (one API and one apply process, to spare the CPU)."""
    home = tmp_path_factory.mktemp("first-hour") / "home"
    api_port, flower_port = free_port(), free_port()
    env = service_env(home=home, api_port=api_port, flower_port=flower_port, api_processes=1, apply_processes=1)
    with running_ops_dev(env, home, "--no-demo") as dev:
        dev.wait_ready(150)
        yield DevStack(dev.proc, home, api_port, flower_port, dev.output)


def test_the_readme_walkthrough_runs_as_written_and_prints_what_it_shows(dev_stack: DevStack, tmp_path: Path) -> None:
    steps = parse_steps(README)
    # curl, the command line and the Python client, each step with the output the README shows.
    assert len(steps) >= 10
    assert all(step.expected is not None for step in steps)
    scripts = "\n".join(step.script for step in steps)
    for tool in ("curl -s", "arandu import", "arandu retrieve", "arandu doctor", "from arandu_client import"):
        assert tool in scripts
    # The files it reads ship with the repository.
    for path in re.findall(r"@?(examples/[\w./-]+)", README.read_text("utf-8")):
        assert (PROJECT_ROOT / path.rstrip(".")).is_file(), path
    shell = Shell(
        PROJECT_ROOT,
        dev_stack.user_env(ARANDU_API_PORT=str(dev_stack.api_port), ARANDU_FLOWER_PORT=str(dev_stack.flower_port)),
        tmp_path / "exported.sh",
    )
    for step in steps:
        shell.run_checked(step)


def test_the_demo_says_which_messages_were_already_known_on_a_second_run(
    dev_stack: DevStack, capsys: pytest.CaptureFixture[str]
) -> None:
    key = (dev_stack.home / "dev-api-key").read_text().strip()
    run_demo(dev_stack.api_url, key)
    first = capsys.readouterr().out
    assert "already known" not in first
    assert "added" in first
    run_demo(dev_stack.api_url, key)  # what a restart of ./ops/dev does
    second = capsys.readouterr().out
    assert second.count("-> 200 already known") == 4
    assert second.count("nothing new") == 4
    assert re.search(r"^\s+(added|updated|unchanged)\s", second, re.MULTILINE) is None


def _arandu(dev_stack: DevStack, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # A shell of its own, away from the checkout: only ARANDU_HOME says which stack is meant.
    return subprocess.run(
        [sys.executable, "-m", "arandu_cli.main", *args],
        cwd=cwd,
        env=dev_stack.user_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_doctor_and_db_find_the_dev_stack_and_doctor_names_a_stopped_worker(
    dev_stack: DevStack, tmp_path: Path
) -> None:
    healthy = _arandu(dev_stack, "doctor", "--json", cwd=tmp_path)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    checks = {check["name"]: check for check in json.loads(healthy.stdout)["checks"]}
    assert {check["state"] for check in checks.values()} == {"ok"}
    assert str(dev_stack.home) in checks["dev stack"]["detail"]
    assert "queue ingest" in checks["broker"]["detail"]
    assert f"127.0.0.1:{dev_stack.api_port}" in checks["api"]["detail"]
    assert f"127.0.0.1:{dev_stack.flower_port}" in checks["flower"]["detail"]

    current = _arandu(dev_stack, "db", "current", cwd=tmp_path)
    assert current.returncode == 0, current.stderr
    revision, head = re.fullmatch(r"(\S+) \(this code: (\S+)\)\n", current.stdout).groups()  # type: ignore[union-attr]
    assert revision == head
    assert _arandu(dev_stack, "db", "check", cwd=tmp_path).returncode == 0

    worker = dev_stack.child("--queue ingest")
    worker.suspend()  # stopped, not dead: ./ops/dev would stop everything if it exited
    try:
        broken = _arandu(dev_stack, "doctor", "--json", cwd=tmp_path)
        human = _arandu(dev_stack, "doctor", cwd=tmp_path)
    finally:
        worker.resume()
    assert broken.returncode == 1
    checks = {check["name"]: check for check in json.loads(broken.stdout)["checks"]}
    assert [name for name, check in checks.items() if check["state"] != "ok"] == ["worker ingest"]
    assert "worker-ingest" in checks["worker ingest"]["fix"]
    assert "./ops/dev" in checks["worker ingest"]["fix"]
    assert human.returncode == 1
    fixes = human.stdout.split("what to fix:")[1]
    assert "worker ingest:" in fixes
    assert "database" not in fixes
    assert "broker" not in fixes
