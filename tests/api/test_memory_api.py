"""The memory-management endpoints over real HTTP, on facts written by the real write pipeline.

No worker runs: messages are accepted and taken through every stage in-process (extract,
resolve, reconcile, upsert), exactly what a worker would do, so the facts, entities, links and
relationships under test are the pipeline's own.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, text

from memory_core.write.context import WriteContext
from memory_core.write.intake import IncomingMessage, accept_messages
from memory_core.write.pipeline import run_extract, run_reconcile, run_resolve, run_upsert
from tests.support.api_server import auth_headers

START = datetime(2024, 1, 5, 10, 0, tzinfo=UTC)
STEP = timedelta(days=10)
# Marina's memory: three active facts, one superseded (Lisbon, by the move to Porto), five entities.
MARINA = [
    "I live in Lisbon.",
    "My sister Julia is a doctor.",
    "I have a dog named Rex.",
    "Hi, how are you?",
    "I moved to Porto.",
]
MARINA_ENTITIES = {"person:marina", "person:julia", "pet:rex", "place:lisbon", "place:porto"}


def remember(
    context: WriteContext,
    agent_id: str,
    messages: Sequence[str],
    *,
    speaker: str = "Marina",
    start: datetime = START,
    step: timedelta = STEP,
    id_prefix: str = "m",
) -> list[str]:
    """Run each message through the whole write pipeline in-process, in order; return the event ids.

    Message ``i`` occurs at ``start + i * step`` and has the message id ``{id_prefix}{i}``.
    """
    event_ids: list[str] = []
    for index, message in enumerate(messages):
        with context.sessions.begin() as session:
            accepted = accept_messages(
                session,
                agent_id,
                [
                    IncomingMessage(
                        message=message,
                        speaker_name=speaker,
                        occurred_at=start + index * step,
                        message_id=f"{id_prefix}{index}",
                    )
                ],
            )[0]
        for stage in (run_extract, run_resolve, run_reconcile, run_upsert):
            assert stage(context, accepted.event_id) == "completed"
        event_ids.append(str(accepted.event_id))
    return event_ids


def new_agent(name: str = "agent") -> str:
    return f"{name}-{uuid.uuid4().hex[:10]}"


@dataclass(frozen=True)
class Memory:
    """An agent whose memory was written by the pipeline, and its facts as stored."""

    agent_id: str
    event_ids: list[str]
    facts: dict[str, dict[str, Any]]  # fact_text -> row of memory_facts

    def fact_id(self, fact_text: str) -> str:
        return str(self.facts[fact_text]["id"])


def stored_facts(db: Engine, agent_id: str) -> dict[str, dict[str, Any]]:
    with db.connect() as connection:
        rows = connection.execute(text("SELECT * FROM memory_facts WHERE agent_id = :a"), {"a": agent_id}).all()
    return {row.fact_text: dict(row._mapping) for row in rows}


def count(db: Engine, sql: str, **params: Any) -> int:
    with db.connect() as connection:
        return int(connection.execute(text(sql), params).scalar_one())


def assert_error(response: httpx.Response, status: int, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert isinstance(body["error"], str)
    assert body["error"]
    assert isinstance(body["detail"], list)
    if field is not None:
        assert [item["field"] for item in body["detail"]] == [field], body
        if status == 422:  # the sentence names the field ("query.limit: ..."); a 404 names the id
            assert field in body["error"]
    return dict(body)


# ---- Fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def marina(writer: WriteContext, db: Engine) -> Memory:
    """Read-only for the tests that use it: nothing deletes from this agent."""
    agent_id = new_agent("marina")
    event_ids = remember(writer, agent_id, MARINA)
    return Memory(agent_id, event_ids, stored_facts(db, agent_id))


def fresh_marina(writer: WriteContext, db: Engine) -> Memory:
    """A new agent with Marina's memory, for tests that delete."""
    agent_id = new_agent("marina")
    event_ids = remember(writer, agent_id, MARINA)
    return Memory(agent_id, event_ids, stored_facts(db, agent_id))


# ---- Listing facts -------------------------------------------------------------------------------------

ACTIVE_NEWEST_FIRST = ["Marina moved to Porto.", "Marina has a dog named Rex.", "Marina's sister Julia is a doctor."]


def test_the_pipeline_wrote_what_the_tests_expect(marina: Memory) -> None:
    assert set(marina.facts) == {"Marina lives in Lisbon.", *ACTIVE_NEWEST_FIRST}
    assert marina.facts["Marina lives in Lisbon."]["valid_to"] is not None


