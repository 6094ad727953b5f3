"""Drop the table-wide HNSW index of ``memory_facts``: no search can use it well, every write paid for it.

``ix_memory_facts_embedding_hnsw`` indexed every agent's fact vectors in one graph. pgvector 0.6
filters an HNSW scan by agent only after the scan, so the index could serve an agent's search only
when that agent owned most of the table; every other agent was already searched exactly through
its ``(agent_id, ...)`` b-tree, and every agent past ``retrieval_agent_index_min_facts`` facts
through a partial HNSW index of its own (``memory_core.read.agent_index``). What the index did
cost: an insertion into the graph for every fact written, about 85% of the fact ``INSERT`` in the
ingest benchmark's statement log (0.22 -> 0.04 ms per row measured on a small table; more on a
large one) and a quarter of PostgreSQL's CPU per message; 1.8 GiB and 7.5 minutes of build on the
1M-fact retrieval benchmark. It was also a hazard: a nearest-facts query of one agent planned onto
it would quietly return too few rows.

Dropping takes an ``ACCESS EXCLUSIVE`` lock on ``memory_facts`` for an instant (no rewrite).
Downgrade rebuilds the index, which takes a while on a large table.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 05:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_embedding_hnsw")


def downgrade() -> None:
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_memory_facts_embedding_hnsw ON memory_facts "
        "USING hnsw (embedding_vec vector_cosine_ops)"
    )
