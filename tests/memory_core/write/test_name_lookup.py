"""``lookup_names``: the answers of the three name lookups of the resolve stage, in one statement."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from memory_core.write import repository
from memory_core.write.context import WriteContext


def _seed(session: Session, agent: str) -> None:
    for key, name, kind in (
        ("person:ana_souza", "Ana Souza", "person"),
        ("person:ana", "Ana", "person"),
        ("pet:ana", "Ana", "pet"),
        ("place:sao_paulo", "São Paulo", "place"),
        ("organization:acme", "Acme", "organization"),
    ):
        session.execute(
            text(
                "INSERT INTO memory_entities (agent_id, canonical_key, display_name, entity_type, profile_text) "
                "VALUES (:agent, :key, :name, :type, :profile)"
            ),
            {"agent": agent, "key": key, "name": name, "type": kind, "profile": f"about {name}"},
        )
    for alias, key in (("aninha", "person:ana_souza"), ("sp", "place:sao_paulo"), ("sampa", "place:sao_paulo")):
        session.execute(
            text(
                "INSERT INTO memory_entity_aliases (agent_id, alias, canonical_entity_key, canonical_entity_type) "
                "VALUES (:agent, :alias, :key, 'x')"
            ),
            {"agent": agent, "alias": alias, "key": key},
        )


@pytest.mark.parametrize(
    ("aliases", "keys", "display_names"),
    [
        (["Aninha", "Ana", "SP"], ["person:ana", "organization:nope"], ["Ana", "ana souza", "Nobody"]),
        (["Sampa"], [], []),
        ([], ["organization:acme"], []),
        ([], [], ["ACME", " são paulo "]),
        (["nobody"], ["person:nobody"], ["Nobody"]),
        ([], [], []),
    ],
)
def test_one_lookup_answers_as_the_three_it_replaces(
    context: WriteContext, aliases: list[str], keys: list[str], display_names: list[str]
) -> None:
    agent = f"agent-{uuid.uuid4().hex[:8]}"
    with context.sessions.begin() as session:
        _seed(session, agent)
        _seed(session, f"{agent}-other")  # another agent's rows never answer
    with context.sessions() as session:
        found = repository.lookup_names(session, agent, aliases=aliases, keys=keys, display_names=display_names)
        alias_hits = repository.aliases_for(session, agent, aliases)
        assert found.aliases == alias_hits
        assert found.by_key == repository.entities_by_keys(session, agent, [*keys, *alias_hits.values()])
        assert found.by_display_name == repository.entities_by_display_name(session, agent, display_names)


def test_a_chunks_alias_lookup_answers_as_each_messages_own_lookups(context: WriteContext) -> None:
    """``known_aliases`` (the extract stage's one statement per chunk) gives every message the same answers."""
    first, second = f"agent-{uuid.uuid4().hex[:8]}", f"agent-{uuid.uuid4().hex[:8]}"
    with context.sessions.begin() as session:
        _seed(session, first)
        _seed(session, f"{second}-unrelated")
        # The second agent knows "sampa" as another entity, and one alias whose entity is gone.
        for alias, key in (("sampa", "place:santo_amaro"), ("ghost", "person:ghost")):
            session.execute(
                text(
                    "INSERT INTO memory_entity_aliases (agent_id, alias, canonical_entity_key, canonical_entity_type) "
                    "VALUES (:agent, :alias, :key, 'x')"
                ),
                {"agent": second, "alias": alias, "key": key},
            )
        session.execute(
            text(
                "INSERT INTO memory_entities (agent_id, canonical_key, display_name, entity_type) "
                "VALUES (:agent, 'place:santo_amaro', 'Santo Amaro', 'place')"
            ),
            {"agent": second},
        )
    messages = [
        (first, "A Aninha foi pra Sampa com a Ana"),
        (second, "Sampa e o ghost de novo"),
        (first, "nada conhecido aqui"),
        (second, "aninha? nao conheco"),
    ]
    with context.sessions() as session:
        known = repository.known_aliases(session, [(agent, repository.message_ngrams(m)) for agent, m in messages])
        for agent, message in messages:
            grams = repository.message_ngrams(message)
            own = repository.aliases_for(session, agent, grams)
            assert known.aliases_for(agent, grams) == own
            assert known.entities_by_keys(agent, own.values()) == repository.entities_by_keys(
                session, agent, own.values()
            )
    assert known.aliases_for(first, ["aninha", "sampa"]) == {"aninha": "person:ana_souza", "sampa": "place:sao_paulo"}
    assert known.aliases_for(second, ["sampa", "ghost", "aninha"]) == {
        "sampa": "place:santo_amaro",
        "ghost": "person:ghost",
    }
    assert known.entities_by_keys(second, ["person:ghost"]) == {}  # an alias whose entity is gone
