"""SQLAlchemy 2 models of every table the service owns.

The memory tables follow the seeds' schema (``memory_*``; ``memory_intentions`` and
``session_observations`` were dropped by migration 0020, nothing wrote them);
``pipeline_runs``, ``imports``, ``maintenance_job_runs`` and ``schema_info`` are the
service's own bookkeeping. Every memory row carries ``agent_id``, the hard isolation
boundary: every index that serves a query starts with it. ``memory_fact_usage`` (retrieval
counters) is the exception: it is only ever reached by its fact's id, from a fact row already
scoped by agent, so its one index is the primary key (an index on ``agent_id`` would cost every
first count of a fact an index insert and serve no query).

Embedding columns are declared without a dimension here because the dimension is a
deployment setting; the migration creates them as ``vector(N)`` with the configured N
and records N in ``schema_info``.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Computed,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy import text as sql_text
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from memory_core.db.text_search import fact_search_vector_sql

NOW = sql_text("now()")
NEW_UUID = sql_text("gen_random_uuid()")


class Base(DeclarativeBase):
    """Declarative base of every table."""

    type_annotation_map = {  # noqa: RUF012 - SQLAlchemy reads this class attribute by name
        datetime: DateTime(timezone=True),
        dict[str, Any]: JSONB,
        list[Any]: JSONB,
    }


def _pk() -> Mapped[uuid.UUID]:
    return mapped_column(primary_key=True, server_default=NEW_UUID, default=uuid.uuid4)


def _created_at() -> Mapped[datetime]:
    return mapped_column(server_default=NOW)


# --- The service's own tables --------------------------------------------------------


class SchemaInfo(Base):
    """One row describing how this database was created (embedding dimension)."""

    __tablename__ = "schema_info"
    __table_args__ = (CheckConstraint("id = 1", name="schema_info_single_row"),)

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True, default=1)
    embedding_dimensions: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = _created_at()


class ApiKey(Base):
    """An API key of a tenant, scoped to some agents and permissions; only its SHA-256 is stored.

    The agents are an explicit list (``agent_ids``) or an ``agent_prefix`` such as ``acme:``.
    Revoked keys stay (``revoked_at``) so a name's history can be read; a name is unique among
    the keys not revoked.
    """

    __tablename__ = "api_keys"
    __table_args__ = (
        Index("uq_api_keys_active_name", "name", unique=True, postgresql_where=sql_text("revoked_at IS NULL")),
        CheckConstraint("(agent_prefix IS NULL) <> (agent_ids IS NULL)", name="api_keys_agents_by_list_or_prefix"),
    )

    id: Mapped[uuid.UUID] = _pk()
    name: Mapped[str] = mapped_column(String(128))
    tenant: Mapped[str] = mapped_column(String(128))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # The key's first characters, to tell keys apart in listings without storing the key.
    key_hint: Mapped[str] = mapped_column(String(16))
    agent_ids: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    agent_prefix: Mapped[str | None] = mapped_column(String(128))
    permissions: Mapped[list[str]] = mapped_column(ARRAY(Text))
    rate_limit_per_s: Mapped[float | None] = mapped_column(Float)
    expires_at: Mapped[datetime | None] = mapped_column()
    created_at: Mapped[datetime] = _created_at()
    revoked_at: Mapped[datetime | None] = mapped_column()


class LlmUsage(Base):
    """LLM calls and tokens per agent, UTC day, skill and model (migration 0018; :mod:`memory_core.usage`).

    Counters only grow, by ``INSERT ... ON CONFLICT DO UPDATE``; ``cached_input_tokens`` is part
    of ``input_tokens`` and ``failures`` counts skill runs whose answer was unusable or never came.
    """

    __tablename__ = "llm_usage"
    __table_args__ = (Index("ix_llm_usage_day", "day"), {"postgresql_with": {"fillfactor": 70}})

    agent_id: Mapped[str] = mapped_column(Text, primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    skill: Mapped[str] = mapped_column(Text, primary_key=True)
    model: Mapped[str] = mapped_column(Text, primary_key=True, server_default=sql_text("''"))
    calls: Mapped[int] = mapped_column(BigInteger, server_default=sql_text("0"))
    failures: Mapped[int] = mapped_column(BigInteger, server_default=sql_text("0"))
    input_tokens: Mapped[int] = mapped_column(BigInteger, server_default=sql_text("0"))
    output_tokens: Mapped[int] = mapped_column(BigInteger, server_default=sql_text("0"))
    cached_input_tokens: Mapped[int] = mapped_column(BigInteger, server_default=sql_text("0"))
    updated_at: Mapped[datetime] = _created_at()


class AgentConfig(Base):
    """An agent's MemoryConfig overrides, applied on top of the service config (migration 0019).

    See :mod:`memory_core.agent_config`; ``overrides`` is a JSON object of field -> value.
    """

    __tablename__ = "agent_configs"
    __table_args__ = (CheckConstraint("jsonb_typeof(overrides) = 'object'", name="agent_configs_overrides_object"),)

    agent_id: Mapped[str] = mapped_column(Text, primary_key=True)
    overrides: Mapped[dict[str, Any]] = mapped_column(server_default=sql_text("'{}'::jsonb"))
    updated_at: Mapped[datetime] = _created_at()


class Import(Base):
    """A batch historical import: many events under one id, progress counted from their runs."""

    __tablename__ = "imports"
    __table_args__ = (Index("ix_imports_agent_created", "agent_id", "created_at"),)

    id: Mapped[uuid.UUID] = _pk()
    agent_id: Mapped[str] = mapped_column(Text)
    total: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    duplicates: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    source: Mapped[str] = mapped_column(String(32), server_default=sql_text("'api'"))
    created_at: Mapped[datetime] = _created_at()


class AgentReprocess(Base):
    """A re-process of an agent's whole memory from its event log (migration 0021).

    The new memory is derived under the hidden agent id ``~reprocess:<id>`` and replaces the
    live one in one transaction when every event is through (:mod:`memory_core.maintenance.reprocess`).
    """

    __tablename__ = "agent_reprocesses"
    __table_args__ = (
        Index("ix_agent_reprocesses_agent_created", "agent_id", "created_at"),
        # One running re-process per agent (the API answers 409 to a second one).
        Index("uq_agent_reprocesses_running", "agent_id", unique=True, postgresql_where=sql_text("status = 'running'")),
        Index("ix_agent_reprocesses_running", "updated_at", postgresql_where=sql_text("status = 'running'")),
    )

    id: Mapped[uuid.UUID] = _pk()
    agent_id: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), server_default=sql_text("'running'"))
    total: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    done: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    failed: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    requeued: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    catch_up_rounds: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _created_at()
    updated_at: Mapped[datetime] = _created_at()
    finished_at: Mapped[datetime | None] = mapped_column()


class PipelineRun(Base):
    """Write-pipeline state of one event: status, stage, attempts, stage outputs, usage, timings."""

    __tablename__ = "pipeline_runs"
    __table_args__ = (
        Index("ix_pipeline_runs_status_updated", "status", "updated_at"),
        Index("ix_pipeline_runs_import_status", "import_id", "status"),
        Index("ix_pipeline_runs_agent_created", "agent_id", "created_at"),
    )

    event_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("memory_events.id", ondelete="CASCADE"), primary_key=True)
    agent_id: Mapped[str] = mapped_column(Text)
    import_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("imports.id", ondelete="SET NULL"))
    status: Mapped[str] = mapped_column(String(16), server_default=sql_text("'received'"))
    stage: Mapped[str | None] = mapped_column(String(32))
    attempts: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    # Retries the provider asked for (429 with Retry-After): not failures, so apart from attempts.
    throttled_retries: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    sweeps: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    error: Mapped[str | None] = mapped_column(Text)
    options: Mapped[dict[str, Any]] = mapped_column(server_default=sql_text("'{}'::jsonb"))
    # LLM answers already paid for, by (stage, skill): a redelivered stage reuses them.
    llm_cache: Mapped[dict[str, Any]] = mapped_column(server_default=sql_text("'{}'::jsonb"))
    token_usage: Mapped[dict[str, Any]] = mapped_column(server_default=sql_text("'{}'::jsonb"))
    timings: Mapped[dict[str, Any]] = mapped_column(server_default=sql_text("'{}'::jsonb"))
    result: Mapped[dict[str, Any] | None] = mapped_column()
    created_at: Mapped[datetime] = _created_at()
    updated_at: Mapped[datetime] = _created_at()
    finished_at: Mapped[datetime | None] = mapped_column()


class PipelineStageOutput(Base):
    """One stage's stored output for one event: a row per stage, so no stage rewrites another's."""

    __tablename__ = "pipeline_stage_outputs"

    event_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("pipeline_runs.event_id", ondelete="CASCADE"), primary_key=True
    )
    stage: Mapped[str] = mapped_column(String(16), primary_key=True)
    output: Mapped[dict[str, Any]] = mapped_column()
    created_at: Mapped[datetime] = _created_at()


class MaintenanceJobRun(Base):
    """One run of a background job for one agent (Beat or API triggered)."""

    __tablename__ = "maintenance_job_runs"
    __table_args__ = (
        Index("ix_job_runs_agent_job_created", "agent_id", "job", "created_at"),
        Index("ix_job_runs_status", "status"),
        # The run guard (migration 0002): one queued or running run per (agent, job).
        Index(
            "uq_job_runs_active",
            "agent_id",
            "job",
            unique=True,
            postgresql_where=sql_text("status IN ('queued', 'running')"),
        ),
    )

    id: Mapped[uuid.UUID] = _pk()
    agent_id: Mapped[str] = mapped_column(Text)
    job: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), server_default=sql_text("'queued'"))
    trigger: Mapped[str] = mapped_column(String(16), server_default=sql_text("'beat'"))
    task_id: Mapped[str | None] = mapped_column(String(64))
    result: Mapped[dict[str, Any] | None] = mapped_column()
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _created_at()
    started_at: Mapped[datetime | None] = mapped_column()
    finished_at: Mapped[datetime | None] = mapped_column()
    duration_ms: Mapped[float | None] = mapped_column(Float)


# --- Memory tables (seeds/003 "Database Schema", "Modelos de Banco de Dados") --------


class MemoryEvent(Base):
    """Immutable log of every message received; the source of truth for the pipeline."""

    __tablename__ = "memory_events"
    __table_args__ = (
        UniqueConstraint("agent_id", "message_id", name="uq_memory_events_agent_message"),
        Index("ix_memory_events_agent_occurred", "agent_id", "occurred_at"),
        Index("ix_memory_events_import", "import_id"),
        # Listing order of a session, and "the next message" of retrieval's reply context (0005).
        Index(
            "ix_memory_events_agent_session_order",
            "agent_id",
            "session_id",
            "occurred_at",
            sql_text("seq NULLS FIRST"),
            "id",
        ),
        # No vector index (migration 0008): relevant conversations score an agent's latest messages.
    )

    id: Mapped[uuid.UUID] = _pk()
    agent_id: Mapped[str] = mapped_column(Text)
    text: Mapped[str] = mapped_column(Text)
    speaker: Mapped[str] = mapped_column(String(256))
    session_id: Mapped[str] = mapped_column(String(256), server_default=sql_text("'default'"))
    message_id: Mapped[str | None] = mapped_column(String(256))
    import_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("imports.id", ondelete="SET NULL"))
    source: Mapped[str] = mapped_column(String(64), server_default=sql_text("'api'"))
    occurred_at: Mapped[datetime] = mapped_column(server_default=NOW)
    # Arrival order (migration 0005): taken from memory_events_seq on insert, so messages sharing
    # an occurred_at keep the order they were sent in. NULL for rows older than the migration.
    seq: Mapped[int | None] = mapped_column(BigInteger, server_default=sql_text("nextval('memory_events_seq')"))
    importance: Mapped[float] = mapped_column(Float, server_default=sql_text("0.5"))
    embedding_vec: Mapped[Any | None] = mapped_column(Vector())
    trace_json: Mapped[dict[str, Any] | None] = mapped_column()
    emotion_primary: Mapped[str | None] = mapped_column(String(32))
    emotion_intensity: Mapped[float | None] = mapped_column(Float)
    energy_level: Mapped[str | None] = mapped_column(String(16))
    # The speaker and text stemmed for search (migration 0014, memory_core.db.text_search): written
    # by a trigger once the message has its embedding; NULL before that and for older events the
    # migration did not backfill. Never loaded with the row.
    search_vector: Mapped[Any | None] = mapped_column(TSVECTOR, deferred=True)
    created_at: Mapped[datetime] = _created_at()


class MemoryCluster(Base):
    """Semantic cluster of an entity's facts, with an LLM (or rule) summary."""

    __tablename__ = "memory_clusters"
    __table_args__ = (
        Index("ix_memory_clusters_agent_entity", "agent_id", "entity_key"),
        # One automatic cluster per entity (migration 0002, clustering job).
        Index(
            "uq_memory_clusters_auto_entity",
            "agent_id",
            "entity_type",
            "entity_key",
            unique=True,
            postgresql_where=sql_text("cluster_type = 'auto'"),
        ),
    )

    id: Mapped[uuid.UUID] = _pk()
    agent_id: Mapped[str] = mapped_column(Text)
    entity_type: Mapped[str | None] = mapped_column(String(64))
    entity_key: Mapped[str | None] = mapped_column(String(256))
    label: Mapped[str] = mapped_column(String(128))
    summary_text: Mapped[str | None] = mapped_column(Text)
    cluster_type: Mapped[str] = mapped_column(String(32), server_default=sql_text("'auto'"))
    fact_count: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    importance: Mapped[float] = mapped_column(Float, server_default=sql_text("0.5"))
    embedding_vec: Mapped[Any | None] = mapped_column(Vector())
    is_active: Mapped[bool] = mapped_column(Boolean, server_default=sql_text("true"))
    # Hash of the member facts (ids and texts) the summary was made from; unchanged -> no LLM call.
    facts_fingerprint: Mapped[str | None] = mapped_column(String(64))
    last_updated_at: Mapped[datetime] = _created_at()
    created_at: Mapped[datetime] = _created_at()


