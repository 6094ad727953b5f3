"""Workers yield the CPU to the API (ARANDU_WORKER_NICE), also when each runs in a session of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.processes import PROJECT_ROOT

AUTOGROUP = Path("/proc/self/autogroup")

_REPORT = """
import json, os, sys
from pathlib import Path
from workers.priority import lower_priority
priority = lower_priority(int(sys.argv[1]))
group = Path("/proc/self/autogroup")
print(json.dumps({
    "nice": priority.nice,
    "autogroup_nice": priority.autogroup_nice,
    "group": group.read_text().strip() if group.exists() else None,
}))
"""

# Spins on one CPU until a shared deadline and prints the CPU seconds it got.
_SPIN = """
import os, sys, time
from workers.priority import lower_priority
os.sched_setaffinity(0, {int(sys.argv[1])})
lower_priority(int(sys.argv[2]))
deadline = float(sys.argv[3])
while time.time() < deadline:
    pass
times = os.times()
print(times.user + times.system)
"""


def _python(code: str, *args: object, new_session: bool) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
    )


def _report(increment: int, *, new_session: bool) -> dict[str, object]:
    process = _python(_REPORT, increment, new_session=new_session)
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    return dict(json.loads(out))


def _group_nice(text: object) -> int:
    return int(str(text).split()[-1])


def test_a_worker_leading_its_session_lowers_its_session_group_too() -> None:
    report = _report(5, new_session=True)
    assert report["nice"] == min(19, os.nice(0) + 5)
    if AUTOGROUP.exists():
        # A new session starts a group at nice 0.
        assert report["autogroup_nice"] == 5
        assert _group_nice(report["group"]) == 5
    else:  # no autogroup scheduling on this kernel: nice alone ranks the processes
        assert report["autogroup_nice"] is None


def test_a_worker_sharing_its_session_leaves_the_group_alone() -> None:
    before = AUTOGROUP.read_text() if AUTOGROUP.exists() else None
    report = _report(5, new_session=False)
    assert report["nice"] == min(19, os.nice(0) + 5)
    assert report["autogroup_nice"] is None
    # The group is this test session's (and the user's shell's): unchanged.
    assert (AUTOGROUP.read_text() if AUTOGROUP.exists() else None) == before


def test_zero_changes_nothing() -> None:
    report = _report(0, new_session=True)
    assert report["nice"] == os.nice(0)
    assert report["autogroup_nice"] is None


def test_a_lowered_worker_in_its_own_session_yields_the_cpu_to_a_busy_neighbour() -> None:
    """Two busy processes in separate sessions on one CPU: the one at nice 10 gets a small share.

    Before workers.priority, the worker's nice value ranked it only inside its own session and
    both got half of the CPU.
    """
    cpu = max(os.sched_getaffinity(0))
    deadline = time.time() + 2.5
    busy = _python(_SPIN, cpu, 0, deadline, new_session=True)
    lowered = _python(_SPIN, cpu, 10, deadline, new_session=True)
    busy_out, _ = busy.communicate(timeout=60)
    lowered_out, _ = lowered.communicate(timeout=60)
    busy_cpu, lowered_cpu = float(busy_out), float(lowered_out)
    assert busy_cpu > 0.25, (busy_cpu, lowered_cpu)
    # Weights 1024 : 110 (nice 0 : nice 10) give ~10%; half would be the bug.
    assert lowered_cpu < 0.35 * busy_cpu, (busy_cpu, lowered_cpu)


_BACKEND = """
import os, sys
from sqlalchemy import create_engine, text
from workers.priority import lower_database_backends
if sys.argv[2] == "hooked":
    lower_database_backends(5)
engine = create_engine(sys.argv[1])
with engine.connect() as connection:
    pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
    print(pid, os.getpriority(os.PRIO_PROCESS, pid))
engine.dispose()
"""


def _backend_nice(database_url: str, mode: str) -> int:
    url = database_url.replace("postgresql://", "postgresql+psycopg://", 1)
    process = _python(_BACKEND, url, mode, new_session=False)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    return int(out.split()[1])


def test_a_workers_local_database_backends_get_its_lower_priority(migrated_database_url: str) -> None:
    # The test database is the embedded PostgreSQL: this host, this user, a unix socket.
    plain = _backend_nice(migrated_database_url, "plain")
    hooked = _backend_nice(migrated_database_url, "hooked")
    assert hooked == min(19, plain + 5)
