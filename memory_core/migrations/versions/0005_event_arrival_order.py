"""Arrival order of events: ``memory_events.seq``, and the index that finds a message's reply.

Messages of one session often share an ``occurred_at`` (an import stamps a whole session with
its date), event ids are random UUIDs and ``created_at`` is one value per transaction, so nothing
said which of two such messages came first. ``seq`` does: a ``bigint`` filled from the sequence
``memory_events_seq`` when a row is inserted. A multi-row ``INSERT ... SELECT ... ORDER BY``
takes ``nextval`` in row order, so the intake (which inserts a request's messages in the order
the client sent them) makes ``seq`` follow that order. Events are listed by
``occurred_at, seq NULLS FIRST, id``.

New rows only, on purpose: the column is added without a default (a catalog change, no table
rewrite) and the default is set afterwards, which applies to later inserts only. Adding the
column *with* a volatile default such as ``nextval`` would rewrite the whole table under an
exclusive lock. Existing rows keep ``seq`` NULL, so they order among themselves as before
(``occurred_at``, then ``id``) and before any newer row with the same ``occurred_at``; their order
cannot be recovered after the fact anyway.

The index ``(agent_id, session_id, occurred_at, seq NULLS FIRST, id)``, in listing order, serves
"the next message of this session" (retrieval's reply context: a LATERAL lookup with ``LIMIT 1``)
and session listings.
``CREATE INDEX`` blocks writes to the table (not reads) while it is built; on a very large table,
add the column and create the index beforehand (``CONCURRENTLY``, as docs/production.md says):
every step here is ``IF NOT EXISTS``, so the migration then only sets the default.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 06:50:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# docs/production.md gives the CONCURRENTLY form of this statement, for large tables.
_NEXT_INDEX_SQL = (
    "CREATE INDEX IF NOT EXISTS ix_memory_events_agent_session_order "
    "ON memory_events (agent_id, session_id, occurred_at, seq NULLS FIRST, id)"
)


def upgrade() -> None:
    # IF NOT EXISTS: an operator may have added the column (and built the index CONCURRENTLY)
    # ahead of the upgrade, on a large table (docs/production.md).
    op.execute("CREATE SEQUENCE IF NOT EXISTS memory_events_seq AS bigint")
    op.execute("ALTER TABLE memory_events ADD COLUMN IF NOT EXISTS seq bigint")
    # Set after the column exists: a default given with ADD COLUMN would be applied to every
    # existing row (nextval is volatile), rewriting the table.
    op.execute("ALTER TABLE memory_events ALTER COLUMN seq SET DEFAULT nextval('memory_events_seq')")
    # Dropping the column (downgrade) drops the sequence with it.
    op.execute("ALTER SEQUENCE memory_events_seq OWNED BY memory_events.seq")
    op.execute(_NEXT_INDEX_SQL)


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memory_events_agent_session_order")
    op.drop_column("memory_events", "seq")
    op.execute("DROP SEQUENCE IF EXISTS memory_events_seq")
