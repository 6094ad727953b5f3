"""A process's retrievals read the database a few at a time (memory_core.read.read_slots)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from memory_core.read.context import ReadContext
from memory_core.read.pipeline import retrieve
from memory_core.read.read_slots import ReadSlots, build_read_slots, usable_cpus
from tests.memory_core.read.conftest import MemoryBuilder


def test_no_more_than_the_limit_hold_a_slot_at_once() -> None:
    slots = ReadSlots(2)
    inside, most = 0, 0
    lock = threading.Lock()
    release = threading.Event()
    entered = threading.Semaphore(0)

    def reader() -> None:
        nonlocal inside, most
        with slots.held():
            with lock:
                inside += 1
                most = max(most, inside)
            entered.release()
            release.wait(5)
            with lock:
                inside -= 1

    threads = [threading.Thread(target=reader) for _ in range(5)]
    for thread in threads:
        thread.start()
    assert entered.acquire(timeout=5)
    assert entered.acquire(timeout=5)
    # Two are in; the other three wait for a slot however long the two take.
    assert not entered.acquire(timeout=0.3)
    assert most == 2
    release.set()
    for thread in threads:
        thread.join(5)
    assert (most, inside) == (2, 0)


def test_the_default_is_one_slot_per_usable_cpu_and_a_setting_overrides_it() -> None:
    assert build_read_slots(0).limit == usable_cpus()
    assert build_read_slots(3).limit == 3
    with pytest.raises(ValueError, match="at least 1"):
        ReadSlots(0)


def test_a_retrieve_waits_for_a_slot_and_says_how_long(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    ana = memory.entity("Ana Lima")
    fact = memory.fact("Ana Lima lives in Recife", ana)
    ctx = replace(read_ctx, read_slots=ReadSlots(1))
    holding = threading.Event()
    release = threading.Event()

    def hold_the_only_slot() -> None:
        assert ctx.read_slots is not None
        with ctx.read_slots.held():
            holding.set()
            release.wait(5)

    holder = threading.Thread(target=hold_the_only_slot)
    holder.start()
    assert holding.wait(5)
    threading.Timer(0.3, release.set).start()
    started = time.perf_counter()
    result = retrieve(ctx, agent_id=memory.agent_id, query="Where does Ana Lima live?", verbose=True)
    waited = time.perf_counter() - started
    holder.join(5)

    assert [found.fact_id for found in result.facts][:1] == [fact]
    assert result.trace is not None
    assert result.trace["timings_ms"]["queued"] >= 250
    assert waited >= 0.25
