"""The chunk's in-memory view of active facts answers what the database would, as the chunk writes.

Upsert asks it instead of PostgreSQL once an entity is asked about often; each answer here is
compared with :func:`repository.closest_active_facts` run in the same transaction, after every
kind of write the chunk makes (inserts, closes, reinforcements), on a real database.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from memory_core.db.vectors import vector_param
from memory_core.providers.hashing_embedder import HashingEmbedder
from memory_core.write import repository
from memory_core.write.active_facts_view import ActiveFactsView

EMBEDDER = HashingEmbedder(dimensions=384)
START = datetime(2025, 1, 1, tzinfo=UTC)
KEY = "person:rafael"
THINGS = ("jazz", "chess", "hiking", "rice", "tea", "opera", "cats", "surfing", "tango", "coffee", "rain", "maps")
# Each fact a different length, so that no two are equally close to a query (a tie at the limit
# may be broken either way by either side).
FILLERS = ("on", "sunny", "weekends", "with", "old", "friends", "from", "school", "near", "the", "sea", "often")
QUERIES = [
    ("Rafael likes jazz music", None),
    ("Rafael likes football", "lives_in"),
    ("Rafael loves cats and coffee", "likes"),
    ("Rafael lives in Porto", "lives_in"),
]


def _insert(session: Session, agent: str, fact_text: str, *, attribute: str | None = None, day: int = 0) -> uuid.UUID:
    fact_id = uuid.uuid4()
    session.execute(
        text(
            "INSERT INTO memory_facts (id, agent_id, entity_type, entity_key, entity_name, attribute_key, "
            "fact_text, confidence, importance, valid_from, embedding_vec) VALUES (:id, :agent, 'person', :key, "
            "'Rafael', :attr, :text, 0.9, 0.5, :valid_from, CAST(:vec AS vector))"
        ),
        {
            "id": str(fact_id),
            "agent": agent,
            "key": KEY,
            "attr": attribute,
            "text": fact_text,
            "valid_from": START + timedelta(days=day),
            "vec": vector_param(EMBEDDER.embed_one(fact_text)),
        },
    )
    return fact_id


def _assert_same_answers(session: Session, view: ActiveFactsView, agent: str) -> None:
    for query, attribute in QUERIES:
        vector = EMBEDDER.embed_one(query)
        expected = repository.closest_active_facts(session, agent, KEY, vector, limit=5, attribute_key=attribute)
        answered = view.closest(agent, KEY, vector, limit=5, attribute_key=attribute)
        assert answered is not None
        assert [row.fact_id for row in answered] == [row.fact_id for row in expected], query
        for row, wanted in zip(answered, expected, strict=True):
            assert row.similarity == pytest.approx(wanted.similarity, abs=1e-5)
            assert (row.text, row.attribute_key, row.valid_from) == (
                wanted.text,
                wanted.attribute_key,
                wanted.valid_from,
            )


def test_the_view_answers_as_the_database_after_each_write_of_the_chunk(engine: Engine) -> None:
    agent = f"view-{uuid.uuid4().hex[:8]}"
    with engine.connect() as connection, connection.begin():
        session = Session(bind=connection)
        for day, thing in enumerate(THINGS):
            fact_text = " ".join(("Rafael likes", thing, *FILLERS[:day]))
            _insert(session, agent, fact_text, attribute="likes" if day % 3 == 0 else None, day=day)
        home = _insert(session, agent, "Rafael lives in Recife", attribute="lives_in", day=20)
        view = ActiveFactsView(session, load_after=0)
        _assert_same_answers(session, view, agent)
        assert view.loads == 1

        # Facts the chunk inserts, one of them closer to the first query than any before.
        for day, fact_text in enumerate(("Rafael likes jazz music a lot", "Rafael lives in Porto now")):
            attribute = "lives_in" if "lives" in fact_text else None
            fact_id = _insert(session, agent, fact_text, attribute=attribute, day=30 + day)
            view.inserted(
                agent,
                fact_id,
                entity_key=KEY,
                text=fact_text,
                attribute_key=attribute,
                valid_from=START + timedelta(days=30 + day),
                vector=EMBEDDER.embed_one(fact_text),
            )
        _assert_same_answers(session, view, agent)

        # A fact the chunk closes: no longer among the answers, and a farther one takes its place.
        session.execute(text("UPDATE memory_facts SET valid_to = now() WHERE id = :id"), {"id": str(home)})
        view.closed(agent, home)
        closest_jazz = view.closest(
            agent, KEY, EMBEDDER.embed_one("Rafael likes jazz music"), limit=1, attribute_key=None
        )
        assert closest_jazz is not None
        session.execute(
            text("UPDATE memory_facts SET valid_to = now() WHERE id = :id"), {"id": closest_jazz[0].fact_id}
        )
        view.closed(agent, closest_jazz[0].fact_id)
        _assert_same_answers(session, view, agent)

        # A reinforcement rewrites a fact's wording and vector: the view reads the entity again.
        target = repository.closest_active_facts(session, agent, KEY, EMBEDDER.embed_one("Rafael likes tea"), limit=1)[
            0
        ]
        session.execute(
            text(
                "UPDATE memory_facts SET fact_text = 'Rafael adores green tea', "
                "embedding_vec = CAST(:vec AS vector) WHERE id = :id"
            ),
            {"id": target.fact_id, "vec": vector_param(EMBEDDER.embed_one("Rafael adores green tea"))},
        )
        view.forget(agent, target.fact_id)
        _assert_same_answers(session, view, agent)
        assert view.loads == 2
        session.close()


def test_the_view_leaves_rare_and_large_entities_to_the_database(engine: Engine) -> None:
    agent = f"view-{uuid.uuid4().hex[:8]}"
    vector = EMBEDDER.embed_one("Rafael likes jazz")
    with engine.connect() as connection, connection.begin():
        session = Session(bind=connection)
        for day, thing in enumerate(THINGS[:6]):
            _insert(session, agent, f"Rafael likes {thing}", day=day)
        # The first questions about an entity go to the database; the third loads it.
        view = ActiveFactsView(session, load_after=2)
        assert view.closest(agent, KEY, vector, limit=3, attribute_key=None) is None
        assert view.closest(agent, KEY, vector, limit=3, attribute_key=None) is None
        answered = view.closest(agent, KEY, vector, limit=3, attribute_key=None)
        assert answered is not None
        assert answered[0].text == "Rafael likes jazz"
        # An entity with more active facts than the view may hold is never loaded.
        small = ActiveFactsView(session, load_after=0, max_facts=5)
        assert small.closest(agent, KEY, vector, limit=3, attribute_key=None) is None
        assert small.closest(agent, KEY, vector, limit=3, attribute_key=None) is None
        assert small.loads == 0
        # No vector to compare: the database's own ordering (newest first).
        assert view.closest(agent, KEY, None, limit=3, attribute_key=None) is None
        session.close()
