"""Memory of the running stack, for ``ops/dev``'s banner and the benchmarks' peak figures."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

import psutil


def _own_memory(process: psutil.Process) -> int:
    # PSS splits shared pages (PostgreSQL's shared buffers, forked workers) between the
    # processes sharing them, so the sum is the stack's real footprint; RSS would count them N times.
    try:
        return int(process.memory_full_info().pss)
    except (psutil.AccessDenied, AttributeError):
        return int(process.memory_info().rss)


def stack_processes(root_pids: Iterable[int], data_dirs: Iterable[Path] = ()) -> list[psutil.Process]:
    """The given processes, their descendants, and every process whose command line names a data dir.

    One walk over the process table for everything: the benchmarks sample the stack twice a
    second, and a walk per root (``Process.children`` reads every process's parent each time)
    cost the benchmark process a tenth of a core.
    """
    needles = [str(path) for path in data_dirs]
    attrs = ["ppid", "cmdline"] if needles else ["ppid"]
    children: dict[int, list[psutil.Process]] = {}
    by_pid: dict[int, psutil.Process] = {}
    roots: list[int] = []
    for proc in psutil.process_iter(attrs):
        by_pid[proc.pid] = proc
        ppid = proc.info.get("ppid")
        if ppid is not None:
            children.setdefault(ppid, []).append(proc)
        if needles:
            cmdline = " ".join(proc.info.get("cmdline") or [])
            if any(needle in cmdline for needle in needles):
                roots.append(proc.pid)
    found: dict[int, psutil.Process] = {}
    pending = [pid for pid in [*root_pids, *roots] if pid in by_pid]
    while pending:
        pid = pending.pop()
        if pid in found:
            continue
        found[pid] = by_pid[pid]
        pending.extend(child.pid for child in children.get(pid, ()))
    return list(found.values())


def stack_memory_bytes(root_pids: Iterable[int], data_dirs: Iterable[Path] = ()) -> int:
    """Total proportional memory (PSS, else RSS) of the stack's processes."""
    total = 0
    for proc in stack_processes(root_pids, data_dirs):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += _own_memory(proc)
    return total
