"""Retrieval counters in a table of their own: ``memory_fact_usage``.

``times_retrieved`` and ``last_retrieved_at`` were columns of ``memory_facts``. A fact row
carries its embedding (~2 KB at 384 dimensions), so its page seldom has room for a new row
version: most counter updates were not HOT and inserted an entry into each of the table's
indexes, both HNSW graphs included. Counting ~1,000 retrieved facts cost 1-4 s of PostgreSQL
time on the 1M-fact benchmark, the largest CPU cost of the read path under load.

``memory_fact_usage`` holds one narrow row (under 100 bytes) per fact that was ever retrieved. Its
only index is the primary key on ``fact_id``, which an update never changes, and its pages are
filled to half (``fillfactor = 50``) so the new version of an updated row finds room on the
same page: the update is HOT and writes no index entry at all. ``agent_id`` is copied from the
fact so the table is scoped like every other memory table (the writer joins on both); rows go
with their fact (``ON DELETE CASCADE``).

Upgrade copies the counters of facts that were ever retrieved, then drops the two columns
(a catalog change: ``memory_facts`` is not rewritten). The copy reads the whole of
``memory_facts`` and, like the rest of the migration, blocks writes of facts (not reads) until
it commits; the last step blocks reads too, for an instant (docs/production.md). Downgrade puts
the columns back and copies the counters into them.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30 11:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # fillfactor 50: half of each page is left free, so the new version of an updated row
    # fits on its own page and the update stays HOT (no index entry).
    op.execute(
        """
        CREATE TABLE memory_fact_usage (
            fact_id uuid PRIMARY KEY REFERENCES memory_facts(id) ON DELETE CASCADE,
            agent_id text NOT NULL,
            times_retrieved integer NOT NULL DEFAULT 0,
            last_retrieved_at timestamptz
        ) WITH (fillfactor = 50)
        """
    )
    op.execute(
        """
        INSERT INTO memory_fact_usage (fact_id, agent_id, times_retrieved, last_retrieved_at)
        SELECT id, agent_id, times_retrieved, last_retrieved_at FROM memory_facts
        WHERE times_retrieved > 0 OR last_retrieved_at IS NOT NULL
        """
    )
    op.execute("ALTER TABLE memory_facts DROP COLUMN times_retrieved, DROP COLUMN last_retrieved_at")


def downgrade() -> None:
    # A constant default: a catalog change, no table rewrite (PostgreSQL 11+).
    op.execute(
        "ALTER TABLE memory_facts ADD COLUMN times_retrieved integer NOT NULL DEFAULT 0, "
        "ADD COLUMN last_retrieved_at timestamptz"
    )
    op.execute(
        """
        UPDATE memory_facts f
        SET times_retrieved = u.times_retrieved, last_retrieved_at = u.last_retrieved_at
        FROM memory_fact_usage u
        WHERE u.fact_id = f.id
        """
    )
    op.execute("DROP TABLE memory_fact_usage")