def test_facts_lists_the_active_facts_newest_first(client: httpx.Client, marina: Memory) -> None:
    response = client.get(f"/v1/agents/{marina.agent_id}/facts")
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"facts", "total"}
    assert body["total"] == 3
    assert [fact["fact_text"] for fact in body["facts"]] == ACTIVE_NEWEST_FIRST
    porto = body["facts"][0]
    assert porto["fact_id"] == marina.fact_id("Marina moved to Porto.")
    assert porto["entity_key"] == "person:marina"
    assert porto["attribute_key"] == "location.residence"
    assert porto["is_active"] is True
    assert porto["valid_to"] is None
    assert porto["supersedes_fact_id"] == marina.fact_id("Marina lives in Lisbon.")
    assert porto["source_event_id"] == marina.event_ids[4]
    assert porto["speaker"] == "Marina"
    assert datetime.fromisoformat(porto["valid_from"]) == START + 4 * STEP
    assert 0.0 <= porto["confidence"] <= 1.0
    assert isinstance(porto["importance"], float)
    assert datetime.fromisoformat(porto["created_at"])


def test_a_superseded_fact_is_read_by_its_id(client: httpx.Client, marina: Memory) -> None:
    lisbon_id = marina.fact_id("Marina lives in Lisbon.")
    response = client.get(f"/v1/agents/{marina.agent_id}/facts/{lisbon_id}")
    assert response.status_code == 200, response.text
    lisbon = response.json()
    assert lisbon["fact_id"] == lisbon_id
    assert lisbon["fact_text"] == "Marina lives in Lisbon."
    assert lisbon["is_active"] is False
    assert datetime.fromisoformat(lisbon["valid_from"]) == START
    assert datetime.fromisoformat(lisbon["valid_to"]) == START + 4 * STEP
    assert lisbon["source_event_id"] == marina.event_ids[0]
    # And an active one, by id too.
    julia_id = marina.fact_id("Marina's sister Julia is a doctor.")
    julia = client.get(f"/v1/agents/{marina.agent_id}/facts/{julia_id}").json()
    assert julia["is_active"] is True
    assert julia["entity_key"] == "person:julia"
    assert julia["entity_type"] == "person"


def test_facts_are_paginated(client: httpx.Client, marina: Memory) -> None:
    seen: list[str] = []
    for offset in range(4):
        response = client.get(f"/v1/agents/{marina.agent_id}/facts", params={"limit": 1, "offset": offset})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["total"] == 3
        seen.extend(fact["fact_text"] for fact in body["facts"])
        assert len(body["facts"]) == (1 if offset < 3 else 0)
    assert seen == ACTIVE_NEWEST_FIRST
    two = client.get(f"/v1/agents/{marina.agent_id}/facts", params={"limit": 2, "offset": 1}).json()
    assert [fact["fact_text"] for fact in two["facts"]] == ACTIVE_NEWEST_FIRST[1:]
    far = client.get(f"/v1/agents/{marina.agent_id}/facts", params={"limit": 500, "offset": 1000}).json()
    assert far == {"facts": [], "total": 3}


def test_facts_are_filtered_by_entity_keys(client: httpx.Client, marina: Memory) -> None:
    url = f"/v1/agents/{marina.agent_id}/facts"
    julia = client.get(url, params={"entity_keys": "person:julia"}).json()
    assert [fact["fact_text"] for fact in julia["facts"]] == ["Marina's sister Julia is a doctor."]
    assert julia["total"] == 1
    both = client.get(url, params={"entity_keys": " person:julia , person:marina,,"}).json()
    assert [fact["fact_text"] for fact in both["facts"]] == ACTIVE_NEWEST_FIRST
    assert both["total"] == 3
    assert client.get(url, params={"entity_keys": "place:nowhere"}).json() == {"facts": [], "total": 0}
    # An empty filter is no filter.
    assert client.get(url, params={"entity_keys": ""}).json()["total"] == 3


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": 0}, "query.limit"),
        ({"limit": 501}, "query.limit"),
        ({"limit": "ten"}, "query.limit"),
        ({"offset": -1}, "query.offset"),
        ({"offset": "x"}, "query.offset"),
        ({"entity_keys": "person:a\x00"}, "query.entity_keys"),
        ({"entity_keys": "k" * 300}, "query.entity_keys"),
    ],
)
def test_bad_list_parameters_are_422_naming_them(
    client: httpx.Client, marina: Memory, params: dict[str, Any], field: str
) -> None:
    assert_error(client.get(f"/v1/agents/{marina.agent_id}/facts", params=params), 422, field)
    if "entity_keys" not in params:
        assert_error(client.get(f"/v1/agents/{marina.agent_id}/entities", params=params), 422, field)


