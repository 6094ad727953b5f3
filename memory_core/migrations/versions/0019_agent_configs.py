"""Per-agent memory configuration: ``agent_configs``, one row of MemoryConfig overrides per agent.

``PUT /v1/agents/{agent_id}/config`` stores the agent's overrides (validated against the
service's MemoryConfig) as a JSON object; the write pipeline, retrieval and every maintenance
job of the agent apply them on top of the service config (:mod:`memory_core.agent_config`).
Each reader finds the row by its primary key, alone or joined to what it reads anyway (a
chunk's runs, a retrieval's first round trip). Erasure of the agent removes it (it has an
``agent_id`` column). Downgrade drops the table.

Revision ID: 0019
Revises: 0018
Create Date: 2027-01-24 10:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE agent_configs (
            agent_id text PRIMARY KEY,
            overrides jsonb NOT NULL DEFAULT '{}'::jsonb
                CONSTRAINT agent_configs_overrides_object CHECK (jsonb_typeof(overrides) = 'object'),
            updated_at timestamptz NOT NULL DEFAULT now()
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS agent_configs")