class MemoryFact(Base):
    """Versioned fact with a validity window; UPDATE closes the old row and links the new one."""

    __tablename__ = "memory_facts"
    __table_args__ = (
        Index("ix_memory_facts_agent_entity", "agent_id", "entity_key"),
        Index(
            "ix_memory_facts_agent_active_created",
            "agent_id",
            "created_at",
            postgresql_where=sql_text("valid_to IS NULL"),
        ),
        # Migration 0006: the broad and aggregation searches read an agent's facts in this order.
        Index(
            "ix_memory_facts_agent_importance",
            "agent_id",
            sql_text("importance DESC"),
            sql_text("valid_from DESC"),
            "id",
            postgresql_where=sql_text("valid_to IS NULL"),
        ),
        Index("ix_memory_facts_agent_attribute", "agent_id", "attribute_key"),
        Index("ix_memory_facts_source_event", "source_event_id"),
        Index("ix_memory_facts_supersedes", "supersedes_fact_id"),
        Index("ix_memory_facts_cluster", "cluster_id"),
        Index("ix_memory_facts_search_vector", "search_vector", postgresql_using="gin"),
        # No table-wide vector index (migration 0010): large agents get partial ones of their own
        # (memory_core.read.agent_index), the others are searched exactly.
    )

    id: Mapped[uuid.UUID] = _pk()
    agent_id: Mapped[str] = mapped_column(Text)
    entity_type: Mapped[str] = mapped_column(String(64))
    entity_key: Mapped[str] = mapped_column(String(256))
    entity_name: Mapped[str | None] = mapped_column(String(256))
    attribute_key: Mapped[str | None] = mapped_column(String(128))
    fact_text: Mapped[str] = mapped_column(Text)
    category: Mapped[str | None] = mapped_column(String(50))
    speaker: Mapped[str | None] = mapped_column(String(256))
    confidence: Mapped[float] = mapped_column(Float, server_default=sql_text("0.8"))
    importance: Mapped[float] = mapped_column(Float, server_default=sql_text("0.5"))
    is_sensitive: Mapped[bool] = mapped_column(Boolean, server_default=sql_text("false"))
    valid_from: Mapped[datetime] = mapped_column(server_default=NOW)
    valid_to: Mapped[datetime | None] = mapped_column()
    ttl_days: Mapped[int | None] = mapped_column(Integer)
    source_event_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("memory_events.id", ondelete="SET NULL"))
    supersedes_fact_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("memory_facts.id", ondelete="SET NULL"))
    embedding_vec: Mapped[Any | None] = mapped_column(Vector())
    vitality_score: Mapped[float | None] = mapped_column(Float)
    is_stale: Mapped[bool] = mapped_column(Boolean, server_default=sql_text("false"))
    cluster_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("memory_clusters.id", ondelete="SET NULL"))
    value_json: Mapped[dict[str, Any] | None] = mapped_column()
    needs_confirmation: Mapped[bool] = mapped_column(Boolean, server_default=sql_text("false"))
    last_confirmed_at: Mapped[datetime | None] = mapped_column()
    reinforcement_count: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    user_correction_count: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    source_context: Mapped[str | None] = mapped_column(String(512))
    agent_annotation: Mapped[str | None] = mapped_column(Text)
    # Words as written, accents folded (memory_core.db.text_search, migration 0013), so Portuguese
    # and English facts are matched alike.
    search_vector: Mapped[Any] = mapped_column(TSVECTOR, Computed(fact_search_vector_sql(), persisted=True))
    created_at: Mapped[datetime] = _created_at()
    # Not mapped: created_xid bigint, the writing transaction's pg_current_xact_id() (migration
    # 0022), read by raw SQL only (memory_core.write.repository.FactRow).
    ingested_at: Mapped[datetime] = _created_at()
    invalidated_at: Mapped[datetime | None] = mapped_column()


