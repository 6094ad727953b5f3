"""Managing memory (M1): get, list, delete facts and list entities, always scoped by agent."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from memory_core.read.context import ReadContext
from memory_core.read.management import delete_all_facts, delete_fact, get_fact, list_entities, list_facts
from tests.memory_core.read.conftest import MemoryBuilder


def test_get_fact_includes_superseded_facts_and_is_agent_scoped(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    rafael = memory.entity("Rafael")
    old = memory.fact(
        "Rafael mora em Lisboa",
        rafael,
        valid_from=datetime(2023, 1, 1, tzinfo=UTC),
        valid_to=datetime(2024, 1, 1, tzinfo=UTC),
        attribute_key="location.residence",
        speaker="Rafael",
    )
    with read_ctx.sessions() as session:
        detail = get_fact(session, memory.agent_id, old)
        assert detail is not None
        assert detail.fact_text == "Rafael mora em Lisboa"
        assert detail.is_active is False
        assert detail.valid_to == datetime(2024, 1, 1, tzinfo=UTC)
        assert detail.entity_key == "person:rafael"
        assert detail.entity_type == "person"
        assert detail.attribute_key == "location.residence"
        assert detail.speaker == "Rafael"
        assert get_fact(session, memory.agent_id + "-other", old) is None
        assert get_fact(session, memory.agent_id, "not-a-uuid") is None
        assert get_fact(session, memory.agent_id, "00000000-0000-0000-0000-000000000000") is None


def test_list_facts_active_newest_first_paged_and_filtered(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    pedro = memory.entity("Pedro Menezes", aliases=["Pedro"])
    ana = memory.entity("Ana")
    ids = []
    for i in range(5):
        ids.append(memory.fact(f"Pedro fato {i}", pedro))
    linked = memory.fact("Ana conhece o Pedro", ana, links=[pedro])
    ana_only = memory.fact("Ana mora em Recife", ana)
    memory.fact("Pedro morava em Natal", pedro, valid_to=datetime.now(UTC) - timedelta(days=1))
    with read_ctx.sessions() as session:
        page, total = list_facts(session, memory.agent_id, limit=3, offset=0)
        assert total == 7
        assert [f.fact_id for f in page] == [ana_only, linked, ids[4]]
        assert all(f.is_active for f in page)
        rest, _ = list_facts(session, memory.agent_id, limit=10, offset=3)
        assert [f.fact_id for f in rest] == [ids[3], ids[2], ids[1], ids[0]]
        beyond, total_beyond = list_facts(session, memory.agent_id, limit=10, offset=50)
        assert beyond == []
        assert total_beyond == 7
        pedros, pedro_total = list_facts(session, memory.agent_id, limit=50, entity_keys=["person:pedro"])
        assert pedro_total == 6
        assert linked in {f.fact_id for f in pedros}
        assert ana_only not in {f.fact_id for f in pedros}
        _either, either_total = list_facts(
            session, memory.agent_id, limit=50, entity_keys=["person:pedro_menezes", "person:ana"]
        )
        assert either_total == 7
        none, none_total = list_facts(session, memory.agent_id, limit=50, entity_keys=["person:nobody"])
        assert none == []
        assert none_total == 0
        assert list_facts(session, memory.agent_id + "-other", limit=50) == ([], 0)


def test_delete_fact_is_hard_cascades_links_and_keeps_relationships(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    ana = memory.entity("Ana")
    stone = memory.entity("Stone", "organization")
    fact = memory.fact("Ana trabalha na Stone", ana, links=[stone])
    memory.fact("Ana mora em Recife", ana)
    memory.relationship(ana, stone, "works_at", evidence_fact_id=fact)
    memory.rows("SELECT 1")  # the builder committed everything
    with read_ctx.sessions.begin() as session:
        assert delete_fact(session, memory.agent_id + "-other", fact) is False
        assert delete_fact(session, memory.agent_id, "garbage") is False
        assert delete_fact(session, memory.agent_id, fact) is True
        assert delete_fact(session, memory.agent_id, fact) is False
    assert memory.rows("SELECT id FROM memory_facts WHERE id = :id", id=fact) == []
    assert memory.rows("SELECT id FROM memory_fact_entity_links WHERE fact_id = :id", id=fact) == []
    edges = memory.rows("SELECT evidence_fact_id FROM memory_entity_relationships WHERE agent_id = :agent")
    assert [edge.evidence_fact_id for edge in edges] == [None]
    counts = {
        row.canonical_key: row.fact_count
        for row in memory.rows("SELECT canonical_key, fact_count FROM memory_entities WHERE agent_id = :agent")
    }
    assert counts == {"person:ana": 1, "organization:stone": 0}


def test_delete_all_facts_counts_and_spares_other_agents(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    other = dataclasses.replace(memory, agent_id=memory.agent_id + "-b")
    ana = memory.entity("Ana")
    for i in range(3):
        memory.fact(f"Ana fato {i}", ana)
    memory.fact("Ana fato antigo", ana, valid_to=datetime.now(UTC))
    kept = other.fact("Fato de outro agente", "person:ana")
    with read_ctx.sessions.begin() as session:
        assert delete_all_facts(session, memory.agent_id) == 4
        assert delete_all_facts(session, memory.agent_id) == 0
    assert memory.rows("SELECT count(*) AS n FROM memory_facts WHERE agent_id = :agent")[0].n == 0
    assert [str(r.id) for r in other.rows("SELECT id FROM memory_facts WHERE agent_id = :agent")] == [kept]
    assert memory.rows("SELECT canonical_key FROM memory_entities WHERE agent_id = :agent")  # entities stay


def test_list_entities_by_last_seen_with_details(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    now = datetime.now(UTC)
    memory.entity("Old", last_seen_at=now - timedelta(days=30))
    memory.entity(
        "Stone",
        "organization",
        last_seen_at=now,
        importance=0.8,
        summary="A Brazilian fintech.",
        profile="Stone is a payments company.",
    )
    memory.entity("Gone", active=False)
    with read_ctx.sessions() as session:
        entities, total = list_entities(session, memory.agent_id, limit=10)
        assert total == 2
        assert [e.canonical_key for e in entities] == ["organization:stone", "person:old"]
        stone = entities[0]
        assert stone.entity_type == "organization"
        assert stone.display_name == "Stone"
        assert stone.summary_text == "A Brazilian fintech."
        assert stone.profile_text == "Stone is a payments company."
        assert stone.importance_score == 0.8
        assert stone.fact_count == 0
        page, _ = list_entities(session, memory.agent_id, limit=1, offset=1)
        assert [e.canonical_key for e in page] == ["person:old"]
        assert list_entities(session, memory.agent_id + "-x") == ([], 0)
