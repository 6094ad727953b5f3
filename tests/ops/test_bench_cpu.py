"""The benchmarks' CPU accounting: ended PostgreSQL backends count as PostgreSQL's, once."""

from __future__ import annotations

import pytest

from ops.bench.common import CpuSnapshot


def test_an_ended_backend_counts_once_through_the_postmasters_children_time() -> None:
    # pid 1 the postmaster, 2 a backend, 3 the API; 20 s of machine time over a 10 s window.
    earlier = CpuSnapshot(0.0, {1: ("postgres", 10.0), 2: ("postgres", 3.0), 3: ("api", 5.0)}, 100.0)
    # The backend used 1 s more, then ended: its whole life (4 s) is now in the postmaster's
    # children's time; a parallel worker that lived only inside the window added 2 s there too.
    later = CpuSnapshot(10.0, {1: ("postgres", 10.0 + 4.0 + 2.0), 3: ("api", 6.0)}, 104.0)

    spent = later.since(earlier)

    assert spent == {"postgres": pytest.approx(3.0), "api": pytest.approx(1.0)}
    # Nothing left for "other processes on the machine": the 4 busy seconds were all ours.
    assert later.foreign_share(earlier) == pytest.approx(0.0)


def test_other_roles_are_counted_by_their_own_processes_only() -> None:
    earlier = CpuSnapshot(0.0, {3: ("api", 5.0), 4: ("worker-apply", 2.0)}, 100.0)
    later = CpuSnapshot(10.0, {3: ("api", 6.0)}, 104.0)

    # A worker process that ended is not subtracted: its parent's children's time is not read.
    assert later.since(earlier) == {"api": pytest.approx(1.0)}
    assert later.foreign_share(earlier) == pytest.approx(0.3)
