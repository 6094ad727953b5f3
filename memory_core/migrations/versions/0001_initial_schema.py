"""Initial schema: the seeds' memory tables plus pipeline runs, imports, job runs and schema info.

Revision ID: 0001
Revises:
Create Date: 2026-11-30 00:21:34.165755
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import Vector
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _embedding_dimensions() -> int:
    """The dimension chosen by the caller (settings), fixed into every vector column."""
    value = op.get_context().config.attributes.get("embedding_dimensions") if op.get_context().config else None
    if value is None:
        raise RuntimeError("run migrations through memory_core.db.migrate, which passes the embedding dimension")
    return int(value)


def upgrade() -> None:
    dimensions = _embedding_dimensions()
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.create_table(
        "imports",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("total", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("duplicates", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("source", sa.String(length=32), server_default=sa.text("'api'"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_imports_agent_created", "imports", ["agent_id", "created_at"], unique=False)
    op.create_table(
        "maintenance_job_runs",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("job", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), server_default=sa.text("'queued'"), nullable=False),
        sa.Column("trigger", sa.String(length=16), server_default=sa.text("'beat'"), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=True),
        sa.Column("result", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("duration_ms", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_job_runs_agent_job_created", "maintenance_job_runs", ["agent_id", "job", "created_at"], unique=False
    )
    op.create_index("ix_job_runs_status", "maintenance_job_runs", ["status"], unique=False)
    op.create_table(
        "memory_attribute_registry",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=20), server_default=sa.text("'proposed'"), nullable=False),
        sa.Column("value_type", sa.String(length=20), server_default=sa.text("'string'"), nullable=False),
        sa.Column("conflict_policy", sa.String(length=20), server_default=sa.text("'supersede'"), nullable=False),
        sa.Column("ttl_days", sa.Integer(), nullable=True),
        sa.Column("seen_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("proposed_by", sa.String(length=20), server_default=sa.text("'llm'"), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("example_raw_key", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("agent_id", "key", name="uq_attribute_registry_agent_key"),
    )
    op.create_table(
        "memory_clusters",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("entity_type", sa.String(length=64), nullable=True),
        sa.Column("entity_key", sa.String(length=256), nullable=True),
        sa.Column("label", sa.String(length=128), nullable=False),
        sa.Column("summary_text", sa.Text(), nullable=True),
        sa.Column("cluster_type", sa.String(length=32), server_default=sa.text("'auto'"), nullable=False),
        sa.Column("fact_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("importance", sa.Float(), server_default=sa.text("0.5"), nullable=False),
        sa.Column("embedding_vec", Vector(dimensions), nullable=True),
        sa.Column("is_active", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("last_updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_memory_clusters_agent_entity", "memory_clusters", ["agent_id", "entity_key"], unique=False)
    op.create_table(
        "memory_entities",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("canonical_key", sa.String(length=256), nullable=False),
        sa.Column("display_name", sa.String(length=256), nullable=True),
        sa.Column("entity_type", sa.String(length=64), nullable=False),
        sa.Column("summary_text", sa.Text(), nullable=True),
        sa.Column("profile_text", sa.Text(), nullable=True),
        sa.Column("profile_refreshed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("embedding_vec", Vector(dimensions), nullable=True),
        sa.Column("fact_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("importance_score", sa.Float(), nullable=True),
        sa.Column("is_active", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("summary_refreshed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("agent_id", "canonical_key", name="uq_memory_entities_agent_key"),
    )
    op.create_index(
        "ix_memory_entities_agent_importance", "memory_entities", ["agent_id", "importance_score"], unique=False
    )
    op.create_index("ix_memory_entities_agent_last_seen", "memory_entities", ["agent_id", "last_seen_at"], unique=False)
    op.create_table(
        "memory_entity_aliases",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("alias", sa.String(length=256), nullable=False),
        sa.Column("canonical_entity_key", sa.String(length=256), nullable=False),
        sa.Column("canonical_entity_type", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("agent_id", "alias", name="uq_memory_entity_aliases_agent_alias"),
    )
    op.create_index(
        "ix_memory_entity_aliases_agent_canonical",
        "memory_entity_aliases",
        ["agent_id", "canonical_entity_key"],
        unique=False,
    )
    op.create_table(
        "memory_meta_observations",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("observation_type", sa.String(length=32), nullable=False),
        sa.Column("title", sa.String(length=256), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column(
            "supporting_event_ids",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "supporting_fact_ids",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column("confidence", sa.Float(), server_default=sa.text("0.7"), nullable=False),
        sa.Column("importance", sa.Float(), server_default=sa.text("0.5"), nullable=False),
        sa.Column("times_reinforced", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("is_active", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("embedding_vec", Vector(dimensions), nullable=True),
        sa.Column("first_detected_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("last_reinforced_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_meta_observations_agent_type", "memory_meta_observations", ["agent_id", "observation_type"], unique=False
    )
    op.create_table(
        "schema_info",
        sa.Column("id", sa.SmallInteger(), nullable=False),
        sa.Column("embedding_dimensions", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("id = 1", name="schema_info_single_row"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.execute(sa.text("INSERT INTO schema_info (id, embedding_dimensions) VALUES (1, :d)").bindparams(d=dimensions))
    op.create_table(
        "session_observations",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.String(length=256), server_default=sa.text("'default'"), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("topic", sa.String(length=64), nullable=True),
        sa.Column(
            "entities_mentioned",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("referenced_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("relative_offset", sa.String(length=64), nullable=True),
        sa.Column(
            "source_message_ids",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column("is_active", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("merged_into_id", sa.Uuid(), nullable=True),
        sa.Column("emotion_label", sa.String(length=32), nullable=True),
        sa.Column("embedding_vec", Vector(dimensions), nullable=True),
        sa.ForeignKeyConstraint(["merged_into_id"], ["session_observations.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_session_observations_agent_session", "session_observations", ["agent_id", "session_id"], unique=False
    )
    op.create_table(
        "memory_events",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("speaker", sa.String(length=256), nullable=False),
        sa.Column("session_id", sa.String(length=256), server_default=sa.text("'default'"), nullable=False),
        sa.Column("message_id", sa.String(length=256), nullable=True),
        sa.Column("import_id", sa.Uuid(), nullable=True),
        sa.Column("source", sa.String(length=64), server_default=sa.text("'api'"), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("importance", sa.Float(), server_default=sa.text("0.5"), nullable=False),
        sa.Column("embedding_vec", Vector(dimensions), nullable=True),
        sa.Column("trace_json", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("emotion_primary", sa.String(length=32), nullable=True),
        sa.Column("emotion_intensity", sa.Float(), nullable=True),
        sa.Column("energy_level", sa.String(length=16), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["import_id"], ["imports.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("agent_id", "message_id", name="uq_memory_events_agent_message"),
    )
    op.create_index("ix_memory_events_agent_occurred", "memory_events", ["agent_id", "occurred_at"], unique=False)
    op.create_index("ix_memory_events_agent_session", "memory_events", ["agent_id", "session_id"], unique=False)
    op.create_index(
        "ix_memory_events_embedding_hnsw",
        "memory_events",
        ["embedding_vec"],
        unique=False,
        postgresql_using="hnsw",
        postgresql_ops={"embedding_vec": "vector_cosine_ops"},
    )
    op.create_index("ix_memory_events_import", "memory_events", ["import_id"], unique=False)
    op.create_table(
        "memory_facts",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("entity_type", sa.String(length=64), nullable=False),
        sa.Column("entity_key", sa.String(length=256), nullable=False),
        sa.Column("entity_name", sa.String(length=256), nullable=True),
        sa.Column("attribute_key", sa.String(length=128), nullable=True),
        sa.Column("fact_text", sa.Text(), nullable=False),
        sa.Column("category", sa.String(length=50), nullable=True),
        sa.Column("speaker", sa.String(length=256), nullable=True),
        sa.Column("confidence", sa.Float(), server_default=sa.text("0.8"), nullable=False),
        sa.Column("importance", sa.Float(), server_default=sa.text("0.5"), nullable=False),
        sa.Column("is_sensitive", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("valid_from", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("valid_to", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ttl_days", sa.Integer(), nullable=True),
        sa.Column("source_event_id", sa.Uuid(), nullable=True),
        sa.Column("supersedes_fact_id", sa.Uuid(), nullable=True),
        sa.Column("embedding_vec", Vector(dimensions), nullable=True),
        sa.Column("vitality_score", sa.Float(), nullable=True),
        sa.Column("is_stale", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("cluster_id", sa.Uuid(), nullable=True),
        sa.Column("value_json", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("needs_confirmation", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("last_confirmed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reinforcement_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("times_retrieved", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_retrieved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("user_correction_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("source_context", sa.String(length=512), nullable=True),
        sa.Column("agent_annotation", sa.Text(), nullable=True),
        sa.Column(
            "search_vector",
            postgresql.TSVECTOR(),
            sa.Computed("to_tsvector('simple'::regconfig, fact_text)", persisted=True),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("ingested_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("invalidated_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["cluster_id"], ["memory_clusters.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["source_event_id"], ["memory_events.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["supersedes_fact_id"], ["memory_facts.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_memory_facts_agent_active_created",
        "memory_facts",
        ["agent_id", "created_at"],
        unique=False,
        postgresql_where=sa.text("valid_to IS NULL"),
    )
    op.create_index("ix_memory_facts_agent_attribute", "memory_facts", ["agent_id", "attribute_key"], unique=False)
    op.create_index("ix_memory_facts_agent_entity", "memory_facts", ["agent_id", "entity_key"], unique=False)
    op.create_index("ix_memory_facts_cluster", "memory_facts", ["cluster_id"], unique=False)
    op.create_index(
        "ix_memory_facts_embedding_hnsw",
        "memory_facts",
        ["embedding_vec"],
        unique=False,
        postgresql_using="hnsw",
        postgresql_ops={"embedding_vec": "vector_cosine_ops"},
    )
    op.create_index(
        "ix_memory_facts_search_vector", "memory_facts", ["search_vector"], unique=False, postgresql_using="gin"
    )
    op.create_index("ix_memory_facts_source_event", "memory_facts", ["source_event_id"], unique=False)
    op.create_index("ix_memory_facts_supersedes", "memory_facts", ["supersedes_fact_id"], unique=False)
    op.create_table(
        "memory_intentions",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("trigger_type", sa.String(length=16), nullable=False),
        sa.Column("trigger_condition", sa.Text(), nullable=False),
        sa.Column("intended_action", sa.Text(), nullable=False),
        sa.Column("due_date", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.String(length=16), server_default=sa.text("'pending'"), nullable=False),
        sa.Column("trigger_embedding_vec", Vector(dimensions), nullable=True),
        sa.Column("source_event_id", sa.Uuid(), nullable=True),
        sa.Column("confidence", sa.Float(), nullable=True),
        sa.Column("source_context", sa.String(length=32), nullable=True),
        sa.Column("outcome_note", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("triggered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("fulfilled_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["source_event_id"], ["memory_events.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_memory_intentions_agent_status", "memory_intentions", ["agent_id", "status"], unique=False)
    op.create_table(
        "pipeline_runs",
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("import_id", sa.Uuid(), nullable=True),
        sa.Column("status", sa.String(length=16), server_default=sa.text("'received'"), nullable=False),
        sa.Column("stage", sa.String(length=32), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("sweeps", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column(
            "options", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column(
            "llm_cache",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "token_usage",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "timings", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("result", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["event_id"], ["memory_events.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["import_id"], ["imports.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("event_id"),
    )
    op.create_index("ix_pipeline_runs_agent_created", "pipeline_runs", ["agent_id", "created_at"], unique=False)
    op.create_index("ix_pipeline_runs_import_status", "pipeline_runs", ["import_id", "status"], unique=False)
    op.create_index("ix_pipeline_runs_status_updated", "pipeline_runs", ["status", "updated_at"], unique=False)
    op.create_table(
        "pipeline_stage_outputs",
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("stage", sa.String(length=16), nullable=False),
        sa.Column("output", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["event_id"], ["pipeline_runs.event_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("event_id", "stage"),
    )
    op.create_table(
        "memory_entity_relationships",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("source_entity_key", sa.String(length=256), nullable=False),
        sa.Column("target_entity_key", sa.String(length=256), nullable=False),
        sa.Column("rel_type", sa.String(length=64), nullable=False),
        sa.Column("strength", sa.Float(), server_default=sa.text("0.8"), nullable=False),
        sa.Column("evidence_fact_id", sa.Uuid(), nullable=True),
        sa.Column("provenance", sa.String(length=16), server_default=sa.text("'llm'"), nullable=False),
        sa.Column("valid_from", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("valid_to", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("invalidated_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["evidence_fact_id"], ["memory_facts.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint(
            "agent_id", "source_entity_key", "target_entity_key", "rel_type", name="uq_memory_relationships_edge"
        ),
    )
    op.create_index(
        "ix_memory_relationships_agent_source",
        "memory_entity_relationships",
        ["agent_id", "source_entity_key"],
        unique=False,
    )
    op.create_index(
        "ix_memory_relationships_agent_target",
        "memory_entity_relationships",
        ["agent_id", "target_entity_key"],
        unique=False,
    )
    op.create_index(
        "ix_memory_relationships_evidence", "memory_entity_relationships", ["evidence_fact_id"], unique=False
    )
    op.create_table(
        "memory_fact_entity_links",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("fact_id", sa.Uuid(), nullable=False),
        sa.Column("entity_key", sa.String(length=256), nullable=False),
        sa.Column("is_primary", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["fact_id"], ["memory_facts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("fact_id", "entity_key", name="uq_fact_entity_links_fact_entity"),
    )
    op.create_index(
        "ix_fact_entity_links_agent_entity", "memory_fact_entity_links", ["agent_id", "entity_key"], unique=False
    )
    op.create_index("ix_fact_entity_links_fact", "memory_fact_entity_links", ["fact_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_fact_entity_links_fact", table_name="memory_fact_entity_links")
    op.drop_index("ix_fact_entity_links_agent_entity", table_name="memory_fact_entity_links")
    op.drop_table("memory_fact_entity_links")
    op.drop_index("ix_memory_relationships_evidence", table_name="memory_entity_relationships")
    op.drop_index("ix_memory_relationships_agent_target", table_name="memory_entity_relationships")
    op.drop_index("ix_memory_relationships_agent_source", table_name="memory_entity_relationships")
    op.drop_table("memory_entity_relationships")
    op.drop_index("ix_pipeline_runs_status_updated", table_name="pipeline_runs")
    op.drop_index("ix_pipeline_runs_import_status", table_name="pipeline_runs")
    op.drop_index("ix_pipeline_runs_agent_created", table_name="pipeline_runs")
    op.drop_table("pipeline_stage_outputs")
    op.drop_table("pipeline_runs")
    op.drop_index("ix_memory_intentions_agent_status", table_name="memory_intentions")
    op.drop_table("memory_intentions")
    op.drop_index("ix_memory_facts_supersedes", table_name="memory_facts")
    op.drop_index("ix_memory_facts_source_event", table_name="memory_facts")
    op.drop_index("ix_memory_facts_search_vector", table_name="memory_facts", postgresql_using="gin")
    op.drop_index(
        "ix_memory_facts_embedding_hnsw",
        table_name="memory_facts",
        postgresql_using="hnsw",
        postgresql_ops={"embedding_vec": "vector_cosine_ops"},
    )
    op.drop_index("ix_memory_facts_cluster", table_name="memory_facts")
    op.drop_index("ix_memory_facts_agent_entity", table_name="memory_facts")
    op.drop_index("ix_memory_facts_agent_attribute", table_name="memory_facts")
    op.drop_index(
        "ix_memory_facts_agent_active_created", table_name="memory_facts", postgresql_where=sa.text("valid_to IS NULL")
    )
    op.drop_table("memory_facts")
    op.drop_index("ix_memory_events_import", table_name="memory_events")
    op.drop_index(
        "ix_memory_events_embedding_hnsw",
        table_name="memory_events",
        postgresql_using="hnsw",
        postgresql_ops={"embedding_vec": "vector_cosine_ops"},
    )
    op.drop_index("ix_memory_events_agent_session", table_name="memory_events")
    op.drop_index("ix_memory_events_agent_occurred", table_name="memory_events")
    op.drop_table("memory_events")
    op.drop_index("ix_session_observations_agent_session", table_name="session_observations")
    op.drop_table("session_observations")
    op.drop_table("schema_info")
    op.drop_index("ix_meta_observations_agent_type", table_name="memory_meta_observations")
    op.drop_table("memory_meta_observations")
    op.drop_index("ix_memory_entity_aliases_agent_canonical", table_name="memory_entity_aliases")
    op.drop_table("memory_entity_aliases")
    op.drop_index("ix_memory_entities_agent_last_seen", table_name="memory_entities")
    op.drop_index("ix_memory_entities_agent_importance", table_name="memory_entities")
    op.drop_table("memory_entities")
    op.drop_index("ix_memory_clusters_agent_entity", table_name="memory_clusters")
    op.drop_table("memory_clusters")
    op.drop_table("memory_attribute_registry")
    op.drop_index("ix_job_runs_status", table_name="maintenance_job_runs")
    op.drop_index("ix_job_runs_agent_job_created", table_name="maintenance_job_runs")
    op.drop_table("maintenance_job_runs")
    op.drop_index("ix_imports_agent_created", table_name="imports")
    op.drop_table("imports")