def test_the_page_size_limits_are_inclusive(client: httpx.Client, marina: Memory) -> None:
    for limit in (1, 500):
        assert client.get(f"/v1/agents/{marina.agent_id}/facts", params={"limit": limit}).status_code == 200
        assert client.get(f"/v1/agents/{marina.agent_id}/entities", params={"limit": limit}).status_code == 200


def test_unknown_and_malformed_fact_ids(client: httpx.Client, marina: Memory) -> None:
    missing = assert_error(client.get(f"/v1/agents/{marina.agent_id}/facts/{uuid.uuid4()}"), 404, "path.fact_id")
    assert "not found" in missing["error"]
    assert_error(client.get(f"/v1/agents/{marina.agent_id}/facts/not-a-uuid"), 422, "path.fact_id")
    assert_error(client.delete(f"/v1/agents/{marina.agent_id}/facts/12345"), 422, "path.fact_id")
    assert_error(client.delete(f"/v1/agents/{marina.agent_id}/facts/{uuid.uuid4()}"), 404, "path.fact_id")


def test_a_bad_agent_id_is_422(client: httpx.Client) -> None:
    for path in ("facts", "entities", f"facts/{uuid.uuid4()}"):
        assert_error(client.get(f"/v1/agents/bad%20agent/{path}"), 422, "path.agent_id")
    assert_error(client.delete("/v1/agents/bad%20agent/facts"), 422, "path.agent_id")


def test_every_endpoint_needs_a_key(client: httpx.Client, marina: Memory) -> None:
    base = f"{client.base_url}/v1/agents/{marina.agent_id}"
    fact_id = marina.fact_id("Marina moved to Porto.")
    for method, url in [
        ("GET", f"{base}/facts"),
        ("GET", f"{base}/facts/{fact_id}"),
        ("DELETE", f"{base}/facts/{fact_id}"),
        ("DELETE", f"{base}/facts"),
        ("GET", f"{base}/entities"),
        ("GET", f"{base}/entities/person:marina"),
    ]:
        response = httpx.request(method, url, headers=auth_headers("wrong-key"))
        assert response.status_code == 401, (method, url)
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert client.get(f"/v1/agents/{marina.agent_id}/facts/{fact_id}").status_code == 200


# ---- Entities -------------------------------------------------------------------------------------------


def test_entities_lists_the_agents_entities(client: httpx.Client, marina: Memory) -> None:
    response = client.get(f"/v1/agents/{marina.agent_id}/entities")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["total"] == len(MARINA_ENTITIES)
    by_key = {entity["canonical_key"]: entity for entity in body["entities"]}
    assert set(by_key) == MARINA_ENTITIES
    person = by_key["person:marina"]
    assert set(person) >= {
        "entity_id",
        "canonical_key",
        "display_name",
        "entity_type",
        "summary_text",
        "fact_count",
        "importance_score",
        "first_seen_at",
        "last_seen_at",
        "profile_text",
    }
    assert person["display_name"] == "Marina"
    assert person["entity_type"] == "person"
    assert person["fact_count"] >= 2
    assert uuid.UUID(person["entity_id"])
    assert datetime.fromisoformat(person["first_seen_at"]) <= datetime.fromisoformat(person["last_seen_at"])
    assert by_key["pet:rex"]["entity_type"] == "pet"


def test_entities_are_paginated(client: httpx.Client, marina: Memory) -> None:
    keys: list[str] = []
    for offset in (0, 2, 4):
        body = client.get(f"/v1/agents/{marina.agent_id}/entities", params={"limit": 2, "offset": offset}).json()
        assert body["total"] == len(MARINA_ENTITIES)
        keys.extend(entity["canonical_key"] for entity in body["entities"])
    assert len(keys) == len(MARINA_ENTITIES)
    assert set(keys) == MARINA_ENTITIES
    assert client.get(f"/v1/agents/{new_agent()}/entities").json() == {"entities": [], "total": 0}


