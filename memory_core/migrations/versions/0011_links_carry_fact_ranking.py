"""Fact-entity links carry their fact's ranking columns, so an entity's top facts come from one index.

Spreading activation and the graph signal take "an entity's few most important facts valid now
and sure enough" for every entity they explore. The links only named the fact, so each of an
entity's facts was read from ``memory_facts`` (its heap page, wherever that fact was written) to
be filtered and sorted, and all but a handful thrown away: at 100,000 facts ~440 fact lookups per
spreading statement for ~20 entities, about half of it.

Each link now holds a copy of its fact's ``importance``, ``valid_from``, ``valid_to`` and
``confidence`` (``fact_*``), and ``ix_fact_entity_links_entity_ranked`` orders an entity's links
to facts valid now by importance, so reading its top few is a short index range. The copies are
kept by the database, not by each writer:

* a link is filled from its fact when it is inserted (``arandu_link_copies_fact``, before insert);
* a fact whose ranking columns change passes them to its links (``arandu_fact_to_links``, after
  an update of those columns that changed one of them).

Every fact has a link to its own subject (``is_primary``: the write path writes it with the fact),
so an entity's facts are exactly its links.

Upgrade fills the copies of the existing links with one ``UPDATE`` (it reads both tables and
blocks writes of links until it commits: seconds per million links) and builds the index; on a
large table add the columns and build the index beforehand with ``CONCURRENTLY``
(docs/production.md): the migration then finds them. Downgrade drops the triggers, the index and the columns.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 22:20:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# docs/production.md gives the CONCURRENTLY form of this statement, for large tables.
_INDEX_SQL = (
    "CREATE INDEX IF NOT EXISTS ix_fact_entity_links_entity_ranked ON memory_fact_entity_links "
    "(agent_id, entity_key, fact_importance DESC, fact_valid_from DESC, fact_id) INCLUDE (fact_confidence) "
    "WHERE fact_valid_to IS NULL"
)


def upgrade() -> None:
    op.execute(
        "ALTER TABLE memory_fact_entity_links "
        "ADD COLUMN IF NOT EXISTS fact_importance double precision, "
        "ADD COLUMN IF NOT EXISTS fact_valid_from timestamptz, "
        "ADD COLUMN IF NOT EXISTS fact_valid_to timestamptz, "
        "ADD COLUMN IF NOT EXISTS fact_confidence double precision"
    )
    op.execute(
        """
        CREATE OR REPLACE FUNCTION arandu_link_copies_fact() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            SELECT f.importance, f.valid_from, f.valid_to, f.confidence
              INTO NEW.fact_importance, NEW.fact_valid_from, NEW.fact_valid_to, NEW.fact_confidence
              FROM memory_facts f WHERE f.id = NEW.fact_id;
            RETURN NEW;
        END
        $$
        """
    )
    op.execute(
        "CREATE OR REPLACE TRIGGER trg_fact_entity_links_copy_fact BEFORE INSERT OR UPDATE OF fact_id "
        "ON memory_fact_entity_links FOR EACH ROW EXECUTE FUNCTION arandu_link_copies_fact()"
    )
    op.execute(
        """
        CREATE OR REPLACE FUNCTION arandu_fact_to_links() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE memory_fact_entity_links
               SET fact_importance = NEW.importance, fact_valid_from = NEW.valid_from,
                   fact_valid_to = NEW.valid_to, fact_confidence = NEW.confidence
             WHERE fact_id = NEW.id;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        """
        CREATE OR REPLACE TRIGGER trg_memory_facts_to_links
        AFTER UPDATE OF importance, valid_from, valid_to, confidence ON memory_facts
        FOR EACH ROW
        WHEN (OLD.importance IS DISTINCT FROM NEW.importance OR OLD.valid_from IS DISTINCT FROM NEW.valid_from
              OR OLD.valid_to IS DISTINCT FROM NEW.valid_to OR OLD.confidence IS DISTINCT FROM NEW.confidence)
        EXECUTE FUNCTION arandu_fact_to_links()
        """
    )
    op.execute(
        """
        UPDATE memory_fact_entity_links l
           SET fact_importance = f.importance, fact_valid_from = f.valid_from,
               fact_valid_to = f.valid_to, fact_confidence = f.confidence
          FROM memory_facts f
         WHERE f.id = l.fact_id
        """
    )
    op.execute(_INDEX_SQL)


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_fact_entity_links_entity_ranked")
    op.execute("DROP TRIGGER IF EXISTS trg_memory_facts_to_links ON memory_facts")
    op.execute("DROP TRIGGER IF EXISTS trg_fact_entity_links_copy_fact ON memory_fact_entity_links")
    op.execute("DROP FUNCTION IF EXISTS arandu_fact_to_links()")
    op.execute("DROP FUNCTION IF EXISTS arandu_link_copies_fact()")
    op.execute(
        "ALTER TABLE memory_fact_entity_links DROP COLUMN fact_importance, DROP COLUMN fact_valid_from, "
        "DROP COLUMN fact_valid_to, DROP COLUMN fact_confidence"
    )
