"""Inputs and outputs of the maintenance jobs' skills: the contract both implementations honour.

Like :mod:`memory_core.cognition.models`, every model is JSON-friendly: LLM skills parse
them from the model's answer, offline skills build them with rules, and jobs store what
they produce (summaries, profiles, meta-observations) as plain text and JSON.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ObservationKind = Literal["insight", "pattern", "contradiction", "trend"]


class _Model(BaseModel):
    # LLMs add keys of their own; ignoring them keeps a useful answer usable.
    model_config = ConfigDict(extra="ignore")


class FactLine(_Model):
    """One fact as a job shows it to a skill: its id (for evidence), text, and when it became true."""

    fact_id: str
    text: str
    attribute_key: str | None = None
    valid_from: datetime | None = None
    # The fact's subject; lets rules compare facts about the same entity (contradictions).
    entity_key: str | None = None


# --- summaries (clusters and entities) ------------------------------------------------


class SummaryInput(_Model):
    """A group of facts to summarise in 2-3 sentences: a cluster or one entity's facts."""

    subject: str = Field(description="What the facts are about: an entity's name or a cluster's label.")
    facts: list[FactLine]


class SummaryOutput(_Model):
    """A 2-3 sentence summary (in English, seeds W20) and a short label for it."""

    summary: str
    label: str = ""


# --- communities -----------------------------------------------------------------------


class CommunityInput(_Model):
    """Cluster summaries whose embeddings are close: one theme to name and describe."""

    cluster_summaries: list[str]


class CommunityOutput(_Model):
    """The community's theme as a title and a one-paragraph observation."""

    title: str
    observation: str


# --- consolidation (L2) ------------------------------------------------------------------


class EventLine(_Model):
    """One conversation event inside the consolidation lookback window."""

    event_id: str
    speaker: str
    text: str
    occurred_at: datetime
    emotion: str | None = None


class ConsolidationInput(_Model):
    """Recent events and active facts of one agent, in time order."""

    events: list[EventLine]
    facts: list[FactLine]


class ObservationDraft(_Model):
    """An insight, pattern, contradiction or trend with the ids that support it."""

    kind: ObservationKind
    title: str
    text: str
    confidence: float = Field(default=0.7, ge=0.0, le=1.0)
    supporting_event_ids: list[str] = Field(default_factory=list)
    supporting_fact_ids: list[str] = Field(default_factory=list)


class ConsolidationOutput(_Model):
    """Every observation found; an empty list is a valid answer."""

    observations: list[ObservationDraft] = Field(default_factory=list)


# --- profiles (L3) -------------------------------------------------------------------------


class ProfileInput(_Model):
    """An entity and up to ``profile_consolidation_max_facts`` of its active facts."""

    entity_name: str
    entity_type: str
    facts: list[FactLine]
    previous_profile: str | None = None


class ProfileOutput(_Model):
    """A comprehensive profile covering every relevant aspect of the entity."""

    profile_text: str


# --- memify (episodic -> semantic/procedural) -----------------------------------------------


class DistillInput(_Model):
    """Episodic facts about one entity and topic, to distil into general knowledge."""

    entity_name: str
    facts: list[FactLine]


class DistilledStatement(_Model):
    """A general statement and the facts it was distilled from."""

    text: str
    source_fact_ids: list[str] = Field(default_factory=list)


class DistillOutput(_Model):
    """Zero or more distilled statements."""

    statements: list[DistilledStatement] = Field(default_factory=list)
