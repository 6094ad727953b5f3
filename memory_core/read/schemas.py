"""What retrieval and the memory-management reads return: the contract of the API and the client."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


class DirectiveOut(_Out):
    """One directive as the API shows it."""

    directive_id: str
    text: str
    confidence: float = Field(description="base confidence, as taught")
    effective_confidence: float = Field(description="confidence x0.95 per week since last taught, floor 0.10")
    times_reinforced: int
    is_active: bool
    learned_at: datetime
    last_reinforced_at: datetime
    source_event_id: str | None = None
    superseded_by_id: str | None = None
    supersession_reason: str | None = None


class DirectiveBlock(_Out):
    """The seeds' DirectiveBlock: the merged instruction text, how many directives it uses, whether cached."""

    text: str = ""
    directive_count: int = 0
    cache_hit: bool = False


class ScoredFact(_Out):
    """A retrieved fact with its final score and the breakdown of every signal."""

    fact_id: str
    entity_name: str | None = None
    entity_key: str
    attribute_key: str | None = None
    fact_text: str
    score: float
    scores: dict[str, float] = Field(
        default_factory=dict,
        description="semantic, keyword, recency, importance, confidence, reranker, formula, pattern, graph",
    )
    speaker: str | None = None
    source_event_id: str | None = None
    message_id: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None


class RetrievedEvent(_Out):
    """A past message shown under "Relevant conversations"."""

    event_id: str
    text: str
    speaker: str
    occurred_at: datetime
    message_id: str | None = None
    score: float = 0.0
    reply_to: str | None = Field(
        None,
        description="On a reply brought in as context: the event_id of the message it answers (listed just before).",
    )


class RetrieveResult(_Out):
    """Ranked facts, the token-budgeted context string, and how the answer was produced."""

    facts: list[ScoredFact] = Field(default_factory=list)
    events: list[RetrievedEvent] = Field(default_factory=list)
    context: str = ""
    # Procedural memory (include_directives): the directive block, also at the top of ``context``.
    directives: DirectiveBlock | None = None
    total_candidates: int = 0
    duration_ms: float = 0.0
    config_effective: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    trace: dict[str, Any] | None = None


class FactDetail(_Out):
    """One fact with its validity window and provenance (superseded facts included)."""

    fact_id: str
    entity_key: str
    entity_name: str | None = None
    entity_type: str | None = None
    attribute_key: str | None = None
    fact_text: str
    confidence: float
    importance: float
    speaker: str | None = None
    source_event_id: str | None = None
    supersedes_fact_id: str | None = None
    valid_from: datetime
    valid_to: datetime | None = None
    invalidated_at: datetime | None = None
    is_active: bool
    reinforcement_count: int = 0
    times_retrieved: int = 0
    last_retrieved_at: datetime | None = None
    source_context: str | None = None
    created_at: datetime


class EntityDetail(_Out):
    """An entity as the entities endpoint lists it."""

    entity_id: str
    canonical_key: str
    display_name: str | None = None
    entity_type: str
    summary_text: str | None = None
    fact_count: int = 0
    importance_score: float | None = None
    first_seen_at: datetime
    last_seen_at: datetime
    profile_text: str | None = None


class EntityRelationship(_Out):
    """An active edge of the knowledge graph, seen from one entity."""

    source_entity_key: str
    target_entity_key: str
    rel_type: str
    strength: float
    valid_from: datetime


class EntityProfile(EntityDetail):
    """One entity with its aliases and its active relationships (strongest first)."""

    aliases: list[str] = Field(default_factory=list)
    relationships: list[EntityRelationship] = Field(default_factory=list)
