"""freeze_startup_heap: what is alive when it is called is out of the collector's reach, what comes later is not."""

from __future__ import annotations

import gc
import weakref

from memory_core.process_heap import freeze_startup_heap


class Node:
    def __init__(self) -> None:
        self.peer: Node | None = None


def _cycle() -> Node:
    first, second = Node(), Node()
    first.peer, second.peer = second, first
    return first


def test_the_collector_skips_what_was_alive_at_the_freeze_and_collects_what_came_later() -> None:
    gc.unfreeze()
    try:
        before = _cycle()
        before_ref = weakref.ref(before)
        assert freeze_startup_heap() > 0
        later = _cycle()
        later_ref = weakref.ref(later)
        del before, later  # both cycles are garbage now
        gc.collect()
        assert later_ref() is None
        assert before_ref() is not None  # frozen: never walked, so never found
        gc.unfreeze()
        gc.collect()
        assert before_ref() is None
    finally:
        gc.unfreeze()
