"""Maintenance jobs: the per-(agent, job) run guard and what the jobs store.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 03:50:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # --- wiring ---
    # At most one queued or running run per (agent, job): Beat, the API and a second Beat
    # cannot start overlapping runs, whatever the race. Finished runs are history and repeat.
    op.create_index(
        "uq_job_runs_active",
        "maintenance_job_runs",
        ["agent_id", "job"],
        unique=True,
        postgresql_where=sa.text("status IN ('queued', 'running')"),
    )

    # --- jobs-B ---
    # Clustering: what a cluster's summary was made from (skip the LLM when it is unchanged),
    # and one automatic cluster per (agent, entity) whatever the race.
    op.add_column("memory_clusters", sa.Column("facts_fingerprint", sa.String(64), nullable=True))
    op.create_index(
        "uq_memory_clusters_auto_entity",
        "memory_clusters",
        ["agent_id", "entity_type", "entity_key"],
        unique=True,
        postgresql_where=sa.text("cluster_type = 'auto'"),
    )
    # Communities: the members of a community observation (cluster ids or entity keys) and a
    # fingerprint of what its text was made from; entities point at their entity community.
    op.add_column(
        "memory_meta_observations",
        sa.Column(
            "members", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'[]'::jsonb"), nullable=False
        ),
    )
    op.add_column("memory_meta_observations", sa.Column("fingerprint", sa.String(64), nullable=True))
    op.add_column("memory_entities", sa.Column("community_id", sa.Uuid(), nullable=True))
    op.create_foreign_key(
        "fk_memory_entities_community",
        "memory_entities",
        "memory_meta_observations",
        ["community_id"],
        ["id"],
        ondelete="SET NULL",
    )
    op.create_index("ix_memory_entities_agent_community", "memory_entities", ["agent_id", "community_id"])


def downgrade() -> None:
    # --- jobs-B ---
    op.drop_index("ix_memory_entities_agent_community", table_name="memory_entities")
    op.drop_constraint("fk_memory_entities_community", "memory_entities", type_="foreignkey")
    op.drop_column("memory_entities", "community_id")
    op.drop_column("memory_meta_observations", "fingerprint")
    op.drop_column("memory_meta_observations", "members")
    op.drop_index("uq_memory_clusters_auto_entity", table_name="memory_clusters")
    op.drop_column("memory_clusters", "facts_fingerprint")
    # --- wiring ---
    op.drop_index("uq_job_runs_active", table_name="maintenance_job_runs")
