"""Disjoint sets (union-find) with path compression and union by rank, for community detection."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

__all__ = ["UnionFind", "connected_components"]

T = TypeVar("T", bound=Hashable)


class UnionFind(Generic[T]):
    """Disjoint sets over hashable items; near-constant time per operation."""

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._parent: dict[T, T] = {}
        self._rank: dict[T, int] = {}
        for item in items:
            self.add(item)

    def add(self, item: T) -> None:
        """Make ``item`` a set of its own unless it is known already."""
        if item not in self._parent:
            self._parent[item] = item
            self._rank[item] = 0

    def find(self, item: T) -> T:
        """The representative of ``item``'s set (adding ``item`` if new); compresses the path walked."""
        self.add(item)
        root = item
        while self._parent[root] != root:
            root = self._parent[root]
        # Point every node on the path straight at the root (iterative: deep chains cannot overflow the stack).
        while self._parent[item] != root:
            self._parent[item], item = root, self._parent[item]
        return root

    def union(self, first: T, second: T) -> bool:
        """Merge the sets of ``first`` and ``second``; False when they were one set already."""
        a, b = self.find(first), self.find(second)
        if a == b:
            return False
        # The shallower tree goes under the deeper one, so trees stay logarithmic in depth.
        if self._rank[a] < self._rank[b]:
            a, b = b, a
        self._parent[b] = a
        if self._rank[a] == self._rank[b]:
            self._rank[a] += 1
        return True

    def groups(self) -> list[list[T]]:
        """Every set, members in insertion order, sets in the order of their first member."""
        by_root: dict[T, list[T]] = {}
        for item in self._parent:
            by_root.setdefault(self.find(item), []).append(item)
        return list(by_root.values())


def connected_components(nodes: Iterable[T], edges: Iterable[tuple[T, T]], *, min_size: int = 1) -> list[list[T]]:
    """The connected components of the graph with at least ``min_size`` members, largest first.

    Ties keep the order of their first node, so the output is deterministic for a given input order.
    """
    sets: UnionFind[T] = UnionFind(nodes)
    for first, second in edges:
        sets.union(first, second)
    components = [group for group in sets.groups() if len(group) >= min_size]
    return sorted(components, key=len, reverse=True)
