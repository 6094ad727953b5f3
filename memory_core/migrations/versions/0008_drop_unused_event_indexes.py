"""Drop two indexes of ``memory_events`` that no query reads: every message paid for them.

* ``ix_memory_events_embedding_hnsw``: no statement orders events by vector distance. Relevant
  conversations score an agent's most recent messages (``ix_memory_events_agent_occurred``), and
  a table-wide HNSW index could not serve one agent's search anyway (pgvector 0.6 filters by
  agent only after the scan). Yet the write path's ``UPDATE`` that stores each message's
  embedding inserted it into the HNSW graph: the most expensive statement per message in the
  ingest benchmark's statement log, and 20-40 s of the 1M-fact retrieval benchmark's load.
* ``ix_memory_events_agent_session`` ``(agent_id, session_id)``: a prefix of
  ``ix_memory_events_agent_session_order`` ``(agent_id, session_id, occurred_at, seq, id)``
  (migration 0005), which serves every query it served.

Downgrade recreates both (the HNSW build takes a while on a large table).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30 12:15:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memory_events_embedding_hnsw")
    op.execute("DROP INDEX IF EXISTS ix_memory_events_agent_session")


def downgrade() -> None:
    op.execute("CREATE INDEX IF NOT EXISTS ix_memory_events_agent_session ON memory_events (agent_id, session_id)")
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_memory_events_embedding_hnsw ON memory_events "
        "USING hnsw (embedding_vec vector_cosine_ops)"
    )
