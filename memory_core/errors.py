"""Exception hierarchy of the memory service, after the seeds' ``MemoryError`` tree.

The pipelines are fail-safe: each stage catches its own error and falls back (the table in
seeds/003 "Filosofia de Design"), so these exceptions mark *which* stage failed for logs, traces
and run records far more often than they reach a caller. Raise them with ``raise ... from err``
so the original exception stays available as ``__cause__``.
"""

from __future__ import annotations

from typing import ClassVar


class AranduError(Exception):
    """Base of every error the service raises on purpose: the seeds' ``MemoryError``.

    Renamed because ``MemoryError`` is Python's built-in out-of-memory exception; shadowing it
    would make ``except MemoryError`` catch the wrong thing. Catch this for generic handling.
    """

    stage: ClassVar[str] = "memory"


class ExtractionError(AranduError):
    """Extracting entities, facts or relations from a message failed (LLM timeout, bad JSON, rate limit).

    Fallback: the extraction is empty (no entities, facts or relations) and the event is kept, so
    nothing is lost and a later message may carry the same information.
    """

    stage: ClassVar[str] = "extraction"


class ResolutionError(AranduError):
    """Resolving a mention to a canonical entity failed (embeddings down, LLM disambiguation timeout).

    Fallback: the mention becomes a new entity; a duplicate is preferred to lost data.
    """

    stage: ClassVar[str] = "resolution"


class ReconciliationError(AranduError):
    """Deciding ADD/UPDATE/NOOP/DELETE for a new fact against existing ones failed.

    Fallback: the fact is ADDed; a near-duplicate is preferred to lost information, and the
    background jobs clean duplicates up later.
    """

    stage: ClassVar[str] = "reconciliation"


class RetrievalError(AranduError):
    """Retrieving memory for a query failed (semantic search error, reranker timeout).

    Fallback: an empty result instead of an error (a reranker failure alone keeps the original
    ranking).
    """

    stage: ClassVar[str] = "retrieval"


class UpsertError(AranduError):
    """Persisting a fact, entity or relationship failed (constraint violation, connection error).

    Fallback: each fact is written in its own savepoint, so only that savepoint rolls back and
    the other facts of the message proceed.
    """

    stage: ClassVar[str] = "upsert"


__all__ = [
    "AranduError",
    "ExtractionError",
    "ReconciliationError",
    "ResolutionError",
    "RetrievalError",
    "UpsertError",
]
