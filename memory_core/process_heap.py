"""Keep the cyclic garbage collector off what a process built at start-up.

A service process imports its frameworks and builds its pools once; those objects live as long
as the process, yet CPython's collector walks all of them at every full collection, a pause
every request behind it waits out. Frozen, they are skipped (docs/performance.md, "Accepting a
message").
"""

from __future__ import annotations

import gc

__all__ = ["freeze_startup_heap"]


def freeze_startup_heap() -> int:
    """Collect once, then move every object alive now out of the collector's reach; returns how many.

    Call it when start-up is done (the app built, the pools made) and before serving. Objects
    allocated later are collected as usual. In a prefork parent, calling it before the fork
    also keeps the children from touching (and so copying) those pages when they collect.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