class MemoryFactUsage(Base):
    """How often a fact was returned by retrieval, and when last (seeds R12; migration 0009).

    Apart from ``memory_facts`` so that counting a retrieval never writes a new version of the
    wide fact row (its embedding leaves no room on the page) with an entry in each of its
    indexes: this row is narrow, its pages half empty (fillfactor 50) and its only index is
    the primary key, so an update is HOT and touches no index. Written by
    :mod:`memory_core.read.bookkeeping`; a fact never retrieved has no row (counters 0 / NULL).
    """

    __tablename__ = "memory_fact_usage"
    __table_args__ = ({"postgresql_with": {"fillfactor": 50}},)

    fact_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("memory_facts.id", ondelete="CASCADE"), primary_key=True)
    # The fact's agent, copied: every write is scoped by it (reached by fact_id, so not indexed).
    agent_id: Mapped[str] = mapped_column(Text)
    times_retrieved: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    last_retrieved_at: Mapped[datetime | None] = mapped_column()


class MemoryFactEntityLink(Base):
    """Links a fact to every entity it names, not only its primary subject."""

    __tablename__ = "memory_fact_entity_links"
    __table_args__ = (
        UniqueConstraint("fact_id", "entity_key", name="uq_fact_entity_links_fact_entity"),
        Index("ix_fact_entity_links_agent_entity", "agent_id", "entity_key"),
        Index("ix_fact_entity_links_fact", "fact_id"),
        # Migration 0011: an entity's facts valid now, most important first (spreading, graph signal).
        Index(
            "ix_fact_entity_links_entity_ranked",
            "agent_id",
            "entity_key",
            sql_text("fact_importance DESC"),
            sql_text("fact_valid_from DESC"),
            "fact_id",
            postgresql_include=["fact_confidence"],
            postgresql_where=sql_text("fact_valid_to IS NULL"),
        ),
        # Migration 0016: an entity's facts newest first, open and closed apart (the explorer's pages).
        Index(
            "ix_fact_entity_links_entity_open",
            "agent_id",
            "entity_key",
            sql_text("fact_valid_from DESC"),
            sql_text("fact_id DESC"),
            postgresql_where=sql_text("fact_valid_to IS NULL"),
        ),
        Index(
            "ix_fact_entity_links_entity_closed",
            "agent_id",
            "entity_key",
            sql_text("fact_valid_from DESC"),
            sql_text("fact_id DESC"),
            postgresql_include=["fact_valid_to"],
            postgresql_where=sql_text("fact_valid_to IS NOT NULL"),
        ),
    )

    id: Mapped[uuid.UUID] = _pk()
    fact_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("memory_facts.id", ondelete="CASCADE"))
    entity_key: Mapped[str] = mapped_column(String(256))
    is_primary: Mapped[bool] = mapped_column(Boolean, server_default=sql_text("false"))
    agent_id: Mapped[str] = mapped_column(Text)
    # Copies of the fact's ranking columns, kept by triggers (migration 0011): never written here.
    fact_importance: Mapped[float | None] = mapped_column(Float)
    fact_valid_from: Mapped[datetime | None] = mapped_column()
    fact_valid_to: Mapped[datetime | None] = mapped_column()
    fact_confidence: Mapped[float | None] = mapped_column(Float)


