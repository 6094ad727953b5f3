"""What each write stage stores in ``pipeline_stage_outputs`` and what the run reports.

Stages hand each other these models as JSON through PostgreSQL, never in memory: any
worker can run the next stage, and a redelivered stage reads exactly what was stored.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memory_core.cognition.models import ExtractionOutput, KnownEntity, ReconcileAction

RunStatus = Literal["received", "extracted", "resolved", "reconciled", "done", "failed"]
StageName = Literal["extract", "resolve", "reconcile", "upsert"]

# The status a stage needs to find before it runs, and the one it leaves behind.
STAGE_INPUT_STATUS: dict[str, str] = {
    "extract": "received",
    "resolve": "extracted",
    "reconcile": "resolved",
    "upsert": "reconciled",
}
STAGE_OUTPUT_STATUS: dict[str, str] = {
    "extract": "extracted",
    "resolve": "resolved",
    "reconcile": "reconciled",
    "upsert": "done",
}
STAGES: tuple[str, ...] = ("extract", "resolve", "reconcile", "upsert")
TERMINAL_STATUSES: frozenset[str] = frozenset({"done", "failed"})


class _Stored(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TokenCount(_Stored):
    """Tokens spent, as stored and reported."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0

    def plus(self, other: TokenCount) -> TokenCount:
        """Sum of two counts."""
        return TokenCount(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )


class TraceStep(_Stored):
    """One step of the verbose pipeline trace."""

    name: str
    duration_ms: float
    data: dict[str, Any] = Field(default_factory=dict)


class PreparedFact(_Stored):
    """An extracted (or mirror) fact after normalisation, with its embedding."""

    subject: str
    text: str
    attribute_key: str | None = None
    importance: float = 0.5
    confidence: float = 0.6
    source_context: str | None = None
    embedding: list[float] | None = None


class ExtractStageOutput(_Stored):
    """Output of ``extract``: the normalised extraction and how it was obtained."""

    extraction: ExtractionOutput
    facts: list[PreparedFact] = Field(default_factory=list)
    known_entities: list[KnownEntity] = Field(default_factory=list)
    mode: str = "informed"
    strategy: str = "single_shot"
    chunks: int = 1
    used_fallback: bool = False
    error: str | None = None
    emotion: dict[str, Any] | None = None
    tokens: TokenCount = Field(default_factory=TokenCount)
    trace: list[TraceStep] = Field(default_factory=list)


ResolutionMethod = Literal[
    "speaker", "relationship_term", "alias", "key", "display_name", "prefix", "fuzzy", "llm", "new"
]


class ResolvedEntity(_Stored):
    """Where a mention (by its normalised name) resolves to."""

    mention: str
    canonical_key: str
    display_name: str
    entity_type: str
    method: ResolutionMethod
    is_new: bool
    aliases: list[str] = Field(default_factory=list)
    embedding: list[float] | None = None


class ResolveStageOutput(_Stored):
    """Output of ``resolve``: every mention's entity."""

    entities: list[ResolvedEntity] = Field(default_factory=list)
    tokens: TokenCount = Field(default_factory=TokenCount)
    trace: list[TraceStep] = Field(default_factory=list)


class FactDecision(_Stored):
    """Reconciliation's verdict on one prepared fact."""

    index: int
    entity_key: str
    entity_name: str
    entity_type: str
    text: str
    attribute_key: str | None = None
    importance: float = 0.5
    confidence: float = 0.6
    source_context: str | None = None
    embedding: list[float] | None = None
    action: ReconcileAction = "ADD"
    target_fact_id: str | None = None
    reason: str = ""
    candidate_ids: list[str] = Field(default_factory=list)


class ReconcileStageOutput(_Stored):
    """Output of ``reconcile``: one decision per fact, computed outside any lock."""

    decisions: list[FactDecision] = Field(default_factory=list)
    tokens: TokenCount = Field(default_factory=TokenCount)
    trace: list[TraceStep] = Field(default_factory=list)


class FactChange(_Stored):
    """A fact the write touched, as reported in the result."""

    fact_id: str | None = None
    entity_key: str
    fact_text: str
    attribute_key: str | None = None
    supersedes_fact_id: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None


class WriteResult(_Stored):
    """What a processed message did to memory (seeds' WriteResult)."""

    event_id: str
    facts_added: list[FactChange] = Field(default_factory=list)
    facts_updated: list[FactChange] = Field(default_factory=list)
    facts_unchanged: list[FactChange] = Field(default_factory=list)
    facts_deleted: list[FactChange] = Field(default_factory=list)
    entities_resolved: list[dict[str, Any]] = Field(default_factory=list)
    relationships: list[dict[str, Any]] = Field(default_factory=list)
    tokens_used: TokenCount = Field(default_factory=TokenCount)
    duration_ms: float = 0.0
    success: bool = True
    error: str | None = None
    warnings: list[str] = Field(default_factory=list)
    pipeline: list[TraceStep] | None = None
