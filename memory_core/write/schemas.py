"""What each write stage stores in ``pipeline_stage_outputs`` and what the run reports.

Stages hand each other these models as JSON through PostgreSQL, never in memory: any
worker can run the next stage, and a redelivered stage reads exactly what was stored.
"""

from __future__ import annotations

import base64
import binascii
import struct
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, field_serializer

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


def pack_embedding(vector: list[float] | None) -> str | None:
    """``vector`` as base64 of little-endian float32: how stage outputs store an embedding.

    Every stage stores its output as jsonb and reads those before it, and a message's outputs
    carry several 384-number embeddings: as JSON numbers, PostgreSQL parsed each into a numeric
    and printed it back on every read (~0.1 ms a vector), and the workers decoded and validated
    them one number at a time. A string is stored and read as it is. float32 is what the
    ``vector`` columns keep anyway.
    """
    if vector is None:
        return None
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def unpack_embedding(value: object) -> object:
    """The list of floats a stored embedding holds (packed, or a JSON list as stored before)."""
    if not isinstance(value, str):
        return value
    try:
        raw = base64.b64decode(value, validate=True)
    except binascii.Error as error:
        raise ValueError("an embedding must be base64 of float32 values or a list of numbers") from error
    if len(raw) % 4:
        raise ValueError("an embedding's bytes must be a whole number of float32 values")
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


# In Python a list of floats; in JSON (stage outputs) packed by pack_embedding.
Embedding = Annotated[
    list[float] | None,
    BeforeValidator(unpack_embedding),
    PlainSerializer(pack_embedding, return_type=str | None, when_used="json"),
]


class _Stored(BaseModel):
    model_config = ConfigDict(extra="ignore")


class SkillTokens(_Stored):
    """What one skill's calls to one model cost: the rows of the ``llm_usage`` accounting.

    ``calls`` counts the answers received, ``failures`` the skill runs that produced nothing
    usable (an invalid answer, a provider error); ``cached_input_tokens`` is part of ``input_tokens``.
    """

    skill: str
    model: str = ""
    calls: int = 0
    failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    def plus(self, other: SkillTokens) -> SkillTokens:
        """Sum of two counts of the same skill and model."""
        return self.model_copy(
            update={
                "calls": self.calls + other.calls,
                "failures": self.failures + other.failures,
                "input_tokens": self.input_tokens + other.input_tokens,
                "output_tokens": self.output_tokens + other.output_tokens,
                "cached_input_tokens": self.cached_input_tokens + other.cached_input_tokens,
            }
        )


class TokenCount(_Stored):
    """Tokens spent, as stored and reported, with the calls behind them by skill and model.

    ``by_skill`` travels with a stage's output: the stage's completion writes it to ``llm_usage``
    in the same statement that stores the output (:func:`memory_core.write.runs.complete_stages`),
    so the usage is counted exactly when the stage's result is, once.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cached_input_tokens: int = 0
    by_skill: list[SkillTokens] = Field(default_factory=list)

    def plus(self, other: TokenCount) -> TokenCount:
        """Sum of two counts (``by_skill`` merged by skill and model)."""
        merged: dict[tuple[str, str], SkillTokens] = {}
        for item in [*self.by_skill, *other.by_skill]:
            key = (item.skill, item.model)
            merged[key] = merged[key].plus(item) if key in merged else item
        return TokenCount(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            by_skill=list(merged.values()),
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
    embedding: Embedding = None
    # Informed extraction's own judgement against the known facts it was shown (see reconcile).
    replaces_fact_id: str | None = None
    judged: bool = False


DirectiveAction = Literal["add", "reinforce", "supersede"]


class DirectivePlan(_Stored):
    """A directive the message gives and what ``upsert`` should do with it (procedural memory).

    Decided by ``extract`` against a snapshot of the agent's active directives (the embedding
    pre-filter, then the contradiction judge); ``upsert`` re-checks the target under the lock.
    """

    text: str
    key: str
    confidence: float = 0.8
    embedding: Embedding = None
    action: DirectiveAction = "add"
    target_id: str | None = None
    reason: str | None = None


class CorrectionResult(_Stored):
    """The corrections a message made (seeds' CorrectionResult): facts whose value a newer one replaced."""

    corrections_detected: int = 0
    corrected_keys: list[str] = Field(default_factory=list)
    facts_corrected_ids: list[str] = Field(default_factory=list)


class DirectiveChange(_Stored):
    """What a message did to a directive: ``added``, ``reinforced``, ``superseded`` (an older one) or ``history``."""

    directive_id: str | None
    text: str
    change: Literal["added", "reinforced", "superseded", "history"]
    superseded_id: str | None = None


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
    directives: list[DirectivePlan] = Field(default_factory=list)
    # Set when the extraction came from a call shared by several messages: the batch's id,
    # this message's number in it (from 1) and the batch's size, for tracing.
    batch: dict[str, Any] | None = None
    # The database's clock and snapshot (pg_current_snapshot() as text) once informed extraction
    # had read what memory knows: facts whose writing transaction that snapshot cannot see
    # (another message of the agent applied meanwhile) are facts it could not see. The clock
    # tells them only for rows or outputs older than the snapshot (see reconcile.written_since).
    known_as_of: datetime | None = None
    known_snapshot: str | None = None


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
    embedding: Embedding = None


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
    # Left empty by reconcile (outputs since 2026-11-30): upsert takes facts[index]'s from the extract output.
    embedding: Embedding = None
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
    directives: list[DirectiveChange] = Field(default_factory=list)
    corrections: CorrectionResult = Field(default_factory=CorrectionResult)
    tokens_used: TokenCount = Field(default_factory=TokenCount)
    duration_ms: float = 0.0
    success: bool = True
    error: str | None = None
    warnings: list[str] = Field(default_factory=list)
    pipeline: list[TraceStep] | None = None

    @field_serializer("tokens_used")
    def _totals_only(self, tokens: TokenCount) -> dict[str, int]:
        # The per-skill breakdown is accounting (GET /v1/agents/{id}/usage), not part of a write's result.
        return tokens.model_dump(exclude={"by_skill"})