class MemoryEntity(Base):
    """Canonical entity (node of the knowledge graph)."""

    __tablename__ = "memory_entities"
    __table_args__ = (
        UniqueConstraint("agent_id", "canonical_key", name="uq_memory_entities_agent_key"),
        Index("ix_memory_entities_agent_last_seen", "agent_id", "last_seen_at"),
        Index("ix_memory_entities_agent_importance", "agent_id", "importance_score"),
        Index("ix_memory_entities_agent_community", "agent_id", "community_id"),
        # Migration 0007: the query resolution's lookups by folded name, key slug and key type.
        Index(
            "ix_memory_entities_agent_folded_name",
            "agent_id",
            sql_text("translate(lower(display_name), 'áàâãäåéèêëíìîïóòôõöúùûüçñýÿ', 'aaaaaaeeeeiiiiooooouuuucnyy')"),
        ),
        Index("ix_memory_entities_agent_key_slug", "agent_id", sql_text("split_part(canonical_key, ':', 2)")),
        Index("ix_memory_entities_agent_key_type", "agent_id", sql_text("split_part(canonical_key, ':', 1)")),
        # Migration 0016: the explorer's entity list in name order.
        Index("ix_memory_entities_agent_name", "agent_id", sql_text("(COALESCE(display_name, canonical_key))"), "id"),
    )

    id: Mapped[uuid.UUID] = _pk()
    agent_id: Mapped[str] = mapped_column(Text)
    canonical_key: Mapped[str] = mapped_column(String(256))
    display_name: Mapped[str | None] = mapped_column(String(256))
    entity_type: Mapped[str] = mapped_column(String(64))
    summary_text: Mapped[str | None] = mapped_column(Text)
    profile_text: Mapped[str | None] = mapped_column(Text)
    profile_refreshed_at: Mapped[datetime | None] = mapped_column()
    embedding_vec: Mapped[Any | None] = mapped_column(Vector())
    fact_count: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    importance_score: Mapped[float | None] = mapped_column(Float)
    is_active: Mapped[bool] = mapped_column(Boolean, server_default=sql_text("true"))
    first_seen_at: Mapped[datetime] = _created_at()
    last_seen_at: Mapped[datetime] = _created_at()
    summary_refreshed_at: Mapped[datetime | None] = mapped_column()
    # The entity community (an "entity_community" meta-observation) this entity belongs to.
    community_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("memory_meta_observations.id", ondelete="SET NULL", name="fk_memory_entities_community")
    )
    created_at: Mapped[datetime] = _created_at()


