"""Procedural memory: ``memory_directives``, the directive-block cache and pending operations.

- ``memory_directives``: behavioural directives learned from conversations (seeds/003 "Memória
  Procedural"), in English, with their base ``confidence``, reinforcement count and the time
  they were last taught (the decay of ``effective_confidence`` runs from it). A contradicting
  directive closes the old one (``is_active`` false, ``superseded_by_id``); one active
  directive per agent and comparison key (``text_key``), so two messages teaching the same
  thing at once reinforce one row. The embedding is the contradiction check's pre-filter.
- ``memory_directive_blocks``: the optimised block (persona + directives) cached per agent
  under a key hashed from the directive ids and reinforcement counts (and the persona), so any
  change of the directives misses the cache by construction; rows older than
  ``directive_cache_ttl_minutes`` are not used. In PostgreSQL, so every API process shares it.
- ``memory_pending_operations``: one pending destructive operation per agent awaiting the
  user's confirmation (seeds' save/get/clear_pending), with its expiry
  (``pending_operation_ttl_minutes``); shared by all processes rather than per process.
- ``memory_intentions`` and ``session_observations`` are dropped: the seeds document only their
  columns (intentions "experimental", observations of an "observer" the SDK's public API never
  exposes), no code path ever wrote them, and procedural memory does not need them.
  Downgrade recreates them empty.

Revision ID: 0020
Revises: 0018
Create Date: 2027-01-28 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _dimensions() -> int:
    value = op.get_bind().execute(sa.text("SELECT embedding_dimensions FROM schema_info WHERE id = 1")).scalar()
    return int(value)


def upgrade() -> None:
    dimensions = _dimensions()
    op.execute(
        f"""
        CREATE TABLE memory_directives (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            agent_id text NOT NULL,
            text text NOT NULL,
            text_key text NOT NULL,
            confidence double precision NOT NULL DEFAULT 0.8,
            times_reinforced integer NOT NULL DEFAULT 0,
            is_active boolean NOT NULL DEFAULT true,
            source_event_id uuid REFERENCES memory_events (id) ON DELETE SET NULL,
            superseded_by_id uuid REFERENCES memory_directives (id) ON DELETE SET NULL,
            supersession_reason text,
            embedding_vec vector({dimensions}),
            learned_at timestamptz NOT NULL DEFAULT now(),
            last_reinforced_at timestamptz NOT NULL DEFAULT now(),
            invalidated_at timestamptz,
            created_at timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("CREATE INDEX ix_memory_directives_agent ON memory_directives (agent_id, is_active)")
    op.execute(
        "CREATE UNIQUE INDEX uq_memory_directives_active_key ON memory_directives (agent_id, text_key) WHERE is_active"
    )
    op.execute(
        """
        CREATE TABLE memory_directive_blocks (
            agent_id text NOT NULL,
            cache_key text NOT NULL,
            text text NOT NULL,
            directive_count integer NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (agent_id, cache_key)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE memory_pending_operations (
            agent_id text PRIMARY KEY,
            kind text NOT NULL,
            payload jsonb NOT NULL DEFAULT '{}'::jsonb,
            confirmation_text text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            expires_at timestamptz NOT NULL
        )
        """
    )
    op.execute("DROP TABLE IF EXISTS memory_intentions")
    op.execute("DROP TABLE IF EXISTS session_observations")


def downgrade() -> None:
    dimensions = _dimensions()
    op.execute("DROP TABLE IF EXISTS memory_pending_operations")
    op.execute("DROP TABLE IF EXISTS memory_directive_blocks")
    op.execute("DROP TABLE IF EXISTS memory_directives")
    op.execute(
        f"""
        CREATE TABLE session_observations (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            agent_id text NOT NULL,
            session_id varchar(256) NOT NULL DEFAULT 'default',
            content text NOT NULL,
            topic varchar(64),
            entities_mentioned jsonb NOT NULL DEFAULT '[]'::jsonb,
            created_at timestamptz NOT NULL DEFAULT now(),
            referenced_at timestamptz,
            relative_offset varchar(64),
            source_message_ids jsonb NOT NULL DEFAULT '[]'::jsonb,
            is_active boolean NOT NULL DEFAULT true,
            merged_into_id uuid REFERENCES session_observations (id) ON DELETE SET NULL,
            emotion_label varchar(32),
            embedding_vec vector({dimensions})
        )
        """
    )
    op.execute("CREATE INDEX ix_session_observations_agent_session ON session_observations (agent_id, session_id)")
    op.execute(
        f"""
        CREATE TABLE memory_intentions (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            agent_id text NOT NULL,
            trigger_type varchar(16) NOT NULL,
            trigger_condition text NOT NULL,
            intended_action text NOT NULL,
            due_date timestamptz,
            status varchar(16) NOT NULL DEFAULT 'pending',
            trigger_embedding_vec vector({dimensions}),
            source_event_id uuid REFERENCES memory_events (id) ON DELETE SET NULL,
            confidence double precision,
            source_context varchar(32),
            outcome_note text,
            created_at timestamptz NOT NULL DEFAULT now(),
            triggered_at timestamptz,
            fulfilled_at timestamptz
        )
        """
    )
    op.execute("CREATE INDEX ix_memory_intentions_agent_status ON memory_intentions (agent_id, status)")
