"""An agent's active facts in importance order: ``ix_memory_facts_agent_importance``.

Two retrieval searches take "the agent's most important active facts that pass a filter": the
broad-query signal ("tell me everything"), and the aggregation half of the keyword signal ("who
are my friends?" -> facts of ``person:%`` entities). Without an index in that order PostgreSQL
read every active fact of the agent and sorted them: ~1.5 s for an agent of 100,000 facts. With
``(agent_id, importance DESC, valid_from DESC, id) WHERE valid_to IS NULL`` it reads the index in
order and stops after the first few dozen rows that pass.

``importance`` changes only when the importance job rescores an agent, so the index costs the
write path one more entry per new fact and little else.

``CREATE INDEX`` blocks writes to ``memory_facts`` (not reads) while it is built; on a large
table build it beforehand with ``CONCURRENTLY`` (docs/production.md): the migration then finds
it and skips the build.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 07:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# docs/production.md gives the CONCURRENTLY form of this statement, for large tables.
_INDEX_SQL = (
    "CREATE INDEX IF NOT EXISTS ix_memory_facts_agent_importance "
    "ON memory_facts (agent_id, importance DESC, valid_from DESC, id) WHERE valid_to IS NULL"
)


def upgrade() -> None:
    op.execute(_INDEX_SQL)


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_agent_importance")
