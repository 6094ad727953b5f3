"""The benchmarks' CPU accounting: processes that end between two snapshots count once, the benchmark apart."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ops.bench.common import BENCHMARK_ROLE, CpuSnapshot, MemorySampler, cpu_snapshot_of


def test_an_ended_backend_counts_once_through_the_postmasters_children_time() -> None:
    # pid 1 the postmaster, 2 a backend, 3 the API; 20 s of machine time over a 10 s window.
    earlier = CpuSnapshot(
        0.0, {1: ("postgres", 10.0), 2: ("postgres", 3.0), 3: ("api", 5.0)}, 100.0, parents={1: 99, 2: 1, 3: 99}
    )
    # The backend used 1 s more, then ended: its whole life (4 s) is now in the postmaster's
    # children's time; a parallel worker that lived only inside the window added 2 s there too.
    later = CpuSnapshot(10.0, {1: ("postgres", 10.0 + 4.0 + 2.0), 3: ("api", 6.0)}, 104.0, parents={1: 99, 3: 99})

    spent = later.since(earlier)

    assert spent == {"postgres": pytest.approx(3.0), "api": pytest.approx(1.0)}
    # Nothing left for "other processes on the machine": the 4 busy seconds were all ours.
    assert later.foreign_share(earlier) == pytest.approx(0.0)


def test_a_replaced_pool_child_counts_through_its_parent_and_a_process_that_left_the_stack_does_not() -> None:
    # 4 a worker's master, 5 its pool child (reaped and replaced by 6); 3 the API, whose parent
    # is the benchmark process (not a stack process): when it ends, its time is nowhere.
    earlier = CpuSnapshot(
        0.0,
        {3: ("api", 5.0), 4: ("worker-apply", 1.0), 5: ("worker-apply", 2.0)},
        100.0,
        parents={3: 50, 4: 50, 5: 4},
    )
    later = CpuSnapshot(10.0, {4: ("worker-apply", 1.0 + 2.5), 6: ("worker-apply", 0.5)}, 104.0, parents={4: 50, 6: 4})

    assert later.since(earlier) == {"worker-apply": pytest.approx(0.5 + 0.5)}


def test_cpu_per_item_is_the_stacks_without_the_benchmark_process() -> None:
    earlier = CpuSnapshot(0.0, {1: ("postgres", 1.0), 2: ("api", 1.0), 9: (BENCHMARK_ROLE, 1.0)})
    later = CpuSnapshot(10.0, {1: ("postgres", 3.0), 2: ("api", 2.0), 9: (BENCHMARK_ROLE, 9.0)})

    assert later.stack_ms_per(earlier, 100) == pytest.approx(30.0)
    assert later.stack_cpu_cell(earlier, 100, "message") == "30.0 ms per message (postgres 20.0, api 10.0)"
    assert later.stack_cpu_cell(earlier, 0, "message") == "n/a"


def test_a_real_child_that_ends_between_snapshots_is_counted() -> None:
    # A parent that starts a child burning ~0.3 s of CPU, reaps it, then waits to be stopped.
    script = (
        "import subprocess, sys, time\n"
        "sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
        "subprocess.run([sys.executable, '-c', 'import time\\nt=time.process_time()\\n"
        "while time.process_time()-t<0.3: pass'])\n"
        "sys.stdout.write('done\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        assert parent.stdin is not None
        assert parent.stdout.readline().strip() == "ready"
        before = cpu_snapshot_of({"worker": [parent.pid]})
        started = time.process_time()
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "done"
        after = cpu_snapshot_of({"worker": [parent.pid]})
        spent = after.since(before)
        assert spent["worker"] >= 0.25
        # This process's own time is its own role, never the stack's.
        assert spent.get(BENCHMARK_ROLE, 0.0) <= time.process_time() - started + 0.05
    finally:
        if parent.stdin is not None:
            parent.stdin.close()
        parent.wait(timeout=10)


def test_the_memory_sampler_counts_its_own_cpu() -> None:
    # Where the service runs in the benchmark process, the sampler's thread is taken off its CPU.
    class BusyStack:
        def memory_bytes(self) -> int:
            started = time.thread_time()
            while time.thread_time() - started < 0.01:
                pass
            return 1

    sampler = MemorySampler(BusyStack(), interval_s=0.05).start()  # type: ignore[arg-type]
    time.sleep(0.4)
    sampler.stop()

    assert sampler.count >= 2
    assert sampler.own_cpu_s >= 0.01 * sampler.count * 0.9
