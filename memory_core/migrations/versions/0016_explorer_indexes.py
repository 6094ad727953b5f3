"""Indexes of the memory explorer's pages: an entity's facts by time, and an agent's entities by name.

The explorer's entity page lists an entity's facts valid now, valid at an instant (``as_of``) and
past (closed windows), newest first, a page at a time. No index ordered an entity's facts by
time: ``ix_fact_entity_links_entity_ranked`` orders only the open ones, by importance, and the
others are found by ``(agent_id, entity_key)`` alone, so every page read all of the entity's facts
and sorted them (an entity holding most of a 100,000-fact agent read them all for 50 rows).

Every fact has a link to its own subject (migration 0011), and the links carry copies of their
fact's ``valid_from`` and ``valid_to``, so two partial indexes of the links answer every page:

* ``ix_fact_entity_links_entity_open``: links to facts valid now, newest first;
* ``ix_fact_entity_links_entity_closed``: links to closed facts, newest first, with ``fact_valid_to``
  (the ``as_of`` page keeps those still open at the instant).

A link is in exactly one of them, so together they cost what one index of every link costs.

``ix_memory_entities_agent_name`` orders an agent's entities by the name the list shows
(``COALESCE(display_name, canonical_key)``), for the entity list's "name" order.

Each build blocks writes of its table (not reads) while it runs: seconds per million links. On a
large table build them beforehand with ``CONCURRENTLY`` (docs/production.md): the migration finds
them. Downgrade drops the three.

Revision ID: 0016
Revises: 0015
Create Date: 2027-01-10 10:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# docs/production.md gives the CONCURRENTLY form of these statements, for large tables.
_INDEXES = {
    "ix_fact_entity_links_entity_open": (
        "ON memory_fact_entity_links (agent_id, entity_key, fact_valid_from DESC, fact_id DESC) "
        "WHERE fact_valid_to IS NULL"
    ),
    "ix_fact_entity_links_entity_closed": (
        "ON memory_fact_entity_links (agent_id, entity_key, fact_valid_from DESC, fact_id DESC) "
        "INCLUDE (fact_valid_to) WHERE fact_valid_to IS NOT NULL"
    ),
    "ix_memory_entities_agent_name": "ON memory_entities (agent_id, (COALESCE(display_name, canonical_key)), id)",
}


def upgrade() -> None:
    for name, definition in _INDEXES.items():
        op.execute(f"CREATE INDEX IF NOT EXISTS {name} {definition}")


def downgrade() -> None:
    for name in _INDEXES:
        op.execute(f"DROP INDEX IF EXISTS {name}")
