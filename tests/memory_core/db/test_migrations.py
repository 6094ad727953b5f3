"""Migrations on a fresh database: every table and index, up and down, and the start-up checks."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import Connection, create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

from memory_core.db.migrate import (
    DatabaseSchemaError,
    check_schema,
    current_revision,
    downgrade,
    head_revision,
    upgrade,
)
from memory_core.db.text_search import event_search_vector_sql, word_query_sql
from memory_core.read.planner import keyword_haystack
from memory_core.settings import load_settings
from tests.support.services import TestServices

SERVICE_TABLES = {
    "memory_events",
    "memory_facts",
    "memory_fact_entity_links",
    "memory_fact_usage",
    "memory_entities",
    "memory_entity_aliases",
    "memory_entity_relationships",
    "memory_clusters",
    "memory_meta_observations",
    "memory_attribute_registry",
    "memory_directives",
    "memory_directive_blocks",
    "memory_pending_operations",
    "pipeline_runs",
    "imports",
    "maintenance_job_runs",
    "schema_info",
}


def test_upgrade_creates_schema_then_downgrade_removes_it_and_upgrade_again_works(services: TestServices) -> None:
    url = services.new_database()
    settings = load_settings(database_url=url, embedding_dimensions=256)
    engine = create_engine(url)
    try:
        upgrade(settings)
        inspector = inspect(engine)
        assert set(inspector.get_table_names()) >= SERVICE_TABLES
        assert current_revision(engine) == head_revision()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT embedding_dimensions FROM schema_info")).scalar() == 256
            vector_types = conn.execute(
                text(
                    "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                    "WHERE attrelid = 'memory_facts'::regclass AND attname = 'embedding_vec'"
                )
            ).scalar()
            assert vector_types == "vector(256)"
            hnsw = set(
                conn.execute(
                    text("SELECT tablename FROM pg_indexes WHERE indexdef ILIKE '%USING hnsw%vector_cosine_ops%'")
                ).scalars()
            )
            # No table-wide vector index: large agents get partial ones of their own at run time
            # (migration 0010; memory_core.read.agent_index), messages are not searched by vector
            # (migration 0008).
            assert hnsw == set()

        downgrade(settings)
        remaining = set(inspect(engine).get_table_names())
        assert not (remaining & SERVICE_TABLES)

        upgrade(settings)
        assert set(inspect(engine).get_table_names()) >= SERVICE_TABLES
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("table", "columns"),
    [
        ("memory_entities", ("agent_id", "canonical_key")),
        ("memory_entity_aliases", ("agent_id", "alias")),
        ("memory_fact_entity_links", ("fact_id", "entity_key")),
        ("memory_entity_relationships", ("agent_id", "source_entity_key", "target_entity_key", "rel_type")),
        ("memory_events", ("agent_id", "message_id")),
    ],
)
def test_seeds_unique_constraints_exist(migrated_database_url: str, table: str, columns: tuple[str, ...]) -> None:
    engine = create_engine(migrated_database_url)
    try:
        uniques = inspect(engine).get_unique_constraints(table)
        assert tuple(columns) in {tuple(item["column_names"]) for item in uniques}
    finally:
        engine.dispose()


def test_same_message_id_twice_for_one_agent_is_rejected_but_allowed_for_another(migrated_database_url: str) -> None:
    engine = create_engine(migrated_database_url)
    insert = text(
        "INSERT INTO memory_events (agent_id, text, speaker, message_id) VALUES (:agent, 'hello there', 'Ana', 'm-1')"
    )
    try:
        with engine.begin() as conn:
            conn.execute(insert, {"agent": "agent-unique-a"})
            conn.execute(insert, {"agent": "agent-unique-b"})
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(insert, {"agent": "agent-unique-a"})
    finally:
        engine.dispose()


def test_every_agent_scoped_table_has_an_index_led_by_agent_id(migrated_database_url: str) -> None:
    engine = create_engine(migrated_database_url)
    try:
        inspector = inspect(engine)
        # memory_fact_usage is only reached by its fact's id, from a fact row scoped by agent.
        for table in SERVICE_TABLES - {"schema_info", "memory_fact_entity_links", "memory_fact_usage"}:
            if "agent_id" not in {column["name"] for column in inspector.get_columns(table)}:
                continue
            leading = [index["column_names"][0] for index in inspector.get_indexes(table)]
            leading += [unique["column_names"][0] for unique in inspector.get_unique_constraints(table)]
            # A primary key led by agent_id is such an index too (the directive-block cache, pending operations).
            leading += inspector.get_pk_constraint(table)["constrained_columns"][:1]
            assert "agent_id" in leading, f"{table} has no index starting with agent_id"
    finally:
        engine.dispose()


def test_dimension_mismatch_names_both_numbers(migrated_database_url: str) -> None:
    settings = load_settings(database_url=migrated_database_url, embedding_dimensions=1536)
    engine = create_engine(settings.sqlalchemy_url)
    try:
        with pytest.raises(DatabaseSchemaError) as caught:
            check_schema(engine, settings)
    finally:
        engine.dispose()
    assert "384" in str(caught.value)
    assert "1536" in str(caught.value)
    assert "ARANDU_EMBEDDING_DIMENSIONS" in str(caught.value)


def test_unmigrated_database_is_reported_with_the_command_to_fix_it(services: TestServices) -> None:
    url = services.new_database()
    settings = load_settings(database_url=url)
    engine = create_engine(url)
    try:
        with pytest.raises(DatabaseSchemaError, match=r"memory_core\.db\.migrate upgrade"):
            check_schema(engine, settings)
    finally:
        engine.dispose()


def test_upgrading_into_a_database_built_for_another_dimension_fails(services: TestServices) -> None:
    url = services.new_database()
    upgrade(load_settings(database_url=url, embedding_dimensions=384))
    with pytest.raises(DatabaseSchemaError, match=r"384.*1536"):
        upgrade(load_settings(database_url=url, embedding_dimensions=1536))


def test_event_arrival_order_numbers_new_rows_only(services: TestServices) -> None:
    url = services.new_database()
    settings = load_settings(database_url=url, embedding_dimensions=384)
    engine = create_engine(url)
    insert = text("INSERT INTO memory_events (agent_id, text, speaker) VALUES ('agent-seq', :text, 'Ana')")
    try:
        upgrade(settings, "0004")
        with engine.begin() as conn:
            conn.execute(insert, {"text": "before"})
        upgrade(settings)
        with engine.begin() as conn:
            conn.execute(insert, {"text": "after 1"})
            conn.execute(insert, {"text": "after 2"})
            seqs = {row.text: row.seq for row in conn.execute(text("SELECT text, seq FROM memory_events"))}
        # The existing row is not rewritten; new rows are numbered in insert order.
        assert seqs["before"] is None
        assert seqs["after 1"] is not None
        assert seqs["after 2"] > seqs["after 1"]
        indexes = {index["name"] for index in inspect(engine).get_indexes("memory_events")}
        assert "ix_memory_events_agent_session_order" in indexes
    finally:
        engine.dispose()


def test_retrieval_counters_move_to_the_usage_table_and_back(services: TestServices) -> None:
    url = services.new_database()
    settings = load_settings(database_url=url, embedding_dimensions=384)
    engine = create_engine(url)
    insert = text(
        "INSERT INTO memory_facts (agent_id, entity_type, entity_key, fact_text, times_retrieved, last_retrieved_at) "
        "VALUES ('agent-usage', 'person', 'person:ana', :text, :times, :at) RETURNING CAST(id AS text)"
    )
    stamp = datetime(2026, 11, 1, 12, tzinfo=UTC)
    try:
        upgrade(settings, "0006")
        with engine.begin() as conn:
            asked = conn.execute(insert, {"text": "asked", "times": 7, "at": stamp}).scalar_one()
            never = conn.execute(insert, {"text": "never asked", "times": 0, "at": None}).scalar_one()
        upgrade(settings)
        with engine.connect() as conn:
            usage = conn.execute(
                text(
                    "SELECT CAST(fact_id AS text) AS id, agent_id, times_retrieved, last_retrieved_at "
                    "FROM memory_fact_usage"
                )
            ).all()
            options = conn.execute(text("SELECT reloptions FROM pg_class WHERE relname = 'memory_fact_usage'")).scalar()
        # Only facts ever retrieved get a row; the fact table no longer has the columns.
        assert [(row.id, row.agent_id, row.times_retrieved) for row in usage] == [(asked, "agent-usage", 7)]
        assert usage[0].last_retrieved_at == stamp
        assert options == ["fillfactor=50"]
        columns = {column["name"] for column in inspect(engine).get_columns("memory_facts")}
        assert not columns & {"times_retrieved", "last_retrieved_at"}

        downgrade(settings, "0006")
        with engine.connect() as conn:
            counters = {
                row.id: (row.times_retrieved, row.last_retrieved_at)
                for row in conn.execute(
                    text("SELECT CAST(id AS text) AS id, times_retrieved, last_retrieved_at FROM memory_facts")
                )
            }
        assert counters == {asked: (7, stamp), never: (0, None)}
        assert "memory_fact_usage" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_links_carry_their_facts_ranking_columns_and_follow_their_changes(services: TestServices) -> None:
    url = services.new_database()
    settings = load_settings(database_url=url, embedding_dimensions=384)
    engine = create_engine(url)
    insert_fact = text(
        "INSERT INTO memory_facts (agent_id, entity_type, entity_key, fact_text, importance, confidence, valid_from) "
        "VALUES ('agent-links', 'person', 'person:ana', :text, :importance, 0.9, :at) RETURNING id"
    )
    insert_link = text(
        "INSERT INTO memory_fact_entity_links (fact_id, entity_key, is_primary, agent_id) "
        "VALUES (:fact, :key, :primary, 'agent-links')"
    )
    copies = text(
        "SELECT entity_key, fact_importance, fact_valid_from, fact_valid_to, fact_confidence "
        "FROM memory_fact_entity_links WHERE fact_id = :fact ORDER BY entity_key"
    )
    start = datetime(2026, 10, 1, 9, tzinfo=UTC)
    try:
        upgrade(settings, "0010")
        with engine.begin() as conn:
            before = conn.execute(insert_fact, {"text": "Ana mora em Recife", "importance": 0.4, "at": start}).scalar()
            conn.execute(insert_link, {"fact": before, "key": "person:ana", "primary": True})
            conn.execute(insert_link, {"fact": before, "key": "place:recife", "primary": False})
        upgrade(settings)
        with engine.begin() as conn:
            # Links written before the upgrade got their fact's columns.
            assert [tuple(row) for row in conn.execute(copies, {"fact": before})] == [
                ("person:ana", 0.4, start, None, 0.9),
                ("place:recife", 0.4, start, None, 0.9),
            ]
            after = conn.execute(insert_fact, {"text": "Ana gosta de frevo", "importance": 0.7, "at": start}).scalar()
            conn.execute(insert_link, {"fact": after, "key": "person:ana", "primary": True})
            assert [tuple(row) for row in conn.execute(copies, {"fact": after})] == [
                ("person:ana", 0.7, start, None, 0.9)
            ]
            # A fact closed, re-weighed or doubted: every link of it follows.
            closed = datetime(2026, 11, 1, 9, tzinfo=UTC)
            conn.execute(
                text("UPDATE memory_facts SET valid_to = :at, importance = 0.2, confidence = 0.3 WHERE id = :fact"),
                {"at": closed, "fact": before},
            )
            assert [tuple(row) for row in conn.execute(copies, {"fact": before})] == [
                ("person:ana", 0.2, start, closed, 0.3),
                ("place:recife", 0.2, start, closed, 0.3),
            ]
            # Other columns leave the links alone; the other fact's link did not move.
            conn.execute(
                text("UPDATE memory_facts SET fact_text = 'Ana adora frevo' WHERE id = :fact"), {"fact": after}
            )
            assert [tuple(row) for row in conn.execute(copies, {"fact": after})] == [
                ("person:ana", 0.7, start, None, 0.9)
            ]
        indexes = {index["name"] for index in inspect(engine).get_indexes("memory_fact_entity_links")}
        assert "ix_fact_entity_links_entity_ranked" in indexes

        downgrade(settings, "0010")
        columns = {column["name"] for column in inspect(engine).get_columns("memory_fact_entity_links")}
        assert not {column for column in columns if column.startswith("fact_") and column != "fact_id"}
        with engine.begin() as conn:
            # Without the triggers, facts and links are written as before.
            conn.execute(text("UPDATE memory_facts SET importance = 0.5 WHERE id = :fact"), {"fact": after})
            conn.execute(insert_link, {"fact": after, "key": "music:frevo", "primary": False})
    finally:
        engine.dispose()


def test_events_keep_their_keyword_document_from_0012_until_0014(services: TestServices) -> None:
    # Migration 0012's keyword document, read by relevant conversations until 0014 replaced it.
    url = services.new_database()
    settings = load_settings(database_url=url, embedding_dimensions=384)
    engine = create_engine(url)
    insert = text(
        "INSERT INTO memory_events (agent_id, text, speaker) VALUES ('agent-doc', :text, :speaker) RETURNING id"
    )
    document = text("SELECT keyword_doc FROM memory_events WHERE id = :id")
    texts = [
        "Fui ao (Recife) com a 'Vertix' - pós-jogo",
        '[Ágata] “disse” {algo} ‘assim’ /ou/ ¿não? ¡Sim! "ok" 100%_feito',
        "",
    ]
    try:
        upgrade(settings, "0011")
        with engine.begin() as conn:
            before = conn.execute(insert, {"text": "antes da migração", "speaker": "Ana"}).scalar()
        upgrade(settings, "0013")
        with engine.begin() as conn:
            # Not backfilled: the read builds the document of an older event itself.
            assert conn.execute(document, {"id": before}).scalar() is None
            for message in texts:
                for speaker in ("Ana", "Éric O'Neil", ""):
                    event_id = conn.execute(insert, {"text": message, "speaker": speaker}).scalar()
                    stored = conn.execute(document, {"id": event_id}).scalar()
                    assert stored == keyword_haystack(f"{speaker} {message}"), (speaker, message)
            # A corrected text gets its document again.
            conn.execute(text("UPDATE memory_events SET text = 'Outra (coisa)' WHERE id = :id"), {"id": before})
            assert conn.execute(document, {"id": before}).scalar() == keyword_haystack("Ana Outra (coisa)")

        downgrade(settings, "0011")
        columns = {column["name"] for column in inspect(engine).get_columns("memory_events")}
        assert "keyword_doc" not in columns
        with engine.begin() as conn:
            conn.execute(insert, {"text": "depois do downgrade", "speaker": "Ana"})
    finally:
        engine.dispose()


def test_events_get_a_stemmed_search_document_from_0014_and_their_keyword_one_back_below_it(
    services: TestServices,
) -> None:
    url = services.new_database()
    settings = load_settings(database_url=url, embedding_dimensions=384)
    engine = create_engine(url)
    # Embedded messages, as extraction leaves them: the document is written with the vector.
    insert = text(
        "INSERT INTO memory_events (agent_id, text, speaker, embedding_vec) "
        "VALUES ('agent-stems', :text, :speaker, CAST(array_fill(1::real, ARRAY[384]) AS vector)) RETURNING id"
    )
    accept = text(
        "INSERT INTO memory_events (agent_id, text, speaker) VALUES ('agent-stems', :text, :speaker) RETURNING id"
    )
    stored = text("SELECT CAST(search_vector AS text) FROM memory_events WHERE id = :id")
    # What the read path builds for a message without a stored document (memory_core.db.text_search).
    built = text(f"SELECT CAST({event_search_vector_sql('CAST(:speaker AS text)', 'CAST(:text AS text)')} AS text)")
    matching = text(
        "SELECT text FROM memory_events WHERE agent_id = 'agent-stems' "
        f"AND search_vector @@ ({word_query_sql('CAST(:word AS text)')}) ORDER BY text"
    )
    keyword_doc = text("SELECT keyword_doc FROM memory_events WHERE id = :id")

    def names(conn: Connection, sql: str) -> set[str]:
        return set(conn.execute(text(sql)).scalars())

    triggers = "SELECT tgname FROM pg_trigger WHERE tgrelid = 'memory_events'::regclass AND NOT tgisinternal"
    functions = "SELECT proname FROM pg_proc WHERE proname LIKE 'arandu_event%'"
    configs = "SELECT cfgname FROM pg_ts_config WHERE cfgname LIKE 'arandu%'"
    messages = [
        ("Caroline", "I've been researching adoption agencies"),
        ("Ana", "Eu pesquisei a Vertix em São Paulo"),
        ("Éric O'Neil", "We adopted (a) dog"),
        ("", ""),
    ]
    try:
        upgrade(settings, "0013")
        with engine.begin() as conn:
            before = conn.execute(insert, {"text": "antes da migração", "speaker": "Ana"}).scalar()
            assert conn.execute(keyword_doc, {"id": before}).scalar() == keyword_haystack("Ana antes da migração")
        upgrade(settings)
        columns = {column["name"] for column in inspect(engine).get_columns("memory_events")}
        assert "search_vector" in columns
        assert "keyword_doc" not in columns
        with engine.begin() as conn:
            assert names(conn, triggers) >= {"trg_memory_events_search_vector"}
            assert "trg_memory_events_keyword_doc" not in names(conn, triggers)
            assert names(conn, functions) == {"arandu_event_search_vector"}
            assert names(conn, configs) == {"arandu_search", "arandu_english", "arandu_portuguese"}
            # Backfilled: an agent's latest messages get their document in the migration.
            backfilled = conn.execute(built, {"text": "antes da migração", "speaker": "Ana"}).scalar()
            assert conn.execute(stored, {"id": before}).scalar() == backfilled
            for speaker, message in messages:
                event_id = conn.execute(insert, {"text": message, "speaker": speaker}).scalar()
                expected = conn.execute(built, {"text": message, "speaker": speaker}).scalar()
                assert conn.execute(stored, {"id": event_id}).scalar() == expected, (speaker, message)
            # Stems of either language, accents folded, the speaker searched too.
            assert conn.execute(matching, {"word": "researched"}).scalars().all() == [messages[0][1]]
            assert conn.execute(matching, {"word": "adopting"}).scalars().all() == [messages[0][1], messages[2][1]]
            assert conn.execute(matching, {"word": "pesquisando"}).scalars().all() == [messages[1][1]]
            assert conn.execute(matching, {"word": "sao"}).scalars().all() == [messages[1][1]]
            assert conn.execute(matching, {"word": "eric"}).scalars().all() == [messages[2][1]]
            # A message the API has just accepted has no vector yet, so no document: it is written
            # with the vector (extraction's update), not on the acceptance path.
            accepted = conn.execute(accept, {"text": "Adopting a cat", "speaker": "Ana"}).scalar()
            assert conn.execute(stored, {"id": accepted}).scalar() is None
            conn.execute(
                text(
                    "UPDATE memory_events SET embedding_vec = CAST(array_fill(2::real, ARRAY[384]) AS vector) "
                    "WHERE id = :id"
                ),
                {"id": accepted},
            )
            expected = conn.execute(built, {"text": "Adopting a cat", "speaker": "Ana"}).scalar()
            assert conn.execute(stored, {"id": accepted}).scalar() == expected
            conn.execute(text("DELETE FROM memory_events WHERE id = :id"), {"id": accepted})
            # Another column changed: the document is not written (an older event keeps none).
            conn.execute(text("UPDATE memory_events SET search_vector = NULL WHERE id = :id"), {"id": before})
            conn.execute(text("UPDATE memory_events SET importance = 0.9 WHERE id = :id"), {"id": before})
            assert conn.execute(stored, {"id": before}).scalar() is None
            # A corrected text, or speaker, gets its document again.
            conn.execute(text("UPDATE memory_events SET text = 'Pesquisamos (tudo)' WHERE id = :id"), {"id": before})
            again = conn.execute(built, {"text": "Pesquisamos (tudo)", "speaker": "Ana"}).scalar()
            assert conn.execute(stored, {"id": before}).scalar() == again
            conn.execute(text("UPDATE memory_events SET speaker = 'Bruno' WHERE id = :id"), {"id": before})
            assert conn.execute(matching, {"word": "bruno"}).scalars().all() == ["Pesquisamos (tudo)"]
        # The database passes the start-up check (the model's column matches).
        check_schema(engine, settings)

        downgrade(settings, "0013")
        columns = {column["name"] for column in inspect(engine).get_columns("memory_events")}
        assert "keyword_doc" in columns
        assert "search_vector" not in columns
        with engine.begin() as conn:
            assert "trg_memory_events_keyword_doc" in names(conn, triggers)
            assert "trg_memory_events_search_vector" not in names(conn, triggers)
            assert names(conn, functions) == {"arandu_event_keyword_doc"}
            # 0013's configuration stays: the facts' search_vector is made with it.
            assert names(conn, configs) == {"arandu_search"}
            # Events written under 0014 have no keyword document: the old read path builds it.
            assert conn.execute(keyword_doc, {"id": before}).scalar() is None
            for speaker, message in messages:
                event_id = conn.execute(insert, {"text": message, "speaker": speaker}).scalar()
                assert conn.execute(keyword_doc, {"id": event_id}).scalar() == keyword_haystack(f"{speaker} {message}")
            conn.execute(text("UPDATE memory_events SET text = 'Outra (coisa)' WHERE id = :id"), {"id": before})
            assert conn.execute(keyword_doc, {"id": before}).scalar() == keyword_haystack("Bruno Outra (coisa)")
            below = conn.execute(insert, {"text": "I researched it", "speaker": "Ana"}).scalar()
            # An agent with more messages than the migration backfills: its oldest keeps none.
            conn.execute(
                text(
                    "INSERT INTO memory_events (agent_id, text, speaker, occurred_at) "
                    "SELECT 'agent-many', 'note ' || n, 'Ana', now() - n * interval '1 minute' "
                    "FROM generate_series(1, 1001) AS n"
                )
            )

        upgrade(settings)
        columns = {column["name"] for column in inspect(engine).get_columns("memory_events")}
        assert "keyword_doc" not in columns
        with engine.begin() as conn:
            assert names(conn, configs) == {"arandu_search", "arandu_english", "arandu_portuguese"}
            expected = conn.execute(built, {"text": "I researched it", "speaker": "Ana"}).scalar()
            assert conn.execute(stored, {"id": below}).scalar() == expected
            after = conn.execute(insert, {"text": "She is researching it", "speaker": "Ana"}).scalar()
            expected = conn.execute(built, {"text": "She is researching it", "speaker": "Ana"}).scalar()
            assert conn.execute(stored, {"id": after}).scalar() == expected
            assert set(conn.execute(matching, {"word": "researched"}).scalars()) == {
                messages[0][1],
                "I researched it",
                "She is researching it",
            }
            unfilled = conn.execute(
                text("SELECT agent_id, min(text) FROM memory_events WHERE search_vector IS NULL GROUP BY agent_id")
            ).all()
            assert [tuple(row) for row in unfilled] == [("agent-many", "note 1001")]
        check_schema(engine, settings)
    finally:
        engine.dispose()


def test_facts_written_before_the_unaccented_search_are_found_without_accents_after_it(
    services: TestServices,
) -> None:
    url = services.new_database()
    settings = load_settings(database_url=url, embedding_dimensions=384)
    engine = create_engine(url)
    insert = text(
        "INSERT INTO memory_facts (agent_id, entity_type, entity_key, fact_text, confidence, valid_from) "
        "VALUES ('agent-accents', 'person', 'person:ana', :text, 0.9, now()) RETURNING id"
    )
    found = text(
        "SELECT id FROM memory_facts WHERE agent_id = 'agent-accents' "
        "AND search_vector @@ to_tsquery(:config, :query) ORDER BY fact_text"
    )
    try:
        upgrade(settings, "0012")
        with engine.begin() as conn:
            old = conn.execute(insert, {"text": "Ana mora em São Paulo"}).scalar()
            assert conn.execute(found, {"config": "simple", "query": "sao:*"}).all() == []
        upgrade(settings)
        with engine.begin() as conn:
            new = conn.execute(insert, {"text": "Bruno visitou Sao Tome e o café da Ágata"}).scalar()
            for query in ("sao:*", "são:*", "SÃO:*"):
                assert conn.execute(found, {"config": "arandu_search", "query": query}).scalars().all() == [old, new]
            assert conn.execute(found, {"config": "arandu_search", "query": "agata:*"}).scalars().all() == [new]
            # The table-wide GIN index still serves the search.
            indexes = set(
                conn.execute(text("SELECT indexname FROM pg_indexes WHERE tablename = 'memory_facts'")).scalars()
            )
            assert "ix_memory_facts_search_vector" in indexes

        downgrade(settings, "0012")
        with engine.begin() as conn:
            assert conn.execute(found, {"config": "simple", "query": "são:*"}).scalars().all() == [old]
            configs = conn.execute(text("SELECT count(*) FROM pg_ts_config WHERE cfgname = 'arandu_search'")).scalar()
            assert configs == 0
        upgrade(settings)
    finally:
        engine.dispose()


def test_the_unaccented_search_vector_on_a_server_without_set_expression(services: TestServices) -> None:
    # PostgreSQL 16 has no ALTER COLUMN ... SET EXPRESSION: migration 0013 drops and adds the
    # column there. That path, run on this server, must leave the same column and index.
    import importlib.util

    from alembic.operations import Operations
    from alembic.runtime.migration import MigrationContext

    from memory_core.db.migrate import MIGRATIONS_DIR

    path = MIGRATIONS_DIR / "versions" / "0013_unaccented_text_search.py"
    spec = importlib.util.spec_from_file_location("migration_0013", path)
    assert spec is not None
    assert spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)

    url = services.new_database()
    settings = load_settings(database_url=url, embedding_dimensions=384)
    engine = create_engine(url)
    try:
        upgrade(settings)
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO memory_facts (agent_id, entity_type, entity_key, fact_text, confidence, valid_from) "
                    "VALUES ('agent-pg16', 'person', 'person:ana', 'Ana mora em São Paulo', 0.9, now())"
                )
            )
            with Operations.context(MigrationContext.configure(conn)):
                migration._set_expression("to_tsvector('simple'::regconfig, fact_text)", in_place=False)
                migration._set_expression("to_tsvector('arandu_search'::regconfig, fact_text)", in_place=False)
            expression = conn.execute(
                text(
                    "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a "
                    "ON a.attrelid = d.adrelid AND a.attnum = d.adnum "
                    "WHERE d.adrelid = 'memory_facts'::regclass AND a.attname = 'search_vector'"
                )
            ).scalar()
            assert "arandu_search" in str(expression)
            found = conn.execute(
                text("SELECT count(*) FROM memory_facts WHERE search_vector @@ to_tsquery('arandu_search', 'sao:*')")
            ).scalar()
            assert found == 1
            listed = conn.execute(text("SELECT indexname FROM pg_indexes WHERE tablename = 'memory_facts'"))
            assert "ix_memory_facts_search_vector" in set(listed.scalars())
        # The database still passes the start-up check (the model's column matches).
        check_schema(engine, settings)
    finally:
        engine.dispose()
