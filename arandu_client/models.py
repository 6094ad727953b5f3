"""What the arandu API answers, as pydantic models (and what the client sends, as typed dicts).

The models mirror the JSON of the API and ignore fields they do not know, so a newer server
does not break an older client. Timestamps are aware ``datetime`` values in UTC.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field

EVENT_FINAL_STATUSES = frozenset({"done", "failed"})


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


# ---- What the client sends -----------------------------------------------------------------


class MessageOptions(TypedDict, total=False):
    """Optional fields of a message (see the README's API section)."""

    session_id: str
    occurred_at: datetime | str
    message_id: str
    source: str
    recent_messages: list[str]
    config_overrides: dict[str, Any]
    verbose: bool


class Message(MessageOptions):
    """One message of a batch or an import: the text, who said it, and the optional fields."""

    message: str
    speaker_name: str


class TimeWindow(TypedDict):
    """An ``as_of`` window for retrieval: facts valid at some point between ``start`` and ``end``."""

    start: datetime | str
    end: datetime | str


# ---- Write path ----------------------------------------------------------------------------


class MessageAccepted(_Model):
    """A stored message; ``duplicate`` when its message_id was already known (nothing was queued)."""

    event_id: str
    status: str
    duplicate: bool = False
    warnings: list[str] = Field(default_factory=list)


class DryRunResult(_Model):
    """What a message would do to memory; nothing was stored."""

    dry_run: Literal[True] = True
    result: dict[str, Any]
    warnings: list[str] = Field(default_factory=list)


class BatchAccepted(_Model):
    """Event ids in input order; ``duplicates`` counts messages whose message_id was already known."""

    event_ids: list[str]
    duplicates: int = 0
    warnings: list[str] = Field(default_factory=list)


class ImportAccepted(_Model):
    """A stored import: ``total`` new events, ``duplicates`` messages already known."""

    import_id: str
    total: int
    duplicates: int = 0
    status: str
    warnings: list[str] = Field(default_factory=list)


class ImportProgress(_Model):
    """An import's progress; ``status`` is ``running``, ``done`` or ``failed`` (finished with failures)."""

    import_id: str
    agent_id: str
    total: int
    duplicates: int = 0
    done: int
    failed: int
    pending: int
    status: str
    created_at: datetime | None = None

    @property
    def finished(self) -> bool:
        """True once no message of the import is pending."""
        return self.status != "running"


class EventStatus(_Model):
    """A message's pipeline run: ``status`` ends in ``done`` or ``failed``."""

    event_id: str
    agent_id: str
    status: str
    stage: str | None = None
    attempts: int = 0
    error: str | None = None
    occurred_at: datetime | None = None
    message_id: str | None = None
    import_id: str | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None
    result: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        """True when the run is ``done`` or ``failed``."""
        return self.status in EVENT_FINAL_STATUSES


class EventSummary(_Model):
    """Where a message's processing stands, found by its ``message_id``."""

    event_id: str
    message_id: str
    status: str
    stage: str | None = None
    error: str | None = None
    import_id: str | None = None

    @property
    def finished(self) -> bool:
        """True when the run is ``done`` or ``failed``."""
        return self.status in EVENT_FINAL_STATUSES


class EventLookup(_Model):
    """The events of the message ids asked for (unknown ids are absent)."""

    events: list[EventSummary] = Field(default_factory=list)


class RetryAccepted(_Model):
    """A re-driven event: the pipeline runs again from ``start_stage``."""

    event_id: str
    status: str
    start_stage: str


# ---- Retrieval -----------------------------------------------------------------------------


class ScoredFact(_Model):
    """A retrieved fact with its final score and the breakdown of every signal."""

    fact_id: str
    entity_name: str | None = None
    entity_key: str
    attribute_key: str | None = None
    fact_text: str
    score: float
    scores: dict[str, float] = Field(default_factory=dict)
    speaker: str | None = None
    source_event_id: str | None = None
    message_id: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None


class RetrievedEvent(_Model):
    """A past message shown under "Relevant conversations"."""

    event_id: str
    text: str
    speaker: str
    occurred_at: datetime
    message_id: str | None = None
    score: float = 0.0
    # The event_id of the message this one answers, when it was brought in as that message's reply.
    reply_to: str | None = None


class DirectiveBlock(_Model):
    """The persona and the learned directives merged into one instruction block (procedural memory)."""

    text: str = ""
    directive_count: int = 0
    cache_hit: bool = False


class Directive(_Model):
    """A behavioural directive learned from the agent's conversations, in English."""

    directive_id: str
    text: str
    confidence: float
    effective_confidence: float
    times_reinforced: int
    is_active: bool
    learned_at: datetime
    last_reinforced_at: datetime
    source_event_id: str | None = None
    superseded_by_id: str | None = None
    supersession_reason: str | None = None


class DirectiveList(_Model):
    """``GET /v1/agents/{agent_id}/directives``: the block and the directives, strongest first."""

    agent_id: str
    block: DirectiveBlock
    directives: list[Directive] = Field(default_factory=list)


class RetrieveResult(_Model):
    """Ranked facts, the context string for a prompt, and how the answer was produced."""

    facts: list[ScoredFact] = Field(default_factory=list)
    events: list[RetrievedEvent] = Field(default_factory=list)
    context: str = ""
    directives: DirectiveBlock | None = None
    total_candidates: int = 0
    duration_ms: float = 0.0
    config_effective: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    trace: dict[str, Any] | None = None


# ---- Memory management ---------------------------------------------------------------------


class FactDetail(_Model):
    """One fact with its validity window and provenance (superseded facts have ``is_active`` False)."""

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


class EntityDetail(_Model):
    """An entity of the agent's memory."""

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


class EntityRelationship(_Model):
    """An active edge of the knowledge graph, seen from one entity."""

    source_entity_key: str
    target_entity_key: str
    rel_type: str
    strength: float
    valid_from: datetime


class EntityProfile(EntityDetail):
    """One entity with its aliases and its strongest active relationships."""

    aliases: list[str] = Field(default_factory=list)
    relationships: list[EntityRelationship] = Field(default_factory=list)


class FactPage(_Model):
    """A page of active facts, newest first, and how many there are in all."""

    facts: list[FactDetail]
    total: int


class EntityPage(_Model):
    """A page of entities and how many there are in all."""

    entities: list[EntityDetail]
    total: int


class Deleted(_Model):
    """How many facts a delete removed."""

    deleted: int


class AgentErased(_Model):
    """What erasing an agent deleted: rows per table (every table that holds agent data, zeros included)."""

    agent_id: str
    deleted: dict[str, int]
    indexes_dropped: bool = False

    @property
    def total(self) -> int:
        """Rows deleted in all tables."""
        return sum(self.deleted.values())


class Reprocess(_Model):
    """A re-process of an agent's memory from its event log; ``status`` is ``running``, ``done`` or ``cancelled``.

    While it runs, ``total``/``done``/``failed``/``pending`` count the messages being re-derived;
    ``requeued`` counts messages that arrived too late and were re-driven at the switch.
    """

    reprocess_id: str
    agent_id: str
    status: str
    total: int
    done: int
    failed: int
    pending: int
    requeued: int = 0
    catch_up_rounds: int = 0
    error: str | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def finished(self) -> bool:
        """True once the re-process switched to the new memory or was cancelled."""
        return self.status != "running"


class AgentEvent(_Model):
    """One of an agent's messages and where its processing stands."""

    event_id: str
    status: str
    stage: str | None = None
    attempts: int = 0
    error: str | None = None
    speaker: str
    text: str
    occurred_at: datetime
    created_at: datetime | None = None
    finished_at: datetime | None = None
    import_id: str | None = None


class AgentEventPage(_Model):
    """A page of an agent's events, newest received first; ``next_cursor`` is None on the last page."""

    events: list[AgentEvent] = Field(default_factory=list)
    next_cursor: str | None = None


class BulkRetry(_Model):
    """Failed events re-driven in bulk: how many, by the stage each restarts at, and what was not."""

    retried: int
    by_stage: dict[str, int] = Field(default_factory=dict)
    event_ids: list[str] = Field(default_factory=list)
    not_retried: list[str] = Field(default_factory=list)
    remaining: int = 0


# ---- Maintenance jobs ----------------------------------------------------------------------

JOB_FINAL_STATUSES = frozenset({"done", "failed", "skipped"})


class AgentConfig(_Model):
    """An agent's MemoryConfig overrides and the config its work runs on (service config + overrides)."""

    agent_id: str
    overrides: dict[str, Any]
    config_effective: dict[str, Any]
    updated_at: datetime | None = None


class JobRunAccepted(_Model):
    """A maintenance run queued by ``run_job``."""

    job_run_id: str
    agent_id: str
    job: str
    status: str
    trigger: str


class JobRun(_Model):
    """One maintenance run: ``queued`` -> ``running`` -> ``done``, ``failed`` or ``skipped``."""

    job_run_id: str
    agent_id: str
    job: str
    status: str
    trigger: str
    task_id: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: float | None = None
    result: dict[str, Any] | None = None
    error: str | None = None

    @property
    def finished(self) -> bool:
        """True once the run is done, failed or skipped."""
        return self.status in JOB_FINAL_STATUSES


class JobRunPage(_Model):
    """An agent's most recent maintenance runs, newest first."""

    runs: list[JobRun]


# ---- LLM usage -----------------------------------------------------------------------------


class UsageCounts(_Model):
    """LLM calls and tokens; ``cached_input_tokens`` is the part of ``input_tokens`` served from a prompt cache."""

    calls: int = 0
    failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0


class UsageDay(UsageCounts):
    """One UTC day's usage."""

    day: date


class UsageSkill(UsageCounts):
    """One skill's usage with one model."""

    skill: str
    model: str = ""


class AgentUsage(_Model):
    """An agent's LLM usage from ``since`` to ``until`` (UTC days, both included)."""

    agent_id: str
    since: date
    until: date
    totals: UsageCounts
    by_day: list[UsageDay] = Field(default_factory=list)
    by_skill: list[UsageSkill] = Field(default_factory=list)


# ---- Operations ----------------------------------------------------------------------------


# ---- API keys ------------------------------------------------------------------------------


class ApiKeyInfo(_Model):
    """A tenant key as listed (never the key itself: ``key_hint`` is its first characters)."""

    name: str
    tenant: str
    key_hint: str
    permissions: list[str]
    agent_ids: list[str] | None = None
    agent_prefix: str | None = None
    rate_limit_per_s: float | None = None
    expires_at: datetime | None = None
    created_at: datetime
    revoked_at: datetime | None = None
    status: str


class CreatedApiKey(ApiKeyInfo):
    """A new tenant key: ``key`` is shown this once."""

    key: str


class ApiKeyList(_Model):
    """Tenant keys, newest first."""

    keys: list[ApiKeyInfo]


class Readiness(_Model):
    """``GET /readyz``: ``checks`` names each dependency (database, broker) and its state."""

    status: str
    checks: dict[str, str] = Field(default_factory=dict)

    @property
    def ready(self) -> bool:
        """True when every dependency answers."""
        return self.status == "ready"


__all__ = [
    "ApiKeyInfo",
    "ApiKeyList",
    "BatchAccepted",
    "CreatedApiKey",
    "Deleted",
    "Directive",
    "DirectiveBlock",
    "DirectiveList",
    "DryRunResult",
    "EntityDetail",
    "EntityPage",
    "EntityProfile",
    "EntityRelationship",
    "EventLookup",
    "EventStatus",
    "EventSummary",
    "FactDetail",
    "FactPage",
    "ImportAccepted",
    "ImportProgress",
    "Message",
    "MessageAccepted",
    "MessageOptions",
    "Readiness",
    "RetrieveResult",
    "RetrievedEvent",
    "RetryAccepted",
    "ScoredFact",
    "TimeWindow",
]
