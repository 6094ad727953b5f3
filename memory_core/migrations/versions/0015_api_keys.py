"""API keys scoped to a tenant's agents and permissions (``api_keys``); only their SHA-256 is stored.

Until now every key of ``ARANDU_API_KEYS`` could act for every agent. Those keys stay, as the
operator's bootstrap keys; the keys of this table act only for the agents they name (a list,
or an ``agent_id`` prefix such as ``acme:``) with their permissions (``read``, ``write``,
``admin``), until they expire or are revoked. A key's name is unique among the keys not revoked.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Uuid(), primary_key=True, server_default=sa.text("gen_random_uuid()")),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("key_hint", sa.String(16), nullable=False),
        sa.Column("agent_ids", postgresql.ARRAY(sa.Text()), nullable=True),
        sa.Column("agent_prefix", sa.String(128), nullable=True),
        sa.Column("permissions", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("rate_limit_per_s", sa.Float(), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("(agent_prefix IS NULL) <> (agent_ids IS NULL)", name="api_keys_agents_by_list_or_prefix"),
    )
    op.create_index(
        "uq_api_keys_active_name", "api_keys", ["name"], unique=True, postgresql_where=sa.text("revoked_at IS NULL")
    )


def downgrade() -> None:
    op.drop_table("api_keys")
