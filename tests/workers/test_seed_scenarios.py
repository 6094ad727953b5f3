"""The seeds' write-path scenarios, end to end: HTTP in, real workers, PostgreSQL out."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from memory_core.cognition.models import ExtractedEntity, ExtractedFact, ExtractedRelation, ExtractionOutput
from memory_core.cognition.offline import build_offline_write_skills
from memory_core.settings import Settings
from memory_core.write.context import WriteContext, build_write_context
from tests.support.scripted_skills import ScriptedExtraction
from tests.workers.conftest import WritePath, start_write_path

T1 = datetime(2025, 3, 10, 9, 0, tzinfo=UTC)
T2 = datetime(2025, 6, 15, 18, 30, tzinfo=UTC)


def test_moving_city_updates_the_fact_and_invalidates_the_old_edge(write_path: WritePath) -> None:
    first = write_path.post("Eu moro em São Paulo.", "Rafael", occurred_at=T1)
    write_path.wait([first])
    second = write_path.post("Me mudei para o Rio de Janeiro.", "Rafael", occurred_at=T2)
    assert write_path.wait([second]) == {second: "done"}

    memory, agent = write_path.memory, write_path.agent_id
    residence = [f for f in memory.all_facts(agent) if f["attribute_key"] == "location.residence"]
    old = next(f for f in residence if "São Paulo" in f["fact_text"])
    new = next(f for f in residence if "Rio de Janeiro" in f["fact_text"])
    # Portuguese in, Portuguese out, with the speaker in place of "eu".
    assert old["fact_text"] == "Rafael mora em São Paulo."
    assert old["entity_key"] == "person:rafael"
    assert old["valid_to"] == T2
    assert old["invalidated_at"] is not None
    assert new["valid_to"] is None
    assert new["supersedes_fact_id"] == old["id"]
    assert [f["fact_text"] for f in memory.active_facts(agent) if f["attribute_key"] == "location.residence"] == [
        new["fact_text"]
    ]

    edges = {(r["target_entity_key"], r["rel_type"]): r for r in memory.relationships(agent)}
    assert edges[("place:sao_paulo", "lives_in")]["valid_to"] == T2
    assert edges[("place:sao_paulo", "lives_in")]["invalidated_at"] is not None
    assert edges[("place:rio_de_janeiro", "lives_in")]["valid_to"] is None

    result = write_path.event(second)["result"]
    assert len(result["facts_updated"]) == 1
    assert result["facts_updated"][0]["supersedes_fact_id"] == str(old["id"])


def test_fact_is_linked_to_every_entity_it_names(write_path: WritePath) -> None:
    event = write_path.post(
        "Clara Rezende saiu da Vertix e foi pra Orion Tech como head de engenharia. "
        "O Thiago Nogueira a contratou pessoalmente.",
        "Rafael",
        occurred_at=T1,
    )
    write_path.wait([event])
    memory, agent = write_path.memory, write_path.agent_id
    entities = memory.entities(agent)
    assert entities["person:clara_rezende"]["entity_type"] == "person"
    assert entities["organization:vertix"]["entity_type"] == "organization"
    assert entities["organization:orion_tech"]["entity_type"] == "organization"
    assert "person:thiago_nogueira" in entities

    clara = next(f for f in memory.active_facts(agent) if f["entity_key"] == "person:clara_rezende")
    links = memory.links(clara["id"])
    assert links["person:clara_rezende"] is True
    assert links["organization:vertix"] is False
    assert links["organization:orion_tech"] is False
    assert entities["organization:vertix"]["fact_count"] >= 1


def test_alias_given_once_resolves_later_mentions(write_path: WritePath) -> None:
    first = write_path.post("Meu amigo Guili (Guilherme Maturana) trabalha na Vertix.", "Rafael", occurred_at=T1)
    write_path.wait([first])
    memory, agent = write_path.memory, write_path.agent_id
    assert memory.aliases(agent)["guili"] == "person:guilherme_maturana"

    second = write_path.post("O Guili começou um projeto novo de robótica.", "Rafael", occurred_at=T2)
    write_path.wait([second])
    entities = memory.entities(agent)
    assert "person:guili" not in entities
    facts = [f for f in memory.active_facts(agent) if "robótica" in f["fact_text"]]
    assert [f["entity_key"] for f in facts] == ["person:guilherme_maturana"]


def _scripted_path(settings: Settings, output: ExtractionOutput) -> Iterator[WritePath]:
    def context(own: Settings) -> WriteContext:
        offline = build_offline_write_skills()
        scripted = ScriptedExtraction(output)
        skills = offline.__class__(
            kind="offline",
            extract_informed=scripted,
            extract_blind=scripted,
            disambiguate=offline.disambiguate,
            reconcile=offline.reconcile,
            tag_emotion=offline.tag_emotion,
        )
        return build_write_context(own, skills=skills)

    yield from start_write_path(settings, context)


@pytest.fixture
def mirror_path(write_settings: Settings) -> Iterator[WritePath]:
    output = ExtractionOutput(
        entities=[
            ExtractedEntity(name="Rafael", type="person"),
            ExtractedEntity(name="Dona Lúcia", type="person"),
            ExtractedEntity(name="Curitiba", type="place"),
        ],
        facts=[ExtractedFact(subject="Rafael", text="Rafael vai viajar no fim de semana", attribute_key="event")],
        relations=[ExtractedRelation(source="Dona Lúcia", target="Curitiba", type="lives_in")],
    )
    yield from _scripted_path(write_settings, output)


def test_relation_without_a_fact_gets_a_mirror_fact_as_its_evidence(mirror_path: WritePath) -> None:
    event = mirror_path.post("Vou pra Curitiba ver minha mãe no fim de semana.", "Rafael", occurred_at=T1)
    assert mirror_path.wait([event]) == {event: "done"}
    memory, agent = mirror_path.memory, mirror_path.agent_id
    mirror = next(f for f in memory.active_facts(agent) if f["source_context"] == "inferred_from_relation")
    assert mirror["fact_text"] == "Dona Lúcia lives in Curitiba"
    assert mirror["confidence"] == pytest.approx(0.60)
    assert mirror["entity_key"] == "person:dona_lucia"
    edge = next(r for r in memory.relationships(agent) if r["rel_type"] == "lives_in")
    assert edge["evidence_fact_id"] == mirror["id"]
    assert edge["target_entity_key"] == "place:curitiba"


@pytest.fixture
def self_reference_path(write_settings: Settings) -> Iterator[WritePath]:
    output = ExtractionOutput(
        entities=[ExtractedEntity(name="Caroline", type="person", aliases=["Carol"])],
        facts=[ExtractedFact(subject="Carol", text="Caroline adora pintar aquarelas")],
        relations=[ExtractedRelation(source="Carol", target="Caroline", type="child_of")],
    )
    yield from _scripted_path(write_settings, output)


def test_relation_that_points_at_itself_is_dropped(self_reference_path: WritePath) -> None:
    event = self_reference_path.post("A Carol adora pintar aquarelas.", "Rafael", occurred_at=T1)
    assert self_reference_path.wait([event]) == {event: "done"}
    memory, agent = self_reference_path.memory, self_reference_path.agent_id
    assert memory.relationships(agent) == []
    facts = memory.active_facts(agent)
    assert [f["entity_key"] for f in facts] == ["person:caroline"]
    assert memory.aliases(agent)["carol"] == "person:caroline"