class MemoryEntityAlias(Base):
    """Alias -> canonical key cache for exact-match resolution; first write wins."""

    __tablename__ = "memory_entity_aliases"
    __table_args__ = (
        UniqueConstraint("agent_id", "alias", name="uq_memory_entity_aliases_agent_alias"),
        Index("ix_memory_entity_aliases_agent_canonical", "agent_id", "canonical_entity_key"),
    )

    id: Mapped[uuid.UUID] = _pk()
    agent_id: Mapped[str] = mapped_column(Text)
    alias: Mapped[str] = mapped_column(String(256))
    canonical_entity_key: Mapped[str] = mapped_column(String(256))
    canonical_entity_type: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = _created_at()


class MemoryEntityRelationship(Base):
    """Directed edge between two entities, backed by an evidence fact."""

    __tablename__ = "memory_entity_relationships"
    __table_args__ = (
        UniqueConstraint(
            "agent_id",
            "source_entity_key",
            "target_entity_key",
            "rel_type",
            name="uq_memory_relationships_edge",
        ),
        Index("ix_memory_relationships_agent_source", "agent_id", "source_entity_key"),
        Index("ix_memory_relationships_agent_target", "agent_id", "target_entity_key"),
        Index("ix_memory_relationships_evidence", "evidence_fact_id"),
    )

    id: Mapped[uuid.UUID] = _pk()
    agent_id: Mapped[str] = mapped_column(Text)
    source_entity_key: Mapped[str] = mapped_column(String(256))
    target_entity_key: Mapped[str] = mapped_column(String(256))
    rel_type: Mapped[str] = mapped_column(String(64))
    strength: Mapped[float] = mapped_column(Float, server_default=sql_text("0.8"))
    evidence_fact_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("memory_facts.id", ondelete="SET NULL"))
    provenance: Mapped[str] = mapped_column(String(16), server_default=sql_text("'llm'"))
    valid_from: Mapped[datetime] = mapped_column(server_default=NOW)
    valid_to: Mapped[datetime | None] = mapped_column()
    created_at: Mapped[datetime] = _created_at()
    updated_at: Mapped[datetime] = _created_at()
    last_used_at: Mapped[datetime | None] = mapped_column()
    invalidated_at: Mapped[datetime | None] = mapped_column()


