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
    """The given processes, their descendants, and every process whose command line names a data dir."""
    found: dict[int, psutil.Process] = {}
    for pid in root_pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(pid)
            for proc in [root, *root.children(recursive=True)]:
                found[proc.pid] = proc
    needles = [str(path) for path in data_dirs]
    if needles:
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(proc.info.get("cmdline") or [])
            if any(needle in cmdline for needle in needles):
                found[proc.pid] = proc
                with contextlib.suppress(psutil.NoSuchProcess):
                    for child in proc.children(recursive=True):
                        found[child.pid] = child
    return list(found.values())


def stack_memory_bytes(root_pids: Iterable[int], data_dirs: Iterable[Path] = ()) -> int:
    """Total proportional memory (PSS, else RSS) of the stack's processes."""
    total = 0
    for proc in stack_processes(root_pids, data_dirs):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += _own_memory(proc)
    return total
