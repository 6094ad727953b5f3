"""``./ops/dev`` as a test runs it: started with its output collected, ready, and stopped with nothing left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ops.rss import stack_processes
from tests.support.processes import PROJECT_ROOT

READY_LINE = "arandu is running"


@dataclass
class OpsDev:
    """A running ``./ops/dev`` and every line it has printed so far."""

    proc: subprocess.Popen[str]
    home: Path
    output: list[str] = field(default_factory=list)

    @property
    def printed(self) -> str:
        return "".join(self.output)

    def wait_ready(self, timeout_s: float) -> None:
        """Return once the ready banner is printed; fail if the process exits or the time runs out."""
        deadline = time.monotonic() + timeout_s
        while not any(READY_LINE in line for line in self.output):
            assert self.proc.poll() is None, "ops/dev exited early:\n" + self.printed
            assert time.monotonic() < deadline, "ops/dev not ready in time:\n" + self.printed
            time.sleep(0.2)


def _read_lines(stream: object, sink: list[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        sink.append(line)


@contextlib.contextmanager
def running_ops_dev(env: Mapping[str, str], home: Path, *args: str) -> Iterator[OpsDev]:
    """Start ``./ops/dev ARGS`` with ``env``; on leaving, stop it (SIGINT, then kill) and reap its servers."""
    proc = subprocess.Popen(
        [str(PROJECT_ROOT / "ops" / "dev"), *args],
        cwd=PROJECT_ROOT,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    running = OpsDev(proc, home)
    threading.Thread(target=_read_lines, args=(proc.stdout, running.output), daemon=True).start()
    try:
        yield running
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(60)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        # Last resort so a failed run never leaks servers into the next one.
        for leftover in stack_processes([], [home / "pg", home / "redis"]):
            with contextlib.suppress(psutil.NoSuchProcess):
                os.kill(leftover.pid, signal.SIGKILL)
