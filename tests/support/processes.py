"""Run the service's real processes (``python -m api`` ...) from tests, over real HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def service_env(**settings: str | int) -> dict[str, str]:
    """The current environment without ARANDU_ settings, plus the given ones as ARANDU_ variables."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ARANDU_")}
    env.pop("OPENAI_API_KEY", None)
    env.update({f"ARANDU_{key.upper()}": str(value) for key, value in settings.items()})
    return env


def run_module(module_args: list[str], env: dict[str, str], timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python -m ...`` to completion and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", *module_args],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@contextmanager
def running_api(env: dict[str, str], port: int, timeout_s: float = 30) -> Iterator[str]:
    """Start ``python -m api`` and yield its base URL once /healthz answers; stop it afterwards."""
    with running_api_process(env, port, timeout_s) as (base_url, _):
        yield base_url


@contextmanager
def running_api_process(
    env: dict[str, str], port: int, timeout_s: float = 30
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """:func:`running_api`, yielding the process too."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "api"],
        env=env,
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                output = proc.stdout.read() if proc.stdout else ""
                raise RuntimeError(f"api exited with {proc.returncode}:\n{output}")
            try:
                if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("api did not answer /healthz in time")
            time.sleep(0.1)
        yield base_url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
