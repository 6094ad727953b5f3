"""How many retrievals of one process read the database at once: as many as the cores; the others wait.

Why
---
A retrieve's database work is CPU work (its reads hit the cache), so running many more of them
at once than the cores can run adds nothing but switching: PostgreSQL backends and Python
threads take turns on the same cores, and every turn costs caches, locks and wake-ups. Before
this, a process read for every request its thread pool (40 threads) held.

Measured on the benchmark's 2 cores and 2 API processes, alternated runs (2026-12-05):

* 16 concurrent clients, 2 reads at a time per process against 40: 1,000 facts 155-167 ->
  170-194 retrieves/s, 100,000 facts 78-82 -> 78-90/s (CPU per retrieve 11.7-12.5 -> 10.2-11.5
  ms and 23.9-25.0 -> 22.0-25.3 ms; ops/bench/RESULTS.md has the rounds).
* One read at a time per process did better under that load (1,000 facts 181-195/s, 100,000
  89-91/s: PostgreSQL's CPU per retrieve 13.5 ms instead of 17, what one retrieve alone costs
  it), but the API processes share their port and the kernel gives each connection to one of
  them at random: two busy clients on the same process then took turns while the other process
  idled (92-95 against 117-124/s), and a deployment running one API process would read one at
  a time whatever its cores.
* One set of slots for the whole host (lock files shared by the processes) was worse than
  either (122-135/s at 1,000 facts): one process could hold every slot while its single
  interpreter was the bottleneck and the other process's requests waited.

So the default is the CPUs this process may run on, per process: never fewer reads than the
cores could run, and 16 clients no longer make 16 backends compete for 2 cores.

What waits is the read transaction only (the query's embedding, the LLM reranker and the
context's compression run outside it, so a slow provider never holds a slot), in the request's
own thread: the trace shows the wait as the ``queued`` stage. ``ARANDU_RETRIEVAL_CONCURRENCY``
sets the number; raise it where PostgreSQL runs on its own, larger machine, or reads wait on
the disk.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ReadSlots", "build_read_slots", "usable_cpus"]


def usable_cpus() -> int:
    """The CPUs this process may run on (a container's cpuset), not the host's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 2


class ReadSlots:
    """At most ``limit`` read transactions of this process at once; the others wait (about in arrival order)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"read slots need a limit of at least 1, not {limit}")
        self.limit = limit
        self._semaphore = threading.BoundedSemaphore(limit)

    @contextmanager
    def held(self) -> Iterator[float]:
        """Hold a slot for the block; yields the seconds spent waiting for it."""
        started = time.perf_counter()
        self._semaphore.acquire()
        try:
            yield time.perf_counter() - started
        finally:
            self._semaphore.release()


def build_read_slots(configured: int) -> ReadSlots:
    """This process's slots: ``configured`` when positive, else one per usable CPU."""
    return ReadSlots(configured if configured > 0 else usable_cpus())
