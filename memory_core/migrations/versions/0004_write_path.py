"""Reserved slot, no schema change: the write-path throughput work needed none. Kept so
databases already at this revision stay valid.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 03:50:00
"""

from collections.abc import Sequence

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
