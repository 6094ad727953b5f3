"""Messages are searched by stem: ``memory_events.search_vector`` (English and Portuguese stems, unaccented).

Relevant conversations matched the query's five "keywords" as word prefixes of the lower-cased
text (``keyword_doc``, migration 0012): "research" found "researching" but "went" never found
"go", "adopting" never found "adoption", and the rest of the question was ignored. Measured on the
LoCoMo sample, an inverse-document-frequency match of every word of the question against the
messages' stems ranks the evidence better than that signal and the embedding together did
(docs/retrieval-quality.md).

Two text-search configurations, ``arandu_english`` and ``arandu_portuguese``: each language's stop
words (a ``simple`` dictionary that drops them and passes every other word on, so "não" and
"você" are dropped before ``unaccent`` would make them "nao" and "voce", which no stop list
holds), then the contrib ``unaccent`` dictionary (created by 0013), then the built-in Snowball
stemmer. ``search_vector`` holds a message's speaker and text under both
(memory_core.db.text_search.event_search_vector_sql), written by the database when the message
is embedded: before an insert or an update of ``text``, ``speaker`` or ``embedding_vec`` of a row
that has its vector (``arandu_event_search_vector``, in place of 0012's trigger), so every writer
(extraction, a COPY of embedded messages) fills it, and accepting a message costs nothing more
(measured: ~64 us per inserted row with the stemming against ~13 us with 0012's trigger).
As 0012 did, the column is added without a default
(no table rewrite). Each agent's latest 1,000 messages get their document in the migration
(reading their own document costs ~0.3 ms for 200 messages, building it ~5-7 ms): relevant
conversations read only an agent's ``event_max_scan`` latest ones (200 by default). The read
computes the document of an older event without one. ``keyword_doc`` is dropped (nothing reads it any more).

Downgrade restores ``keyword_doc`` and its trigger (unfilled: the old read path computes it for
rows without one), drops ``search_vector``, the two configurations and their stop-word dictionaries.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07 03:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out rather than imported: a migration keeps the expressions it was written with.
_CONFIGS = {"arandu_english": "english_stem", "arandu_portuguese": "portuguese_stem"}
_DOCUMENT = "coalesce({row}.speaker, '') || ' ' || {row}.text"
_SEARCH_VECTOR = " || ".join(f"to_tsvector('{config}'::regconfig, {_DOCUMENT})" for config in _CONFIGS)
# Each agent's latest messages (what relevant conversations read: event_max_scan, 200 by default,
# at most 1000) get their document now; older ones are computed when read, if ever.
_BACKFILL_LATEST = 1000
_HAYSTACK = (
    "' ' || replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(replace("
    "lower(coalesce(NEW.speaker, '') || ' ' || NEW.text), '(', ' '), '[', ' '), '{', ' '), '\"', ' '), "
    "'''', ' '), '\u201c', ' '), '\u2018', ' '), '-', ' '), '/', ' '), '\u00bf', ' '), '\u00a1', ' ')"
)


def _trigger(name: str, column: str, expression: str, *, columns: str = "text, speaker", when: str = "") -> None:
    """``arandu_event_<name>()`` fills ``column`` with ``expression`` on insert and on a change of ``columns``."""
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION arandu_event_{name}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.{column} := {expression};
            RETURN NEW;
        END
        $$
        """
    )
    op.execute(
        f"CREATE OR REPLACE TRIGGER trg_memory_events_{name} BEFORE INSERT OR UPDATE OF {columns} "
        f"ON memory_events FOR EACH ROW {when} EXECUTE FUNCTION arandu_event_{name}()"
    )


def _drop_trigger(name: str) -> None:
    op.execute(f"DROP TRIGGER IF EXISTS trg_memory_events_{name} ON memory_events")
    op.execute(f"DROP FUNCTION IF EXISTS arandu_event_{name}()")


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS unaccent")
    for config, stemmer in _CONFIGS.items():
        language = stemmer.removesuffix("_stem")
        op.execute(
            f"""
            DO $$
            BEGIN
                IF NOT EXISTS (SELECT 1 FROM pg_ts_config WHERE cfgname = '{config}'
                               AND cfgnamespace = current_schema()::regnamespace) THEN
                    CREATE TEXT SEARCH DICTIONARY {config}_stop
                        (TEMPLATE = pg_catalog.simple, STOPWORDS = {language}, ACCEPT = false);
                    CREATE TEXT SEARCH CONFIGURATION {config} (COPY = pg_catalog.{language});
                    ALTER TEXT SEARCH CONFIGURATION {config}
                        ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part
                        WITH {config}_stop, unaccent, {stemmer};
                END IF;
            END
            $$
            """  # noqa: S608 - fixed names from _CONFIGS, no input
        )
    op.execute("ALTER TABLE memory_events ADD COLUMN IF NOT EXISTS search_vector tsvector")
    _drop_trigger("keyword_doc")
    # Written once the message is embedded (extraction's update, or an insert that carries its
    # vector, as a COPY may), not when the API accepts it: stemming costs ~50 us per message, a
    # fifth of the database's work of an accepted batch, and a message without its vector is
    # never searched (relevant conversations read embedded messages only).
    _trigger(
        "search_vector",
        "search_vector",
        _SEARCH_VECTOR.format(row="NEW"),
        columns="text, speaker, embedding_vec",
        when="WHEN (NEW.embedding_vec IS NOT NULL)",
    )
    op.execute("ALTER TABLE memory_events DROP COLUMN IF EXISTS keyword_doc")
    op.execute(
        f"""
        UPDATE memory_events e SET search_vector = {_SEARCH_VECTOR.format(row="e")}
        FROM (
            SELECT id FROM (
                SELECT id, row_number() OVER (
                    PARTITION BY agent_id ORDER BY occurred_at DESC, seq DESC NULLS LAST, id DESC
                ) AS position
                FROM memory_events
            ) ranked
            WHERE position <= {_BACKFILL_LATEST}
        ) latest
        WHERE e.id = latest.id
        """  # noqa: S608 - fixed expressions, no input
    )


def downgrade() -> None:
    op.execute("ALTER TABLE memory_events ADD COLUMN IF NOT EXISTS keyword_doc text")
    _drop_trigger("search_vector")
    _trigger("keyword_doc", "keyword_doc", _HAYSTACK)
    op.execute("ALTER TABLE memory_events DROP COLUMN IF EXISTS search_vector")
    for config in _CONFIGS:
        op.execute(f"DROP TEXT SEARCH CONFIGURATION IF EXISTS {config}")
        op.execute(f"DROP TEXT SEARCH DICTIONARY IF EXISTS {config}_stop")
