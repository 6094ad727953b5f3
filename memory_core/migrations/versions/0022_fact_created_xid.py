"""The transaction that wrote a fact: ``memory_facts.created_xid``.

Informed extraction records the database's snapshot once it has read memory (the extract
output's ``known_snapshot``); reconciliation leaves the candidates that snapshot could not see to
upsert's re-check, without a skill call. ``created_at`` cannot tell them: it is the writing
transaction's start, and an apply transaction that began before the read (waiting for the
agent's lock, or applying other agents of its chunk) commits after it with an older stamp. The
writer's transaction id, compared with the snapshot, tells exactly whether the read saw the row.

Added without a default first, so existing rows are not rewritten (they stay NULL: written before
any snapshot that reads this column); the default then applies to new rows only.
``pg_current_xact_id()`` is the top-level transaction's id, also inside a savepoint; it is stored
as a ``bigint`` (an ``xid8`` is 64 bits without a sign and never reaches 2^63 in practice), a type
every client and SQLAlchemy's reflection know. Downgrade drops the column.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07 14:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE memory_facts ADD COLUMN created_xid bigint")
    op.execute(
        "ALTER TABLE memory_facts ALTER COLUMN created_xid "
        "SET DEFAULT CAST(CAST(pg_current_xact_id() AS text) AS bigint)"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE memory_facts DROP COLUMN IF EXISTS created_xid")
