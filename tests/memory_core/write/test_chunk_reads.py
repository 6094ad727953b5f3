"""A chunk's reads made once for all its messages: each message still gets what it reads alone.

The extract stage reads every message's known entities' closest facts in one statement
(``chunk_closest_facts``), and the resolve stage every message's name lookups in one statement
per agent (``lookup_names_many``); each message's answer must be the one its own reads give.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.orm import Session

from memory_core.cognition.models import ExtractedEntity
from memory_core.config import MemoryConfig
from memory_core.db.vectors import vector_param
from memory_core.write import repository
from memory_core.write.context import WriteContext
from memory_core.write.extract import chunk_closest_facts, chunk_known_aliases, known_entities_for
from memory_core.write.resolve import name_lookup_request

START = datetime(2025, 1, 1, tzinfo=UTC)


class StatementCounter:
    """Counts the statements a session sends (what a chunk's single read saves)."""

    def __init__(self, session: Session) -> None:
        self.count = 0
        self.engine = session.get_bind()
        event.listen(self.engine, "before_cursor_execute", self._seen)

    def _seen(self, *_: Any) -> None:
        self.count += 1

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._seen)


def _entity(
    session: Session, agent: str, key: str, name: str, kind: str, *, aliases: list[str], profile: str | None
) -> None:
    session.execute(
        text(
            "INSERT INTO memory_entities (agent_id, canonical_key, display_name, entity_type, profile_text) "
            "VALUES (:agent, :key, :name, :type, :profile)"
        ),
        {"agent": agent, "key": key, "name": name, "type": kind, "profile": profile},
    )
    for alias in aliases:
        session.execute(
            text(
                "INSERT INTO memory_entity_aliases (agent_id, alias, canonical_entity_key, canonical_entity_type) "
                "VALUES (:agent, :alias, :key, :type)"
            ),
            {"agent": agent, "alias": alias, "key": key, "type": kind},
        )


def _fact(
    context: WriteContext, session: Session, agent: str, key: str, fact_text: str, *, day: int, **extra: Any
) -> None:
    session.execute(
        text(
            "INSERT INTO memory_facts (id, agent_id, entity_type, entity_key, entity_name, attribute_key, fact_text, "
            "confidence, importance, valid_from, valid_to, embedding_vec) VALUES (:id, :agent, 'person', :key, 'X', "
            ":attr, :text, 0.9, 0.5, :valid_from, :valid_to, CAST(:vec AS vector))"
        ),
        {
            "id": str(uuid.uuid4()),
            "agent": agent,
            "key": key,
            "attr": extra.get("attribute"),
            "text": fact_text,
            "valid_from": START + timedelta(days=day),
            "valid_to": START + timedelta(days=day + 1) if extra.get("closed") else None,
            "vec": vector_param(context.embedder.embed_one(fact_text)),
        },
    )


def _seed_agent(session: Session, context: WriteContext, agent: str, partner: str) -> None:
    _entity(session, agent, "person:rafael", "Rafael", "person", aliases=["rafael", "rafa"], profile=None)
    _entity(
        session,
        agent,
        f"person:{partner.lower()}",
        partner,
        "person",
        aliases=[partner.lower()],
        profile=f"{partner} is a nurse",
    )
    _entity(session, agent, "place:recife", "Recife", "place", aliases=["recife"], profile=None)
    things = ["jazz", "chess", "hiking", "rice", "tea", "opera", "cats", "samba", "surf", "coffee", "trains", "maps"]
    for day, thing in enumerate(things):
        _fact(context, session, agent, "person:rafael", f"Rafael likes {thing}", day=day)
        _fact(context, session, agent, f"person:{partner.lower()}", f"{partner} enjoys {thing} on weekends", day=day)
    _fact(context, session, agent, "person:rafael", "Rafael lives in Recife", day=20, attribute="lives_in")
    _fact(context, session, agent, "person:rafael", "Rafael lives in Natal", day=1, attribute="lives_in", closed=True)
    _fact(
        context,
        session,
        agent,
        f"person:{partner.lower()}",
        f"{partner} works at the hospital",
        day=21,
        attribute="works_at",
    )


