"""``closest_active_facts_many``: a chunk's candidate searches in one statement, each as it would be alone;
and the read point that tells the facts a read could not see."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from memory_core.db.engine import create_db_engine
from memory_core.providers.hashing_embedder import HashingEmbedder
from memory_core.settings import Settings
from memory_core.write import repository
from memory_core.write.repository import ClosestFactsQuery, vector_literal

EMBEDDER = HashingEmbedder(dimensions=384)
START = datetime(2025, 1, 1, tzinfo=UTC)


def _fact(
    engine: Engine,
    agent: str,
    key: str,
    fact_text: str,
    *,
    attribute: str | None = None,
    superseded: bool = False,
    embedded: bool = True,
    age_days: int = 0,
) -> str:
    fact_id = str(uuid.uuid4())
    valid_from = START + timedelta(days=age_days)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO memory_facts (id, agent_id, entity_type, entity_key, entity_name, attribute_key, "
                "fact_text, confidence, importance, valid_from, valid_to, embedding_vec) VALUES (:id, :agent, "
                "'person', :key, 'X', :attr, :text, 0.9, 0.5, :valid_from, :valid_to, CAST(:vec AS vector))"
            ),
            {
                "id": fact_id,
                "agent": agent,
                "key": key,
                "attr": attribute,
                "text": fact_text,
                "valid_from": valid_from,
                "valid_to": valid_from + timedelta(days=1) if superseded else None,
                "vec": vector_literal(EMBEDDER.embed_one(fact_text)) if embedded else None,
            },
        )
    return fact_id


def test_each_search_of_a_chunk_finds_what_it_finds_alone(engine: Engine) -> None:
    agent, other = f"closest-{uuid.uuid4().hex[:8]}", f"closest-{uuid.uuid4().hex[:8]}"
    texts = [f"Rafael likes {thing}" for thing in ("jazz", "chess", "hiking", "rice", "tea", "opera", "cats")]
    for day, fact_text in enumerate(texts):
        _fact(engine, agent, "person:rafael", fact_text, age_days=day)
    # A single-valued slot far from the query's words: found through the attribute, not the vector.
    residence = _fact(engine, agent, "person:rafael", "Rafael lives in Recife", attribute="lives_in", age_days=9)
    old_residence = _fact(
        engine, agent, "person:rafael", "Rafael lives in Natal", attribute="lives_in", superseded=True
    )
    _fact(engine, agent, "person:rafael", "Rafael was born in 1990", embedded=False, age_days=3)
    _fact(engine, agent, "person:ana", "Ana likes jazz", age_days=2)
    foreign = _fact(engine, other, "person:rafael", "Rafael likes jazz a lot")

    queries = [
        ClosestFactsQuery(agent, "person:rafael", EMBEDDER.embed_one("Rafael likes jazz music"), None),
        ClosestFactsQuery(agent, "person:rafael", EMBEDDER.embed_one("Rafael likes football"), "lives_in"),
        ClosestFactsQuery(agent, "person:ana", EMBEDDER.embed_one("Ana likes jazz"), None),
        ClosestFactsQuery(agent, "person:nobody", EMBEDDER.embed_one("Nobody likes jazz"), "lives_in"),
        ClosestFactsQuery(agent, "person:rafael", None, None),
        ClosestFactsQuery(other, "person:rafael", EMBEDDER.embed_one("Rafael likes jazz music"), None),
    ]
    with engine.connect() as connection:
        session = Session(bind=connection)
        together = repository.closest_active_facts_many(session, queries, limit=3)
        alone = [
            repository.closest_active_facts(
                session, q.agent_id, q.entity_key, q.vector, limit=3, attribute_key=q.attribute_key
            )
            for q in queries
        ]
        session.close()

    # The same facts in the same order; similarities equal within float32 precision (the chunk's
    # vectors travel as text, a lone search's in binary).
    assert [[row.fact_id for row in found] for found in together] == [[row.fact_id for row in found] for found in alone]
    for found, expected in zip(together, alone, strict=True):
        for row, alone_row in zip(found, expected, strict=True):
            assert row.similarity == pytest.approx(alone_row.similarity, abs=1e-6)
            assert (row.text, row.attribute_key, row.valid_from) == (
                alone_row.text,
                alone_row.attribute_key,
                alone_row.valid_from,
            )
    ids = [[row.fact_id for row in found] for found in together]
    assert len(ids[0]) == 3
    assert together[0][0].text == "Rafael likes jazz"
    assert residence in ids[1]
    assert len(ids[1]) == 4
    assert [row.text for row in together[2]] == ["Ana likes jazz"]
    assert ids[3] == []
    assert len(ids[4]) == 3  # no vector: the newest active facts
    assert ids[5] == [foreign]
    assert old_residence not in {fact_id for found in ids for fact_id in found}
    assert foreign not in {fact_id for found in ids[:5] for fact_id in found}


def test_a_chunk_without_searches_reads_nothing(engine: Engine) -> None:
    with engine.connect() as connection:
        session = Session(bind=connection)
        assert repository.closest_active_facts_many(session, [], limit=10) == []
        session.close()


def test_a_read_point_tells_a_fact_committed_after_it_by_a_transaction_begun_before_it(
    engine: Engine, settings: Settings
) -> None:
    agent = f"readpoint-{uuid.uuid4().hex[:8]}"
    before = _fact(engine, agent, "person:rafael", "Rafael lives in Lisbon", attribute="lives_in")
    vector = EMBEDDER.embed_one("Rafael lives in Porto")
    writer = create_db_engine(settings, pool_size=1)
    try:
        with writer.connect() as connection:
            # An apply transaction: begun (its rows stamped with its start), then its fact written
            # in a savepoint, not committed yet when the read runs.
            connection.execute(text("SELECT 1"))
            with connection.begin_nested():
                connection.execute(
                    text(
                        "INSERT INTO memory_facts (agent_id, entity_type, entity_key, entity_name, attribute_key, "
                        "fact_text, embedding_vec) VALUES (:agent, 'person', 'person:rafael', 'Rafael', "
                        "'works_at', 'Rafael works at Acme', CAST(:vec AS vector))"
                    ),
                    {"agent": agent, "vec": vector_literal(EMBEDDER.embed_one("Rafael works at Acme"))},
                )
            with engine.connect() as reader:
                session = Session(bind=reader)
                point = repository.read_point(session)
                session.close()
            connection.commit()
    finally:
        writer.dispose()

    with engine.connect() as connection:
        session = Session(bind=connection)
        found = {
            row.text: row for row in repository.closest_active_facts(session, agent, "person:rafael", vector, limit=5)
        }
        later = repository.read_point(session)
        session.close()
    assert found["Rafael lives in Lisbon"].fact_id == before
    lisbon, acme = found["Rafael lives in Lisbon"], found["Rafael works at Acme"]
    assert lisbon.created_xid is not None
    assert acme.created_xid is not None
    # The clock calls the Acme fact older than the read; the snapshot knows the read did not see it.
    assert acme.created_at is not None
    assert acme.created_at < point.at
    assert repository.visible_in(point.snapshot, lisbon.created_xid)
    assert not repository.visible_in(point.snapshot, acme.created_xid)
    assert repository.visible_in(later.snapshot, acme.created_xid)
