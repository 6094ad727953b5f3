"""LLM usage accounting: ``llm_usage``, calls and tokens per agent, UTC day, skill and model.

One row per (agent, day, skill, model), its counters added to by ``INSERT ... ON CONFLICT DO
UPDATE`` (:mod:`memory_core.usage`): the write pipeline in the statement that completes a stage,
maintenance jobs with their run's end, the reranker from a background flush of the API.

The primary key leads with ``agent_id`` (an agent's usage over a range of days is one index
range, and erasure finds the rows); ``ix_llm_usage_day`` serves the operator totals of
``/metrics``, which sum only the last two days at every reading. Pages are filled to 70 % so an
update of the counters (no indexed column changes) stays HOT. Downgrade drops the table.

Revision ID: 0018
Revises: 0017
Create Date: 2027-01-20 10:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE llm_usage (
            agent_id text NOT NULL,
            day date NOT NULL,
            skill text NOT NULL,
            model text NOT NULL DEFAULT '',
            calls bigint NOT NULL DEFAULT 0,
            failures bigint NOT NULL DEFAULT 0,
            input_tokens bigint NOT NULL DEFAULT 0,
            output_tokens bigint NOT NULL DEFAULT 0,
            cached_input_tokens bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (agent_id, day, skill, model)
        ) WITH (fillfactor = 70)
        """
    )
    op.execute("CREATE INDEX ix_llm_usage_day ON llm_usage (day)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS llm_usage")
