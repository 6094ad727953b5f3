"""``POST /v1/agents/{agent_id}/retrieve`` over real HTTP, on memory written by the real write pipeline."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from memory_core.db.engine import create_db_engine
from memory_core.settings import Settings
from memory_core.write.context import WriteContext, build_write_context
from tests.api.test_memory_api import START, STEP, Memory, assert_error, new_agent, remember, stored_facts
from tests.support.api_server import auth_headers

# Lisbon from START, Porto from START + 4 * STEP (Lisbon's valid_to).
HISTORY = [
    "I live in Lisbon.",
    "My sister Julia is a doctor.",
    "I have a dog named Rex.",
    "I love jazz.",
    "I moved to Porto.",
]
FACT_FIELDS = {
    "fact_id",
    "entity_name",
    "entity_key",
    "attribute_key",
    "fact_text",
    "score",
    "scores",
    "speaker",
    "source_event_id",
    "message_id",
    "valid_from",
}


@pytest.fixture(scope="module")
def marina(api_config: Settings) -> Iterator[Memory]:
    context: WriteContext = build_write_context(api_config, pool_size=2)
    db: Engine = create_db_engine(api_config, pool_size=1)
    try:
        agent_id = new_agent("marina")
        event_ids = remember(context, agent_id, HISTORY)
        yield Memory(agent_id, event_ids, stored_facts(db, agent_id))
    finally:
        context.close()
        db.dispose()


def retrieve(client: httpx.Client, agent_id: str, query: str, **body: Any) -> dict[str, Any]:
    response = client.post(f"/v1/agents/{agent_id}/retrieve", json={"query": query, **body})
    assert response.status_code == 200, response.text
    return dict(response.json())


def texts(result: dict[str, Any]) -> list[str]:
    return [fact["fact_text"] for fact in result["facts"]]


# ---- Answers ---------------------------------------------------------------------------------------


def test_retrieve_returns_the_fact_that_answers_the_query(client: httpx.Client, marina: Memory) -> None:
    result = retrieve(client, marina.agent_id, "What is the name of Marina's dog?")
    assert {"facts", "context", "total_candidates", "duration_ms", "config_effective", "warnings"} <= set(result)
    assert "trace" not in result
    assert texts(result)[0] == "Marina has a dog named Rex."
    top = result["facts"][0]
    assert set(top) >= FACT_FIELDS
    assert top["fact_id"] == marina.fact_id("Marina has a dog named Rex.")
    assert top["entity_key"] == "person:marina"
    assert top["entity_name"] == "Marina"
    assert top["attribute_key"] == "pet"
    assert top["speaker"] == "Marina"
    assert top["source_event_id"] == marina.event_ids[2]
    assert top["message_id"] == "m2"
    assert datetime.fromisoformat(top["valid_from"]) == START + 2 * STEP
    assert top["score"] > 0.0
    assert isinstance(top["scores"], dict)
    assert top["scores"]
    assert all(isinstance(value, float | int) for value in top["scores"].values())
    scores = [fact["score"] for fact in result["facts"]]
    assert scores == sorted(scores, reverse=True)
    # The context quotes the message that says it, with its speaker, and does not repeat the fact.
    assert "Marina: I have a dog named Rex." in result["context"]
    assert "Marina has a dog named Rex." not in result["context"]
    assert result["total_candidates"] >= len(result["facts"])
    assert result["duration_ms"] >= 0
    assert result["config_effective"]["topk_facts"] == 20
    assert isinstance(result["warnings"], list)


def test_only_facts_valid_now_answer_by_default(client: httpx.Client, marina: Memory) -> None:
    result = retrieve(client, marina.agent_id, "Which city does Marina live in?")
    assert "Marina moved to Porto." in texts(result)
    # The superseded residence is history, not an answer about now.
    assert "Marina lives in Lisbon." not in texts(result)


def test_retrieve_finds_facts_about_another_entity(client: httpx.Client, marina: Memory) -> None:
    result = retrieve(client, marina.agent_id, "What does Julia do for a living?")
    assert "Marina's sister Julia is a doctor." in texts(result)
    assert "doctor" in result["context"]


@pytest.mark.parametrize("greeting", ["Hi!", "Olá, tudo bem?", "thanks"])
def test_greetings_return_no_facts(client: httpx.Client, marina: Memory, greeting: str) -> None:
    result = retrieve(client, marina.agent_id, greeting)
    assert result["facts"] == []


def test_an_agent_without_memory_gets_an_empty_answer(client: httpx.Client) -> None:
    result = retrieve(client, new_agent(), "Where does Marina live?")
    assert result["facts"] == []
    assert result["total_candidates"] == 0


def test_verbose_adds_the_trace(client: httpx.Client, marina: Memory) -> None:
    result = retrieve(client, marina.agent_id, "Where does Marina live?", verbose=True)
    assert isinstance(result["trace"], dict)
    assert result["trace"]


# ---- Entity keys -----------------------------------------------------------------------------------


def test_entity_keys_restrict_the_answer(client: httpx.Client, marina: Memory) -> None:
    result = retrieve(client, marina.agent_id, "Tell me about the family", entity_keys=["person:julia"])
    assert texts(result)
    assert {fact["entity_key"] for fact in result["facts"]} == {"person:julia"}


def test_unknown_entity_keys_come_back_as_a_warning(client: httpx.Client, marina: Memory) -> None:
    result = retrieve(client, marina.agent_id, "Where does Marina live?", entity_keys=["person:nobody"])
    assert any("person:nobody" in warning for warning in result["warnings"]), result["warnings"]
    assert result["facts"] == []
    mixed = retrieve(client, marina.agent_id, "Julia", entity_keys=["person:julia", "person:ghost"])
    assert any("person:ghost" in warning for warning in mixed["warnings"]), mixed["warnings"]
    assert not any("person:julia" in warning for warning in mixed["warnings"])
    assert "Marina's sister Julia is a doctor." in texts(mixed)


# ---- as_of -------------------------------------------------------------------------------------------


def test_as_of_an_instant_answers_with_what_was_true_then(client: httpx.Client, marina: Memory) -> None:
    before_the_move = (START + 2 * STEP).isoformat()
    then = retrieve(client, marina.agent_id, "Where does Marina live?", as_of=before_the_move)
    assert "Marina lives in Lisbon." in texts(then)
    assert "Marina moved to Porto." not in texts(then)
    # Naive instants are UTC; "Z" is accepted.
    naive = retrieve(
        client, marina.agent_id, "Where does Marina live?", as_of=(START + 2 * STEP).strftime("%Y-%m-%dT%H:%M:%S")
    )
    assert texts(naive) == texts(then)
    zulu = retrieve(
        client, marina.agent_id, "Where does Marina live?", as_of=(START + 2 * STEP).strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    assert texts(zulu) == texts(then)
    before_anything = retrieve(
        client, marina.agent_id, "Where does Marina live?", as_of=(START - timedelta(days=1)).isoformat()
    )
    assert before_anything["facts"] == []


def test_as_of_a_window_answers_with_what_was_true_during_it(client: httpx.Client, marina: Memory) -> None:
    window = {"start": (START + STEP).isoformat(), "end": (START + 5 * STEP).isoformat()}
    during = retrieve(client, marina.agent_id, "Where does Marina live?", as_of=window)
    assert {"Marina lives in Lisbon.", "Marina moved to Porto."} <= set(texts(during))
    early = {"start": (START + STEP).isoformat(), "end": (START + 2 * STEP).isoformat()}
    assert "Marina moved to Porto." not in texts(
        retrieve(client, marina.agent_id, "Where does Marina live?", as_of=early)
    )
    none = {"start": (START - 3 * STEP).isoformat(), "end": (START - 2 * STEP).isoformat()}
    assert retrieve(client, marina.agent_id, "Where does Marina live?", as_of=none)["facts"] == []


@pytest.mark.parametrize(
    ("as_of", "field"),
    [
        ("yesterday", "body.as_of"),
        (5, "body.as_of"),
        ({"start": "2024-01-01T00:00:00Z"}, "body.as_of.end"),
        ({"start": "2024-01-01T00:00:00Z", "end": "soon"}, "body.as_of.end"),
        ({"start": "2024-02-01T00:00:00Z", "end": "2024-01-01T00:00:00Z"}, "body.as_of"),
        ({"start": "2024-01-01T00:00:00Z", "end": "2024-02-01T00:00:00Z", "step": 1}, "body.as_of.step"),
    ],
)
def test_a_bad_as_of_is_422_naming_the_field(client: httpx.Client, marina: Memory, as_of: Any, field: str) -> None:
    response = client.post(f"/v1/agents/{marina.agent_id}/retrieve", json={"query": "Marina", "as_of": as_of})
    assert_error(response, 422, field)


# ---- Overrides ------------------------------------------------------------------------------------------


def test_overrides_change_the_answer_and_are_echoed(client: httpx.Client, marina: Memory) -> None:
    result = retrieve(client, marina.agent_id, "Marina", config_overrides={"topk_facts": 1})
    assert len(result["facts"]) <= 1
    assert result["config_effective"]["topk_facts"] == 1


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"topk_facts": "many"}, "topk_facts"),
        ({"topk_facts": 0}, "topk_facts"),
        ({"min_score": 2.5}, "min_score"),
        ({"enable_reranker": "yes"}, "enable_reranker"),
        ({"embedding_dimensions": 8}, "embedding_dimensions"),
    ],
)
def test_bad_overrides_are_422_naming_the_key(
    client: httpx.Client, marina: Memory, overrides: dict[str, Any], key: str
) -> None:
    response = client.post(
        f"/v1/agents/{marina.agent_id}/retrieve", json={"query": "Marina", "config_overrides": overrides}
    )
    body = assert_error(response, 422)
    fields = [item["field"] for item in body["detail"]]
    assert fields
    assert all(field.startswith(f"body.config_overrides.{key}") for field in fields), fields
    assert f"config_overrides.{key}" in body["error"]


def test_unknown_override_keys_are_a_warning(client: httpx.Client, marina: Memory) -> None:
    result = retrieve(client, marina.agent_id, "Marina", config_overrides={"topk_factz": 3})
    assert any("topk_factz" in warning for warning in result["warnings"]), result["warnings"]
    assert sum("topk_factz" in warning for warning in result["warnings"]) == 1
    assert result["config_effective"]["topk_facts"] == 20


# ---- Bad requests ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": ""}, "body.query"),
        ({"query": "   "}, "body.query"),
        ({}, "body.query"),
        ({"query": 42}, "body.query"),
        ({"query": "a\x00b"}, "body.query"),
        ({"query": "Marina", "verbose": "yes"}, "body.verbose"),
        ({"query": "Marina", "entity_keys": "person:julia"}, "body.entity_keys"),
        ({"query": "Marina", "entity_keys": [""]}, "body.entity_keys[0]"),
        ({"query": "Marina", "session_id": ""}, "body.session_id"),
        ({"query": "Marina", "top_k": 3}, "body.top_k"),
    ],
)
def test_a_bad_body_is_422_naming_the_field(
    client: httpx.Client, marina: Memory, body: dict[str, Any], field: str
) -> None:
    assert_error(client.post(f"/v1/agents/{marina.agent_id}/retrieve", json=body), 422, field)


def test_an_unknown_field_is_called_unknown(client: httpx.Client, marina: Memory) -> None:
    body = assert_error(
        client.post(f"/v1/agents/{marina.agent_id}/retrieve", json={"query": "x", "limit": 5}), 422, "body.limit"
    )
    assert body["detail"][0]["message"] == "unknown field"


def test_malformed_json_other_types_and_oversized_queries(client: httpx.Client, marina: Memory) -> None:
    url = f"/v1/agents/{marina.agent_id}/retrieve"
    assert_error(client.post(url, content=b'{"query": ', headers={"Content-Type": "application/json"}), 422)
    assert_error(client.post(url, content=b"query=x", headers={"Content-Type": "text/plain"}), 415)
    assert_error(client.post(url, json={"query": "x" * 300_000}), 422, "body.query")


def _short_words(size: int) -> str:
    words = (f"w{index % 97}" for index in range(size))
    return " ".join(words)[:size].rstrip()


def test_a_query_has_a_cap_of_its_own_named_in_the_422(client: httpx.Client, marina: Memory) -> None:
    # A 256 KiB query (the message cap) of short words took 14.9 s of the API's CPU: queries are
    # questions, and their cap is ARANDU_MAX_QUERY_BYTES (4 KiB by default).
    url = f"/v1/agents/{marina.agent_id}/retrieve"
    body = assert_error(client.post(url, json={"query": "Where does Marina live? " + "a" * 4_096}), 422, "body.query")
    assert "4096 bytes" in body["detail"][0]["message"]
    assert_error(client.post(url, json={"query": "é" * 2_049}), 422, "body.query")  # 4,098 bytes in UTF-8

    # At the cap, of short words (the most grams per byte): answered, and the entity still found.
    query = ("Where does Marina live? " + _short_words(4_096))[:4_096]
    started = time.monotonic()
    result = retrieve(client, marina.agent_id, query)
    assert time.monotonic() - started < 10
    assert any("Porto" in text for text in texts(result))


def test_retrieve_needs_a_key_and_a_good_agent_id(client: httpx.Client, marina: Memory) -> None:
    url = f"{client.base_url}/v1/agents/{marina.agent_id}/retrieve"
    assert httpx.post(url, json={"query": "Marina"}).status_code == 401
    assert httpx.post(url, json={"query": "Marina"}, headers=auth_headers("nope")).status_code == 401
    assert_error(client.post("/v1/agents/bad%20agent/retrieve", json={"query": "Marina"}), 422, "path.agent_id")


def test_the_openapi_document_describes_retrieve(client: httpx.Client) -> None:
    document = client.get("/openapi.json").json()
    operation = document["paths"]["/v1/agents/{agent_id}/retrieve"]["post"]
    assert operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/RetrieveIn")
    assert "RetrieveIn" in document["components"]["schemas"]
    for path in (
        "/v1/agents/{agent_id}/facts",
        "/v1/agents/{agent_id}/facts/{fact_id}",
        "/v1/agents/{agent_id}/entities",
    ):
        assert path in document["paths"]


def test_session_id_keeps_that_conversation_only(client: httpx.Client, marina: Memory) -> None:
    same = retrieve(client, marina.agent_id, "What is the name of Marina's dog?", session_id="default")
    assert "Marina has a dog named Rex." in texts(same)
    other = retrieve(client, marina.agent_id, "What is the name of Marina's dog?", session_id="another-chat")
    assert other["facts"] == []
