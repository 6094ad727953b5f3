"""How many retrievals of one process read the database at once: as many as the cores; the others wait.

Why
---
A retrieve's database work is CPU work (its reads hit the cache), so running many more of them
at once than the cores can run adds nothing but switching: PostgreSQL backends and Python
threads take turns on the same cores, and every turn costs caches, locks and wake-ups. Before
this, a process read for every request its thread pool (40 threads) held.

One read at a time per process did as well under load, but the API processes share their port
and the kernel gives each connection to one of them at random, so two busy clients on one
process took turns while the other idled; one set of slots for the whole host let one process
hold them all while its interpreter was the bottleneck (docs/performance.md, "Concurrent
retrieves"). So the default is the CPUs this process may run on, per process.

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
