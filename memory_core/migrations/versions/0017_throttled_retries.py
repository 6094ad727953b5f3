"""``pipeline_runs.throttled_retries``: rate-limited retries counted apart from failed attempts.

A provider that answers 429 with ``Retry-After`` says when to try again; such a refusal is not
a failure of the message, yet it counted as one of its ``pipeline_max_attempts`` (6), and under
a provider refusing 30% of calls a message refused six times in a row failed for good (1 run in
3 of 600 messages). Those refusals now count here, bounded by ``pipeline_max_throttled_retries``,
and ``attempts`` keeps its budget for real failures.

Adding a column with a constant default rewrites nothing (PostgreSQL 11+). Downgrade drops it.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07 05:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the counter."""
    op.add_column(
        "pipeline_runs", sa.Column("throttled_retries", sa.Integer(), server_default=sa.text("0"), nullable=False)
    )


def downgrade() -> None:
    """Drop the counter."""
    op.drop_column("pipeline_runs", "throttled_retries")
