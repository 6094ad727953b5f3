"""The stack's memory figure: PostgreSQL's server counted from counters, as PSS would count it and more."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import psycopg

from ops.embedded import EmbeddedStack
from ops.rss import stack_memory_bytes, stack_processes

MIB = 1024 * 1024


def _rollup(pid: int) -> dict[str, int]:
    values: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
        for line in rollup:
            name, _, rest = line.partition(":")
            if name in ("Pss", "Pss_Shmem"):
                values[name] = int(rest.split()[0]) * 1024
    return values


def _main_segment_allocated(postmaster: int) -> int:
    """Bytes allocated to the server's main shared memory segment (its buffers), mapped or not."""
    with open(f"/proc/{postmaster}/maps", encoding="ascii") as maps:
        for line in maps:
            if line.rstrip().endswith("/dev/zero (deleted)"):
                return os.stat(f"/proc/{postmaster}/map_files/{line.split()[0]}").st_blocks * 512
    raise AssertionError("no main shared memory segment")


def test_postgres_is_counted_without_reading_its_page_tables_and_with_every_allocated_buffer(tmp_path: Path) -> None:
    stack = EmbeddedStack(tmp_path)
    stack.postgres.start()
    connections: list[psycopg.Connection[tuple[object, ...]]] = []
    try:
        url = stack.postgres.ensure_database("arandu_rss_check").replace("postgresql+psycopg://", "postgresql://")
        # Backends that read the same table through the shared buffers (~60 MB), and one that
        # wrote it and is gone: what it left in the buffers is memory the server holds, though
        # no process maps it any more (so PSS misses it).
        with psycopg.connect(url, autocommit=True) as writer:
            writer.execute("CREATE TABLE filler AS SELECT g, repeat('x', 400) AS pad FROM generate_series(1, 120000) g")
        for _ in range(4):
            connection = psycopg.connect(url, autocommit=True)
            connection.execute("SELECT count(*), max(length(pad)) FROM filler").fetchone()
            connections.append(connection)
        processes = stack_processes([], [stack.postgres.data_dir])
        assert len(processes) >= 8  # postmaster, auxiliaries and the four backends
        postmaster = min(processes, key=psutil.Process.create_time).pid
        rollups = [_rollup(process.pid) for process in processes]
        by_pss = sum(values["Pss"] for values in rollups)
        # PSS with the buffers as allocated instead of as mapped by the processes alive now.
        expected = by_pss - sum(values["Pss_Shmem"] for values in rollups) + _main_segment_allocated(postmaster)

        counted = stack_memory_bytes([], [stack.postgres.data_dir])

        assert by_pss > 60 * MIB  # the buffers the readers share, counted once
        assert abs(counted - expected) <= 16 * MIB, (counted / MIB, expected / MIB, by_pss / MIB)
        assert counted < sum(process.memory_info().rss for process in processes) / 2
    finally:
        for connection in connections:
            connection.close()
        stack.postgres.stop()
