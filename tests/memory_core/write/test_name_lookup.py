"""``lookup_names``: the answers of the three name lookups of the resolve stage, in one statement."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from memory_core.settings import Settings
from memory_core.write import repository
from memory_core.write.context import WriteContext, build_write_context


@pytest.fixture
def context(settings: Settings) -> Iterator[WriteContext]:
    built = build_write_context(settings)
    try:
        yield built
    finally:
        built.close()


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
