"""Entity lookups of the query resolution by expression: folded display name, key slug, key type.

Every retrieval resolves the query's words against the agent's entities in one statement
(memory_core.read.entities): by display name, accent-folded and lower-cased; by the slug of the
canonical key (``person:ana_silva`` -> ``ana_silva``); and, for aggregation questions ("my
friends"), whether the agent has any entity of a type (``person:...``). Those were expressions
over every entity of the agent: a scan of its ~5,000 entities and ~9 ms of a retrieval for the
benchmark's 100,000-fact agent. Indexes on the same expressions make each a few index probes.

They are not partial (``WHERE is_active`` would fit the queries): the planner keeps statistics
on the expressions of whole-table indexes only, and without them it guessed a scan cheaper.

The folded-name expression must stay identical, character for character, to the one the read
path writes (``_FOLDED_NAME_SQL`` in memory_core/read/entities.py), or PostgreSQL will not use it.

Entities are few next to facts, so the indexes cost the write path little; ``CREATE INDEX``
blocks writes to ``memory_entities`` (not reads) while it runs, a few seconds for a million entities.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 12:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FOLDED_NAME = "translate(lower(display_name), 'áàâãäåéèêëíìîïóòôõöúùûüçñýÿ', 'aaaaaaeeeeiiiiooooouuuucnyy')"

_INDEXES = {
    "ix_memory_entities_agent_folded_name": f"(agent_id, {_FOLDED_NAME})",
    "ix_memory_entities_agent_key_slug": "(agent_id, split_part(canonical_key, ':', 2))",
    "ix_memory_entities_agent_key_type": "(agent_id, split_part(canonical_key, ':', 1))",
}


def upgrade() -> None:
    for name, definition in _INDEXES.items():
        op.execute(f"CREATE INDEX IF NOT EXISTS {name} ON memory_entities {definition}")


def downgrade() -> None:
    for name in _INDEXES:
        op.execute(f"DROP INDEX IF EXISTS {name}")
