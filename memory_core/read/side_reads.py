"""Second connections for a retrieval's independent statements, so a large agent's retrieve uses both cores.

Why
---
A retrieve is a chain of statements on one connection, and for a large agent its signal
statement has two independent halves of about equal cost: the semantic search (an HNSW walk of
the agent's index) and the keyword + graph search. Run on two connections they overlap:
PostgreSQL runs each on its own backend, so a single caller waits for the longer half instead of
both, for the same total work. Under a load that already fills every core there is nothing to
gain, and :meth:`SideReads.submit` then says so (``None``) and the caller runs the work in line.
The same agent's relevant conversations are read beside its spreading activation
(memory_core.read.pipeline). What each split gained, and the ones that gained nothing:
docs/performance.md, "Concurrent retrieves".

How
---
* The side connections come from a pool of their own (``ARANDU_RETRIEVAL_SIDE_CONNECTIONS``, no
  overflow) and a side read is only started when a permit for one is free, taken without
  waiting. A request that holds its main connection therefore never waits for a second one:
  with one shared pool, as many requests as the pool has connections could each hold one and
  wait for another, and none would go on until the pool's timeout.
* Each side read runs in a read-only transaction of its own (the caller passes the same
  ``begin`` as for its main one). Reads are READ COMMITTED: every statement of a retrieve already
  sees its own snapshot, so a second connection weakens nothing.
* The threads are a small pool of this process; a side read's exceptions reach the caller through
  its future, to be degraded as any stage's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Protocol, TypeVar

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from memory_core.db.engine import create_session_factory, pooled_engine, prepared_max_of
from memory_core.read.read_slots import usable_cpus

__all__ = ["SideReads", "SideSubmit"]

T = TypeVar("T")


class SideSubmit(Protocol):
    """Start ``work`` on a side connection in a read transaction; ``None`` when none is free.

    ``ef_search`` is set for the transaction as it opens (a semantic search through an HNSW index),
    and so is ``plan_cache_mode = force_generic_plan`` with ``generic_plans``.
    """

    def __call__(
        self, work: Callable[[Session], T], *, ef_search: int | None = None, generic_plans: bool = False
    ) -> Future[T] | None: ...


def _default_max_busy() -> int:
    return max(1, usable_cpus() // 2)


class SideReads:
    """Runs read work on up to ``connections`` extra connections at once, never waiting for one.

    Only while this process serves at most ``max_busy`` reads (:meth:`serving`): with more, the
    cores have other requests' statements to run, and splitting one would only add the second
    statement's planning to the load (measured: 4% fewer retrieves/s with 16 clients).
    """

    def __init__(self, main_engine: Engine, connections: int, *, max_busy: int | None = None) -> None:
        self.connections = connections
        self.max_busy = max_busy if max_busy is not None else _default_max_busy()
        self._main_engine = main_engine
        self._permits = threading.BoundedSemaphore(max(connections, 1))
        self._busy = 0
        self._lock = threading.Lock()
        self._engine: Engine | None = None
        self._sessions: sessionmaker[Session] | None = None
        self._executor: ThreadPoolExecutor | None = None

    def _ready(self) -> tuple[sessionmaker[Session], ThreadPoolExecutor]:
        # Built on first use: most processes (and every small agent) never need a side connection.
        with self._lock:
            if self._sessions is None or self._executor is None:
                self._engine = self._side_engine()
                self._sessions = create_session_factory(self._engine)
                self._executor = ThreadPoolExecutor(max_workers=self.connections, thread_name_prefix="arandu-side-read")
            return self._sessions, self._executor

    def _side_engine(self) -> Engine:
        # The main engine's database (a test's own, too), in a pool without overflow: a permit
        # is a connection, so taking one never waits.
        return pooled_engine(
            self._main_engine.url,
            pool_size=self.connections,
            max_overflow=0,
            application_name="arandu-side-read",
            prepared_max=prepared_max_of(self._main_engine),
        )

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Count a read this process is serving (side reads are refused while too many are)."""
        with self._lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1

    def submit(self, work: Callable[[Session], T], *, begin: Callable[[Session], None]) -> Future[T] | None:
        """Start ``work(session)`` on a side connection; ``None`` when none is free (run it in line).

        ``begin(session)`` makes the transaction a read transaction (its settings); it is committed after ``work``.
        """
        if self.connections <= 0 or self._busy > self.max_busy or not self._permits.acquire(blocking=False):
            return None
        try:
            sessions, executor = self._ready()
            return executor.submit(self._run, sessions, work, begin)
        except BaseException:
            self._permits.release()
            raise

    def _run(
        self, sessions: sessionmaker[Session], work: Callable[[Session], T], begin: Callable[[Session], None]
    ) -> T:
        try:
            with sessions() as session:
                begin(session)
                result = work(session)
                # COMMIT, not the ROLLBACK closing would send: it keeps psycopg's prepared statements.
                session.commit()
                return result
        finally:
            self._permits.release()

    def close(self) -> None:
        """Wait for running side reads, then release the threads and the pool."""
        with self._lock:
            executor, engine = self._executor, self._engine
            self._executor = self._engine = self._sessions = None
        if executor is not None:
            executor.shutdown(wait=True)
        if engine is not None:
            engine.dispose()
