"""Re-processing an agent's memory from its event log: ``agent_reprocesses``.

One row per re-process of an agent (:mod:`memory_core.maintenance.reprocess`): its status
(``running``, then ``done`` or ``cancelled``), how many events it re-derived and how they ended,
how many catch-up rounds mirrored messages that arrived meanwhile, and how many messages it
re-drove at the switch. The partial unique index allows one running re-process per agent (the
API's 409). The shadow memory it derives lives under the agent id ``~reprocess:<id>`` in the
ordinary tables, so nothing else in the schema changes. Downgrade drops the table.

Revision ID: 0021
Revises: 0018
Create Date: 2027-02-01 10:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE agent_reprocesses (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            agent_id text NOT NULL,
            status varchar(16) NOT NULL DEFAULT 'running',
            total integer NOT NULL DEFAULT 0,
            done integer NOT NULL DEFAULT 0,
            failed integer NOT NULL DEFAULT 0,
            requeued integer NOT NULL DEFAULT 0,
            catch_up_rounds integer NOT NULL DEFAULT 0,
            error text,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            finished_at timestamptz
        )
        """
    )
    op.execute("CREATE INDEX ix_agent_reprocesses_agent_created ON agent_reprocesses (agent_id, created_at)")
    op.execute(
        "CREATE UNIQUE INDEX uq_agent_reprocesses_running ON agent_reprocesses (agent_id) WHERE status = 'running'"
    )
    op.execute("CREATE INDEX ix_agent_reprocesses_running ON agent_reprocesses (updated_at) WHERE status = 'running'")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS agent_reprocesses")
