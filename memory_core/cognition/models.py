"""Inputs and outputs of the write pipeline's skills: the contract both implementations honour.

LLM skills parse these models from JSON; offline skills build them with rules. Pipeline
stages store them in ``pipeline_stage_outputs`` as JSON, so every field is
JSON-friendly and every model round-trips through ``model_dump(mode="json")``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memory_core.cognition.directive_models import ExtractedDirective

ImportanceCategory = Literal[
    "biographical_milestone",
    "relationship_change",
    "stable_preference",
    "specific_event",
    "routine_activity",
    "conversational",
]
ConfidenceLevel = Literal["explicit_statement", "strong_inference", "weak_inference", "speculation"]
FactAction = Literal["NEW", "UPDATE"]
ReconcileAction = Literal["ADD", "UPDATE", "NOOP", "DELETE"]
Energy = Literal["low", "medium", "high"]


class _Model(BaseModel):
    # LLMs add keys of their own; ignoring them keeps a useful answer usable.
    model_config = ConfigDict(extra="ignore")


def without_description(schema: dict[str, Any]) -> None:
    """``json_schema_extra`` of answer models whose docstring is for developers: the prompt says it already.

    Every call pays for the output schema's tokens; the extraction skills' prompts describe each field.
    """
    schema.pop("description", None)


#: The configuration of such answer models.
ANSWER_CONFIG = ConfigDict(extra="ignore", json_schema_extra=without_description)


# --- emotion ---------------------------------------------------------------------------


class EmotionInput(_Model):
    """A message whose emotional tone is wanted."""

    text: str


class EmotionOutput(_Model):
    """Primary emotion label, its intensity in [0, 1], and the speaker's energy."""

    model_config = ANSWER_CONFIG

    emotion: str = "neutral"
    intensity: float = Field(default=0.0, ge=0.0, le=1.0)
    energy: Energy = "medium"


# --- extraction ------------------------------------------------------------------------


class KnownFact(_Model):
    """An existing active fact shown to informed extraction as context."""

    fact_id: str
    text: str
    attribute_key: str | None = None


class KnownEntity(_Model):
    """An entity already in memory that the message names (found by alias lookup)."""

    name: str = Field(description="the name as it appears in the message")
    canonical_key: str
    display_name: str
    entity_type: str
    profile_text: str | None = None
    facts: list[KnownFact] = Field(default_factory=list)


class ExtractionInput(_Model):
    """One message to extract from, with who said it, when, and what memory already knows."""

    message: str
    speaker_name: str
    occurred_at: datetime
    timezone: str = "UTC"
    recent_messages: list[str] = Field(default_factory=list)
    known_entities: list[KnownEntity] = Field(default_factory=list)
    chunk_hint: str | None = Field(default=None, description="set when the message is one chunk of a long input")
    max_facts: int = 100
    # Not shown to the model: how the skill calls it (MemoryConfig.extraction_timeout_sec and
    # relation_retry_min_entities). None: the provider's own timeout.
    timeout_s: float | None = None
    relation_retry_min_entities: int = 2


class ExtractedEntity(_Model):
    """An entity the message names; ``aliases`` are other names used for it in the message."""

    model_config = ANSWER_CONFIG

    name: str
    type: str = "other"
    aliases: list[str] = Field(default_factory=list)


class ExtractedFact(_Model):
    """A self-contained statement about ``subject`` (an entity name), in the message's language."""

    subject: str
    text: str
    attribute_key: str | None = None
    action: FactAction = "NEW"
    importance_category: ImportanceCategory | None = None
    confidence_level: ConfidenceLevel | None = None
    replaces_fact_id: str | None = Field(
        default=None, description="the known fact shown to informed extraction that this one supersedes"
    )
    judged: bool = Field(
        default=False,
        description="informed extraction compared it with the known facts it was shown (reconciliation may reuse that)",
    )


class ExtractedRelation(_Model):
    """A directed edge between two entity names, ``type`` in snake_case (works_at, lives_in...)."""

    model_config = ANSWER_CONFIG

    source: str
    target: str
    type: str


class ExtractionOutput(_Model):
    """Everything extraction found in one message."""

    entities: list[ExtractedEntity] = Field(default_factory=list)
    facts: list[ExtractedFact] = Field(default_factory=list)
    relations: list[ExtractedRelation] = Field(default_factory=list)
    updated_profiles: dict[str, str] = Field(
        default_factory=dict, description="entity name -> short English profile, for entities the message changes"
    )
    relation_retry_triggered: bool = Field(
        default=False, description="set by blind extraction when it asked again for relations (not an LLM field)"
    )
    emotion: EmotionOutput | None = Field(
        default=None, description="the message's emotional tone, when the extraction call also tagged it"
    )
    directives: list[ExtractedDirective] = Field(
        default_factory=list, description="behavioural instructions to the assistant, in English (procedural memory)"
    )


# --- entity resolution -----------------------------------------------------------------


class EntityCandidate(_Model):
    """An existing entity that might be the one a mention refers to."""

    canonical_key: str
    display_name: str
    entity_type: str
    similarity: float
    summary: str | None = None


class DisambiguationInput(_Model):
    """An ambiguous mention (similarity between the fuzzy bounds) and its top candidates."""

    mention: str
    mention_type: str
    message: str
    candidates: list[EntityCandidate]


class DisambiguationOutput(_Model):
    """The chosen candidate's canonical key, or None when the mention is a new entity."""

    match: str | None = None
    reason: str = ""


# --- reconciliation --------------------------------------------------------------------


class ExistingFact(_Model):
    """An active fact of the same entity, with its similarity to the new fact."""

    fact_id: str
    text: str
    attribute_key: str | None = None
    valid_from: datetime
    similarity: float


class ReconcileInput(_Model):
    """A new fact and the existing facts it may add to, update, repeat or retract."""

    entity_key: str
    entity_name: str
    new_text: str
    new_attribute_key: str | None = None
    new_valid_from: datetime
    existing: list[ExistingFact]


class ReconcileOutput(_Model):
    """What to do with the new fact; ``target_fact_id`` names the existing fact for UPDATE, NOOP, DELETE."""

    action: ReconcileAction = "ADD"
    target_fact_id: str | None = None
    reason: str = ""


# --- batched extraction ------------------------------------------------------------------


class BatchExtractionInput(_Model):
    """Consecutive messages of one conversation, extracted together; each keeps its own speaker and date."""

    messages: list[ExtractionInput]


class BatchExtractionOutput(_Model):
    """Per message of the batch, in its order: its extraction, or None and why when its part was unusable.

    ``shares`` is each message's part of the call's answer in characters (to split its tokens).
    """

    results: list[ExtractionOutput | None]
    errors: list[str | None]
    shares: list[int] = Field(default_factory=list)


# --- batched reconciliation --------------------------------------------------------------


class BatchReconcileInput(_Model):
    """Several new facts of one agent, decided together; each keeps its own entity and existing facts."""

    items: list[ReconcileInput]


class BatchReconcileOutput(_Model):
    """Per new fact of the batch, in its order: its decision, or None and why when its part was unusable.

    ``shares`` is each fact's part of the call's answer in characters (to split its tokens).
    """

    results: list[ReconcileOutput | None]
    errors: list[str | None]
    shares: list[int] = Field(default_factory=list)
