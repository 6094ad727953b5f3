"""Keyword search ignores accents: the ``arandu_search`` text-search configuration (simple + unaccent).

``memory_facts.search_vector`` was ``to_tsvector('simple', fact_text)``: words as written, accents
kept, so "sao paulo" never found "São Paulo" through the GIN index and the read path sent every
keyword twice (as written and accent-folded in Python). The contrib ``unaccent`` dictionary folds
documents and queries alike inside PostgreSQL (memory_core.db.text_search).

On PostgreSQL 17 and newer the generated column gets its new expression in place (``SET
EXPRESSION``: one rewrite of the table, every index on the column rebuilt, the large agents' own
keyword indexes included). PostgreSQL 16 cannot change a generated column's expression: there the
column is dropped and added again with its table-wide GIN index; the large agents' partial
keyword indexes go with it and are rebuilt by the agent indexer (``arandu db index-agents`` or the
first searches). Either way the table is rewritten once: on a large table, run it in a quiet hour.

Downgrade restores ``simple`` and drops the configuration; the extension stays (other databases
objects may use it, and it is harmless).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07 00:00:00
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out rather than imported: a migration keeps the expression it was written with.
_UNACCENTED = "to_tsvector('arandu_search'::regconfig, fact_text)"
_SIMPLE = "to_tsvector('simple'::regconfig, fact_text)"


def _set_expression(expression: str, *, in_place: bool | None = None) -> None:
    """Give ``search_vector`` ``expression``: in place on PostgreSQL 17+, else drop and add (tests force either)."""
    if in_place is None:
        version = op.get_bind().execute(text("SELECT current_setting('server_version_num')::int")).scalar() or 0
        in_place = version >= 170_000
    if in_place:
        op.execute(f"ALTER TABLE memory_facts ALTER COLUMN search_vector SET EXPRESSION AS ({expression})")
        return
    op.execute("ALTER TABLE memory_facts DROP COLUMN search_vector")
    op.execute(f"ALTER TABLE memory_facts ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ({expression}) STORED")
    op.execute("CREATE INDEX ix_memory_facts_search_vector ON memory_facts USING gin (search_vector)")


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS unaccent")
    op.execute(
        """
        DO $$
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_ts_config WHERE cfgname = 'arandu_search'
                           AND cfgnamespace = current_schema()::regnamespace) THEN
                CREATE TEXT SEARCH CONFIGURATION arandu_search (COPY = pg_catalog.simple);
                ALTER TEXT SEARCH CONFIGURATION arandu_search
                    ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part
                    WITH unaccent, simple;
            END IF;
        END
        $$
        """
    )
    _set_expression(_UNACCENTED)


def downgrade() -> None:
    _set_expression(_SIMPLE)
    op.execute("DROP TEXT SEARCH CONFIGURATION IF EXISTS arandu_search")
