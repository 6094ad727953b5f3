"""Background work yields the CPU to requests: workers, Beat and Flower lower their own scheduling priority.

``os.nice`` alone does not do it on most Linux machines. With autogroup scheduling
(``kernel.sched_autogroup_enabled = 1``, the default of most distributions) the kernel first
shares the CPU between *sessions*, and a process's nice value only ranks it among the processes
of its own session. A worker started in a session of its own (``./ops/dev`` starts every
process so, as do ``setsid`` and most supervisors) would get as much CPU as the API whatever its
nice value: measured here, two busy processes at nice 0 and nice 10 in separate sessions
each got half. So a worker that leads its session also sets the nice value of its session's
group (``/proc/self/autogroup``); one that shares its session (started by hand from a terminal)
leaves the group alone, since that would slow down the user's shell and whatever else runs in it.

Under cgroups (docker compose, Kubernetes, a systemd unit with its own slice) autogroups do not
apply and each container or unit gets its CPU weight: give the workers a lower one there
(``cpu_shares`` in docker compose, ``CPUWeight=`` in systemd).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["AUTOGROUP_PATH", "Priority", "lower_database_backends", "lower_priority"]

logger = logging.getLogger(__name__)

AUTOGROUP_PATH = Path("/proc/self/autogroup")


@dataclass(frozen=True)
class Priority:
    """What :func:`lower_priority` changed: the process's nice value and its session group's, if it could."""

    nice: int
    autogroup_nice: int | None


def _autogroup_nice(path: Path) -> int | None:
    # The file reads "/autogroup-85 nice 0".
    try:
        fields = path.read_text().split()
    except OSError:
        return None
    if len(fields) == 3 and fields[1] == "nice":
        return int(fields[2])
    return None


def lower_priority(increment: int, *, autogroup_path: Path = AUTOGROUP_PATH) -> Priority:
    """Add ``increment`` to this process's nice value and, when it leads its session, to its session group's.

    Raising one's own niceness needs no privilege (in containers too). The session group is
    only changed when this process leads the session, so it is the only member besides its
    own children (a prefork pool's). Where autogroups do not exist (other systems, a kernel
    without them, cgroup-scheduled containers) the file is absent or its value ignored.
    """
    nice = os.nice(increment)
    group_nice: int | None = None
    if increment and os.getsid(0) == os.getpid():
        current = _autogroup_nice(autogroup_path)
        if current is not None:
            wanted = min(19, current + increment)
            try:
                autogroup_path.write_text(str(wanted))
                group_nice = _autogroup_nice(autogroup_path)
            except OSError as error:
                logger.warning("could not lower this process's session CPU priority (%s): %s", autogroup_path, error)
    return Priority(nice=nice, autogroup_nice=group_nice)


def _local_backend(pid: int) -> bool:
    # A backend of a server on this host, serving a unix-socket connection: its process title
    # reads "postgres: <user> <database> [local] ...". Anything else (a server in another
    # container or on another host, where the pid means nothing here) is left alone.
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return title.startswith("postgres:") and "[local]" in title


def lower_database_backends(increment: int) -> bool:
    """Have the PostgreSQL backends this process connects to run at its lowered priority, where possible.

    A worker's SQL runs in a backend process of the server, not in the worker: under a backlog
    on shared cores that is a third of the pipeline's CPU, competing on equal terms with the
    backends answering the API. When the server runs on this host under the same user (the
    embedded PostgreSQL of ``./ops/dev``) each new connection's backend gets the same nice
    increment as the worker; elsewhere nothing changes (a server on its own machine or in
    its own container is given its CPU by its operator). Returns whether the hook is installed.
    """
    if increment <= 0:
        return False
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    def renice_backend(dbapi_connection: Any, _record: Any) -> None:
        info = getattr(dbapi_connection, "info", None)
        host = str(getattr(info, "host", "") or "")
        if not host.startswith("/"):
            return
        backend_pid = int(getattr(info, "backend_pid", 0) or 0)
        if backend_pid <= 0 or not _local_backend(backend_pid):
            return
        try:
            current = os.getpriority(os.PRIO_PROCESS, backend_pid)
            os.setpriority(os.PRIO_PROCESS, backend_pid, min(19, current + increment))
        except OSError as error:  # another user's server, or a race with its exit: leave it
            logger.debug("could not lower the priority of backend %s: %s", backend_pid, error)

    event.listen(Pool, "connect", renice_backend)
    return True
