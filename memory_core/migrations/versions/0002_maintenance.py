"""Maintenance jobs: the per-(agent, job) run guard and what the jobs store.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 03:50:00
"""

from collections.abc import Sequence

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
