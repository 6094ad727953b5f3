"""The read pipeline: planner, signals, merge and rank, spreading activation, rerank, compression.

``retrieve(ctx, agent_id=..., query=...)`` is the entry point (``ctx`` from
:func:`build_read_context`); the management reads and deletes (M1) live in
:mod:`memory_core.read.management`. Every stage is importable on its own for callers that want
one of them (the seeds' "advanced read API").
"""

from memory_core.read.context import ReadContext, build_read_context
from memory_core.read.management import delete_all_facts, delete_fact, get_fact, list_entities, list_facts
from memory_core.read.pipeline import AsOf, RetrievalRequestError, retrieve
from memory_core.read.schemas import EntityDetail, FactDetail, RetrievedEvent, RetrieveResult, ScoredFact

__all__ = [
    "AsOf",
    "EntityDetail",
    "FactDetail",
    "ReadContext",
    "RetrievalRequestError",
    "RetrieveResult",
    "RetrievedEvent",
    "ScoredFact",
    "build_read_context",
    "delete_all_facts",
    "delete_fact",
    "get_fact",
    "list_entities",
    "list_facts",
    "retrieve",
]