class MemoryMetaObservation(Base):
    """Higher-order observation from consolidation: insight, pattern, contradiction, trend, community."""

    __tablename__ = "memory_meta_observations"
    __table_args__ = (Index("ix_meta_observations_agent_type", "agent_id", "observation_type"),)

    id: Mapped[uuid.UUID] = _pk()
    agent_id: Mapped[str] = mapped_column(Text)
    observation_type: Mapped[str] = mapped_column(String(32))
    title: Mapped[str] = mapped_column(String(256))
    text: Mapped[str] = mapped_column(Text)
    supporting_event_ids: Mapped[list[Any]] = mapped_column(server_default=sql_text("'[]'::jsonb"))
    supporting_fact_ids: Mapped[list[Any]] = mapped_column(server_default=sql_text("'[]'::jsonb"))
    confidence: Mapped[float] = mapped_column(Float, server_default=sql_text("0.7"))
    importance: Mapped[float] = mapped_column(Float, server_default=sql_text("0.5"))
    times_reinforced: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    is_active: Mapped[bool] = mapped_column(Boolean, server_default=sql_text("true"))
    embedding_vec: Mapped[Any | None] = mapped_column(Vector())
    # Community observations: member cluster ids ("community_theme") or entity keys ("entity_community").
    members: Mapped[list[Any]] = mapped_column(server_default=sql_text("'[]'::jsonb"))
    # Hash of what the text was made from; unchanged -> no LLM call.
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    first_detected_at: Mapped[datetime] = _created_at()
    last_reinforced_at: Mapped[datetime] = _created_at()
    created_at: Mapped[datetime] = _created_at()


