"""Requests whose cost grows with their input take turns, so that one client cannot starve the others.

Why
---
The API serves every request of a process from one interpreter on a few cores. A retrieve whose
query was 256 KiB of short words took 14.9 s of CPU, six at once 36-48 s each, and a normal
retrieve sent meanwhile 33 s instead of 0.21 s (issue 46). Queries now have a cap of their own
(``ARANDU_MAX_QUERY_BYTES``) and the work on a query's words is bounded by their number, but a
long query still costs several normal ones, and a client may send many.

How
---
A request is *heavy* when its text is longer than :data:`HEAVY_INPUT_BYTES` (a retrieve's query,
a dry run's message): normal questions are a few hundred bytes. Heavy requests of one process
run at most ``ARANDU_HEAVY_REQUEST_CONCURRENCY`` at a time (default 1); the others wait in their
own thread, which costs no CPU, so normal requests never queue behind them. At most
:data:`MAX_WAITING_PER_SLOT` of them wait per slot: past that the request is refused at once
with 503 and ``Retry-After`` instead of holding a thread of the pool (the pool serves every
request of the process). Per-key limits are another matter (scoped keys).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from api.errors import ApiError

__all__ = ["HEAVY_INPUT_BYTES", "MAX_WAITING_PER_SLOT", "HeavyWork", "is_heavy"]

HEAVY_INPUT_BYTES = 1024
MAX_WAITING_PER_SLOT = 4
# A heavy request waits this long for its turn at most, then is refused like an overflow.
WAIT_LIMIT_S = 30.0


def is_heavy(text: str) -> bool:
    """Whether ``text`` (a query, a dry run's message) makes its request heavy (UTF-8 bytes)."""
    return len(text) > HEAVY_INPUT_BYTES // 4 and len(text.encode("utf-8")) > HEAVY_INPUT_BYTES


class HeavyWork:
    """At most ``limit`` heavy requests of this process at once; a bounded number wait for a turn."""

    def __init__(self, limit: int, max_waiting: int | None = None) -> None:
        if limit < 1:
            raise ValueError(f"heavy work needs a limit of at least 1, not {limit}")
        self.limit = limit
        self.max_waiting = MAX_WAITING_PER_SLOT * limit if max_waiting is None else max_waiting
        self._slots = threading.BoundedSemaphore(limit)
        self._lock = threading.Lock()
        self._waiting = 0

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Hold a heavy slot for the block; 503 when too many wait already or the wait is too long."""
        with self._lock:
            if self._waiting >= self.max_waiting:
                raise _busy()
            self._waiting += 1
        try:
            taken = self._slots.acquire(timeout=WAIT_LIMIT_S)
        finally:
            with self._lock:
                self._waiting -= 1
        if not taken:
            raise _busy()
        try:
            yield
        finally:
            self._slots.release()


def _busy() -> ApiError:
    return ApiError(
        503,
        f"too many long requests (over {HEAVY_INPUT_BYTES} bytes of text) are being served; try again shortly",
        headers={"Retry-After": "1"},
    )