def test_one_entity_by_key_or_alias_with_aliases_and_relationships(client: httpx.Client, marina: Memory) -> None:
    response = client.get(f"/v1/agents/{marina.agent_id}/entities/person:marina")
    assert response.status_code == 200, response.text
    person = response.json()
    assert person["canonical_key"] == "person:marina"
    assert person["display_name"] == "Marina"
    assert person["fact_count"] >= 2
    edges = {
        (edge["source_entity_key"], edge["rel_type"], edge["target_entity_key"]) for edge in person["relationships"]
    }
    assert any(source == "person:marina" and target == "pet:rex" for source, _, target in edges), edges
    assert any("person:julia" in (source, target) for source, _, target in edges), edges
    assert all(edge["strength"] > 0 for edge in person["relationships"])
    # A name finds the entity too, as entity_keys filters do.
    by_name = client.get(f"/v1/agents/{marina.agent_id}/entities/Rex")
    assert by_name.status_code == 200, by_name.text
    assert by_name.json()["canonical_key"] == "pet:rex"
    assert by_name.json()["aliases"] == client.get(f"/v1/agents/{marina.agent_id}/entities/pet:rex").json()["aliases"]


def test_an_unknown_entity_is_404_and_another_agents_too(client: httpx.Client, marina: Memory) -> None:
    assert_error(client.get(f"/v1/agents/{marina.agent_id}/entities/person:nobody"), 404, "path.entity_key")
    assert_error(client.get(f"/v1/agents/{new_agent()}/entities/person:marina"), 404, "path.entity_key")
    assert_error(client.get(f"/v1/agents/{marina.agent_id}/entities/{'x' * 300}"), 422, "path.entity_key")


# ---- Deleting ---------------------------------------------------------------------------------------------


def test_deleting_a_fact_removes_it_and_its_links(client: httpx.Client, writer: WriteContext, db: Engine) -> None:
    memory = fresh_marina(writer, db)
    rex_id = memory.fact_id("Marina has a dog named Rex.")
    links = "SELECT count(*) FROM memory_fact_entity_links WHERE fact_id = :f"
    assert count(db, links, f=rex_id) == 2  # person:marina (primary) and pet:rex

    response = client.delete(f"/v1/agents/{memory.agent_id}/facts/{rex_id}")
    assert response.status_code == 200, response.text
    assert response.json() == {"deleted": 1}

    assert_error(client.get(f"/v1/agents/{memory.agent_id}/facts/{rex_id}"), 404, "path.fact_id")
    assert count(db, "SELECT count(*) FROM memory_facts WHERE id = :f", f=rex_id) == 0
    assert count(db, links, f=rex_id) == 0
    # The relationship it was evidence of stays, without evidence.
    evidence = "SELECT count(*) FROM memory_entity_relationships WHERE evidence_fact_id = :f"
    assert count(db, evidence, f=rex_id) == 0
    remaining = client.get(f"/v1/agents/{memory.agent_id}/facts").json()
    assert remaining["total"] == 2
    assert "Marina has a dog named Rex." not in [fact["fact_text"] for fact in remaining["facts"]]
    # Gone is gone.
    assert_error(client.delete(f"/v1/agents/{memory.agent_id}/facts/{rex_id}"), 404, "path.fact_id")


def test_deleting_a_superseded_fact_keeps_its_successor(client: httpx.Client, writer: WriteContext, db: Engine) -> None:
    memory = fresh_marina(writer, db)
    lisbon_id = memory.fact_id("Marina lives in Lisbon.")
    porto_id = memory.fact_id("Marina moved to Porto.")
    assert client.delete(f"/v1/agents/{memory.agent_id}/facts/{lisbon_id}").json() == {"deleted": 1}
    porto = client.get(f"/v1/agents/{memory.agent_id}/facts/{porto_id}").json()
    assert porto["is_active"] is True
    assert porto["supersedes_fact_id"] is None
    assert client.get(f"/v1/agents/{memory.agent_id}/facts").json()["total"] == 3