class MemoryAttributeRegistry(Base):
    """Attribute keys seen per agent (proposed vs active), for key canonicalisation."""

    __tablename__ = "memory_attribute_registry"
    __table_args__ = (UniqueConstraint("agent_id", "key", name="uq_attribute_registry_agent_key"),)

    id: Mapped[uuid.UUID] = _pk()
    agent_id: Mapped[str] = mapped_column(Text)
    key: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(20), server_default=sql_text("'proposed'"))
    value_type: Mapped[str] = mapped_column(String(20), server_default=sql_text("'string'"))
    conflict_policy: Mapped[str] = mapped_column(String(20), server_default=sql_text("'supersede'"))
    ttl_days: Mapped[int | None] = mapped_column(Integer)
    seen_count: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    proposed_by: Mapped[str] = mapped_column(String(20), server_default=sql_text("'llm'"))
    reason: Mapped[str | None] = mapped_column(Text)
    first_seen_at: Mapped[datetime] = _created_at()
    last_seen_at: Mapped[datetime] = _created_at()
    example_raw_key: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = _created_at()
    updated_at: Mapped[datetime | None] = mapped_column()


class MemoryDirective(Base):
    """Procedural memory: a behavioural directive learned from conversations, in English (migration 0020)."""

    __tablename__ = "memory_directives"
    __table_args__ = (
        Index("ix_memory_directives_agent", "agent_id", "is_active"),
        Index(
            "uq_memory_directives_active_key",
            "agent_id",
            "text_key",
            unique=True,
            postgresql_where=sql_text("is_active"),
        ),
    )

    id: Mapped[uuid.UUID] = _pk()
    agent_id: Mapped[str] = mapped_column(Text)
    text: Mapped[str] = mapped_column(Text)
    text_key: Mapped[str] = mapped_column(Text)
    confidence: Mapped[float] = mapped_column(Float, server_default=sql_text("0.8"))
    times_reinforced: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    is_active: Mapped[bool] = mapped_column(Boolean, server_default=sql_text("true"))
    source_event_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("memory_events.id", ondelete="SET NULL"))
    superseded_by_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("memory_directives.id", ondelete="SET NULL"))
    supersession_reason: Mapped[str | None] = mapped_column(Text)
    embedding_vec: Mapped[Any | None] = mapped_column(Vector())
    learned_at: Mapped[datetime] = _created_at()
    last_reinforced_at: Mapped[datetime] = _created_at()
    invalidated_at: Mapped[datetime | None] = mapped_column()
    created_at: Mapped[datetime] = _created_at()