def test_a_chunks_pre_retrieval_shows_every_message_what_its_own_reads_show(context: WriteContext) -> None:
    first, second = f"agent-{uuid.uuid4().hex[:8]}", f"agent-{uuid.uuid4().hex[:8]}"
    with context.sessions.begin() as session:
        _seed_agent(session, context, first, "Carol")
        _seed_agent(session, context, second, "Bia")
    config = MemoryConfig()
    blind = MemoryConfig(enable_informed_extraction=False)
    messages = [
        (first, "Rafael", "Carol and I went to a jazz bar in Recife", config),
        (second, "Bia", "Rafa still drinks too much coffee", config),
        (first, "Carol", "I started a new job, hiking on Sundays now", config),
        (second, "Rafael", "nothing anyone knows here", config),
        (first, "Rafael", "Carol loves opera", blind),
        (second, "Bia", "   ", config),
    ]
    vectors = [context.embedder.embed_one(message) for _, _, message, _ in messages]
    with Session(bind=context.autocommit_engine) as session:
        known = chunk_known_aliases(
            session,
            [(agent, message) for agent, _, message, _ in messages],
            [each for _, _, _, each in messages],
            [speaker for _, speaker, _, _ in messages],
        )
        counter = StatementCounter(session)
        try:
            closest = chunk_closest_facts(
                session,
                known,
                [
                    (agent, message, speaker, vector, each)
                    for (agent, speaker, message, each), vector in zip(messages, vectors, strict=True)
                ],
            )
        finally:
            counter.close()
        # One statement for the whole chunk's searches (there were one per entity per message).
        assert counter.count == 1
        shown_any = 0
        for (agent, speaker, message, each), vector, facts in zip(messages, vectors, closest, strict=True):
            alone = known_entities_for(session, agent, message, vector, each, speaker=speaker)
            together = known_entities_for(
                session, agent, message, vector, each, lookup=known, speaker=speaker, closest=facts
            )
            assert together == alone
            shown_any += sum(len(entity.facts) for entity in together)
            if not each.enable_informed_extraction or vector is None:
                assert facts == {}  # nothing read for it: it reads its own, as before
    assert shown_any > 10
    assert set(closest[0]) == {"person:rafael", "person:carol", "place:recife"}
    assert "Rafael lives in Natal" not in {fact.text for found in closest for facts in found.values() for fact in facts}


def test_a_chunks_name_lookups_answer_as_each_messages_own(context: WriteContext) -> None:
    first, second = f"agent-{uuid.uuid4().hex[:8]}", f"agent-{uuid.uuid4().hex[:8]}"
    with context.sessions.begin() as session:
        _entity(
            session,
            first,
            "person:ana_souza",
            "Ana Souza",
            "person",
            aliases=["aninha", "ana souza"],
            profile="about Ana",
        )
        _entity(session, first, "person:ana", "Ana", "person", aliases=["ana"], profile=None)
        _entity(session, first, "pet:ana", "Ana", "pet", aliases=[], profile=None)
        _entity(session, first, "place:sao_paulo", "São Paulo", "place", aliases=["sp", "sampa"], profile=None)
        _entity(session, second, "place:santo_amaro", "Santo Amaro", "place", aliases=["sampa"], profile=None)
        _entity(session, second, "person:ana", "Ana", "person", aliases=["ana"], profile=None)

    def entities(*items: tuple[str, str, list[str]]) -> list[ExtractedEntity]:
        return [ExtractedEntity(name=name, type=kind, aliases=aliases) for name, kind, aliases in items]

    requests = [
        (first, entities(("Aninha", "person", []), ("Sampa", "place", ["SP"]))),
        (second, entities(("Sampa", "place", []), ("Ana", "person", []))),
        (first, entities(("Ana", "pet", []), ("ana souza", "person", ["Ana (a friend)"]))),
        (first, entities(("Nobody", "person", []))),
        (second, []),
        (first, entities(("Ana (namorada do Rafael)", "person", []), ("são paulo", "place", []))),
    ]
    with Session(bind=context.autocommit_engine) as session:
        counter = StatementCounter(session)
        try:
            together = repository.lookup_names_many(
                session, [(agent, name_lookup_request(asked)) for agent, asked in requests]
            )
        finally:
            counter.close()
        assert counter.count == 2  # one per agent, not one per message
        for (agent, asked), found in zip(requests, together, strict=True):
            request = name_lookup_request(asked)
            alone = repository.lookup_names(
                session, agent, aliases=request.aliases, keys=request.keys, display_names=request.display_names
            )
            assert found == alone
    assert together[0].aliases == {"aninha": "person:ana_souza", "sampa": "place:sao_paulo", "sp": "place:sao_paulo"}
    assert together[1].aliases == {"sampa": "place:santo_amaro", "ana": "person:ana"}
    assert together[3] == repository.NameLookup({}, {}, {})
    assert [row.canonical_key for row in together[2].by_display_name["ana"]] == ["person:ana", "pet:ana"]
