"""Memory of the running stack, for ``ops/dev``'s banner and the benchmarks' peak figures.

Each service process counts its PSS; the embedded PostgreSQL counts as one server
(:func:`_postgres_memory`): its processes' private memory, its shared memory as allocated, its
binary once.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

import psutil


def _own_memory(process: psutil.Process) -> int:
    # PSS splits shared pages (forked workers, shared libraries) between the processes sharing
    # them, so the sum is the stack's real footprint; RSS would count them N times.
    try:
        return int(process.memory_full_info().pss)
    except (psutil.AccessDenied, AttributeError):
        return int(process.memory_info().rss)


def _status_kib(pid: int) -> dict[str, int]:
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("RssAnon", "RssFile", "RssShmem"):
                fields[name] = int(value.split()[0])
    return fields


def _shared_segments_kib(pids: Iterable[int]) -> int | None:
    """KiB allocated to the shared memory segments these processes map, each counted once; None if unreadable.

    A segment's allocation is read from its file (``st_blocks`` through ``/proc/<pid>/map_files``):
    it includes pages no process maps any more, which PSS cannot see (a backend that touched
    buffers and exited leaves them allocated).
    """
    seen: dict[tuple[str, str], str] = {}
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps", encoding="ascii", errors="replace") as maps:
            for line in maps:
                fields = line.split()
                # address perms offset device inode [path]: shared mappings of a file or memory object.
                if len(fields) >= 6 and fields[1].endswith("s") and fields[4] != "0":
                    seen.setdefault((fields[3], fields[4]), f"/proc/{pid}/map_files/{fields[0]}")
    total = 0
    for path in seen.values():
        try:
            total += os.stat(path).st_blocks // 2
        except OSError:
            return None
    return total


def _postgres_memory(processes: Iterable[psutil.Process]) -> int:
    """The footprint of one PostgreSQL server's processes, from counters instead of page tables.

    PSS of a backend walks its page tables, and a backend that has touched the shared buffers
    maps every one of their pages: walking them cost the benchmarks' sampler a sixth of a 2-core
    machine (docs/performance.md, "The benchmarks measuring themselves"). Here: the processes' private memory (RssAnon)
    summed, the shared memory segments as allocated (each once), and the server's binary once
    (the largest file-backed resident set of any of its processes). Where the segments cannot
    be read, the largest shared resident set of any process stands for them.
    """
    members = list(processes)
    private = binary = largest_shared = 0
    for process in members:
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = _status_kib(process.pid)
            private += fields.get("RssAnon", 0)
            binary = max(binary, fields.get("RssFile", 0))
            largest_shared = max(largest_shared, fields.get("RssShmem", 0))
    segments = _shared_segments_kib(process.pid for process in members)
    return (private + binary + (largest_shared if segments is None else segments)) * 1024


def _is_postgres(process: psutil.Process) -> bool:
    try:
        return process.name() == "postgres"
    except psutil.Error:
        return False


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
    """Total memory of the stack's processes: PSS (else RSS) of each, PostgreSQL's server as a whole."""
    total = 0
    servers: list[psutil.Process] = []
    for proc in stack_processes(root_pids, data_dirs):
        if _is_postgres(proc):
            servers.append(proc)
            continue
        with contextlib.suppress(psutil.NoSuchProcess):
            total += _own_memory(proc)
    return total + (_postgres_memory(servers) if servers else 0)