class MemoryDirectiveBlock(Base):
    """The cached directive block of an agent, keyed by its directives' ids and reinforcement counts."""

    __tablename__ = "memory_directive_blocks"

    agent_id: Mapped[str] = mapped_column(Text, primary_key=True)
    cache_key: Mapped[str] = mapped_column(Text, primary_key=True)
    text: Mapped[str] = mapped_column(Text)
    directive_count: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = _created_at()


class MemoryPendingOperation(Base):
    """A destructive operation awaiting the user's confirmation, one per agent, until ``expires_at``."""

    __tablename__ = "memory_pending_operations"

    agent_id: Mapped[str] = mapped_column(Text, primary_key=True)
    kind: Mapped[str] = mapped_column(Text)
    payload: Mapped[dict[str, Any]] = mapped_column(server_default=sql_text("'{}'::jsonb"))
    confirmation_text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = _created_at()
    expires_at: Mapped[datetime] = mapped_column()


EMBEDDING_COLUMNS: tuple[tuple[str, str], ...] = (
    ("memory_events", "embedding_vec"),
    ("memory_facts", "embedding_vec"),
    ("memory_entities", "embedding_vec"),
    ("memory_clusters", "embedding_vec"),
    ("memory_meta_observations", "embedding_vec"),
    ("memory_directives", "embedding_vec"),
)