def test_deleting_every_fact_counts_history_too(client: httpx.Client, writer: WriteContext, db: Engine) -> None:
    memory = fresh_marina(writer, db)
    bystander = fresh_marina(writer, db)
    response = client.delete(f"/v1/agents/{memory.agent_id}/facts")
    assert response.status_code == 200, response.text
    assert response.json() == {"deleted": 4}  # three active facts and the superseded one
    assert client.get(f"/v1/agents/{memory.agent_id}/facts").json() == {"facts": [], "total": 0}
    assert count(db, "SELECT count(*) FROM memory_facts WHERE agent_id = :a", a=memory.agent_id) == 0
    assert count(db, "SELECT count(*) FROM memory_fact_entity_links WHERE agent_id = :a", a=memory.agent_id) == 0
    assert client.delete(f"/v1/agents/{memory.agent_id}/facts").json() == {"deleted": 0}
    # Another agent's memory is untouched.
    assert client.get(f"/v1/agents/{bystander.agent_id}/facts").json()["total"] == 3
    assert count(db, "SELECT count(*) FROM memory_facts WHERE agent_id = :a", a=bystander.agent_id) == 4


# ---- Isolation ----------------------------------------------------------------------------------------------


def test_an_agent_never_sees_or_touches_another_agents_memory(
    client: httpx.Client, writer: WriteContext, db: Engine
) -> None:
    # Same speaker, same names: both agents have a person:marina and a person:julia of their own.
    a = fresh_marina(writer, db)
    b_id = new_agent("other")
    b_events = remember(writer, b_id, ["I live in Madrid.", "My sister Julia is a nurse."], id_prefix="m")
    b = Memory(b_id, b_events, stored_facts(db, b_id))
    assert set(b.facts) == {"Marina lives in Madrid.", "Marina's sister Julia is a nurse."}
    a_ids = {str(row["id"]) for row in a.facts.values()}
    b_ids = {str(row["id"]) for row in b.facts.values()}
    assert not a_ids & b_ids

    def visible(agent_id: str) -> tuple[set[str], set[str]]:
        facts = client.get(f"/v1/agents/{agent_id}/facts", params={"limit": 500}).json()
        entities = client.get(f"/v1/agents/{agent_id}/entities", params={"limit": 500}).json()
        assert facts["total"] == len(facts["facts"])
        assert entities["total"] == len(entities["entities"])
        return {f["fact_id"] for f in facts["facts"]}, {e["entity_id"] for e in entities["entities"]}

    a_facts, a_entities = visible(a.agent_id)
    b_facts, b_entities = visible(b.agent_id)
    assert b_facts == b_ids
    assert a_facts <= a_ids
    assert not a_entities & b_entities
    b_keys = {e["canonical_key"] for e in client.get(f"/v1/agents/{b.agent_id}/entities").json()["entities"]}
    assert b_keys == {"person:marina", "person:julia", "place:madrid"}
    # Filtering by a key both agents have still shows only the asker's facts.
    julia = client.get(f"/v1/agents/{b.agent_id}/facts", params={"entity_keys": "person:julia"}).json()
    assert [fact["fact_text"] for fact in julia["facts"]] == ["Marina's sister Julia is a nurse."]

    # Reads of A's ids through B's paths: 404, and the answer names nothing of A's.
    for fact_id in a_ids:
        hidden = client.get(f"/v1/agents/{b.agent_id}/facts/{fact_id}")
        assert_error(hidden, 404, "path.fact_id")
        assert a.agent_id not in hidden.text
    for event_id in a.event_ids:
        assert client.get(f"/v1/agents/{b.agent_id}/events/{event_id}").status_code == 404
        assert client.get(f"/v1/agents/{a.agent_id}/events/{event_id}").status_code == 200

    # Retrieval for B finds B's sister, never A's facts (nor A's relationships' facts).
    found = client.post(
        f"/v1/agents/{b.agent_id}/retrieve",
        json={"query": "What does Julia do? Where does Marina live?", "verbose": True},
    )
    assert found.status_code == 200, found.text
    assert {fact["fact_id"] for fact in found.json()["facts"]} <= b_ids
    for fact_id in a_ids:
        assert fact_id not in found.text
    for word in ("doctor", "Lisbon", "Porto", "Rex"):
        assert word not in found.text

    # Deletes aimed at A's ids through B's paths: 404, and A keeps every fact.
    for fact_id in a_ids:
        assert_error(client.delete(f"/v1/agents/{b.agent_id}/facts/{fact_id}"), 404, "path.fact_id")
    assert client.delete(f"/v1/agents/{b.agent_id}/facts").json() == {"deleted": 2}
    assert stored_facts(db, a.agent_id).keys() == a.facts.keys()
    assert visible(a.agent_id) == (a_facts, a_entities)
    assert client.get(f"/v1/agents/{b.agent_id}/facts").json() == {"facts": [], "total": 0}
