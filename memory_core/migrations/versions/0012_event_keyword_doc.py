"""Events keep the text their keywords are looked for in (``keyword_doc``), made once when written.

Relevant conversations (SPEC R10) score an agent's latest messages
(``event_max_scan``, 200 by default) by keyword too, and each retrieve built every one's keyword
haystack: the speaker and text lower-cased, with eleven word-start marks made spaces
(memory_core.read.planner.keyword_haystack). That was ~0.5 ms of PostgreSQL's time per retrieve
at any agent size (measured 2026-12-05 on the 200 latest messages of the benchmark's 1,000-fact
agent: 0.62 ms with the haystack, 0.12 ms reading the text as stored).

``keyword_doc`` holds that haystack, written by the database (``arandu_event_keyword_doc``, before
an insert or an update of ``text`` or ``speaker``), so every writer (the API, imports, COPY) fills
it. The column is added without a default, which does not rewrite the table, and existing events
are not backfilled: the read computes the haystack of an event without one, as before
(``COALESCE``), and an agent's latest messages, the only ones read, are soon new ones.

The function's expression is the one ``keyword_haystack_sql("coalesce(NEW.speaker, '') || ' ' ||
NEW.text")`` returned when this migration was written; a test compares the stored documents with
the Python haystack, so a change of the marks needs a new migration. Downgrade drops the trigger,
the function and the column.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05 02:20:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_HAYSTACK = (
    "' ' || replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(replace("
    "lower(coalesce(NEW.speaker, '') || ' ' || NEW.text), '(', ' '), '[', ' '), '{', ' '), '\"', ' '), "
    "'''', ' '), '\u201c', ' '), '\u2018', ' '), '-', ' '), '/', ' '), '\u00bf', ' '), '\u00a1', ' ')"
)


def upgrade() -> None:
    op.execute("ALTER TABLE memory_events ADD COLUMN IF NOT EXISTS keyword_doc text")
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION arandu_event_keyword_doc() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.keyword_doc := {_HAYSTACK};
            RETURN NEW;
        END
        $$
        """
    )
    op.execute(
        "CREATE OR REPLACE TRIGGER trg_memory_events_keyword_doc BEFORE INSERT OR UPDATE OF text, speaker "
        "ON memory_events FOR EACH ROW EXECUTE FUNCTION arandu_event_keyword_doc()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS trg_memory_events_keyword_doc ON memory_events")
    op.execute("DROP FUNCTION IF EXISTS arandu_event_keyword_doc()")
    op.execute("ALTER TABLE memory_events DROP COLUMN IF EXISTS keyword_doc")
