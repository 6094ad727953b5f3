"""What one client may make the API and its LLM do: heavy requests take turns, overrides stay bounded.

A real API over real HTTP with an LLM configured: the local OpenAI-compatible stub, which
answers every chat call after 1 s (a provider's latency). The agent's memory is written by the
real write pipeline with the offline skills beforehand.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from memory_core.db.engine import create_db_engine
from memory_core.settings import Settings
from memory_core.write.context import WriteContext, build_write_context
from tests.api.test_memory_api import Memory, assert_error, new_agent, remember, stored_facts
from tests.api.test_retrieve_api import HISTORY
from tests.support.api_server import api_settings, auth_headers, serve_api
from tests.support.openai_stub import CHAT, OpenAIStub
from tests.support.services import TestServices

LLM_LATENCY_S = 1.0


@pytest.fixture(scope="module")
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub(latency_s=LLM_LATENCY_S) as server:
        yield server


@pytest.fixture(scope="module")
def offline_config(
    migrated_database_url: str, services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    return api_settings(migrated_database_url, services.broker_url, tmp_path_factory.mktemp("bounds-offline"))


@pytest.fixture(scope="module")
def base_url(
    migrated_database_url: str, services: TestServices, stub: OpenAIStub, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    settings = api_settings(
        migrated_database_url,
        services.broker_url,
        tmp_path_factory.mktemp("bounds-llm"),
        llm_provider="openai",
        llm_base_url=stub.base_url,
        llm_model="gpt-stub",
    )
    with serve_api(settings) as url:
        yield url


@pytest.fixture(scope="module")
def marina(offline_config: Settings) -> Iterator[Memory]:
    context: WriteContext = build_write_context(offline_config, pool_size=2)
    db: Engine = create_db_engine(offline_config, pool_size=1)
    try:
        agent_id = new_agent("bounds")
        event_ids = remember(context, agent_id, HISTORY)
        yield Memory(agent_id, event_ids, stored_facts(db, agent_id))
    finally:
        context.close()
        db.dispose()


def _post(base_url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{base_url}{path}", json=body, headers=auth_headers(), timeout=60)


def _long_query(size: int) -> str:
    words = " ".join(f"w{index % 97}" for index in range(size))
    return ("Where does Marina live? " + words)[:size]


def test_long_queries_take_turns_and_normal_ones_do_not_wait_behind_them(
    base_url: str, marina: Memory, stub: OpenAIStub
) -> None:
    url = f"/v1/agents/{marina.agent_id}/retrieve"
    normal_body = {"query": "Where does Marina live?", "config_overrides": {"enable_reranker": False}}
    started = time.monotonic()
    assert _post(base_url, url, normal_body).status_code == 200  # the read path's pools and caches, warm
    quiet_s = time.monotonic() - started
    calls_before = len(stub.requests_to(CHAT))
    answers: list[tuple[int, str | None, float]] = []
    lock = threading.Lock()

    def send_long() -> None:
        started = time.monotonic()
        response = _post(base_url, url, {"query": _long_query(3_000)})
        with lock:
            answers.append((response.status_code, response.headers.get("retry-after"), time.monotonic() - started))

    clients = [threading.Thread(target=send_long) for _ in range(10)]
    for client in clients:
        client.start()
    time.sleep(0.5)  # the first long query is in its reranker call, the next ones wait their turn
    started = time.monotonic()
    normal = _post(base_url, url, normal_body)
    normal_s = time.monotonic() - started
    for client in clients:
        client.join(60)

    assert normal.status_code == 200, normal.text
    # Queued behind the waiting long ones it would take 4-5 s (their reranker calls of 1 s each).
    assert normal_s < 2 * LLM_LATENCY_S, (
        f"a normal retrieve took {normal_s:.2f} s beside long ones ({quiet_s:.2f} s alone)"
    )
    served = [answer for answer in answers if answer[0] == 200]
    refused = [answer for answer in answers if answer[0] == 503]
    assert len(served) + len(refused) == 10, answers
    # One runs, four wait (per slot), the rest are told at once to come back.
    assert 2 <= len(served) <= 5, answers
    assert len(refused) >= 5, answers
    # Told at once: before the served ones, which took their turns of 1 s each, were through.
    assert all(retry_after == "1" for _, retry_after, _ in refused), refused
    assert max(seconds for _, _, seconds in refused) < max(seconds for _, _, seconds in served), answers
    # One long query at a time reached the provider.
    calls = sorted(request.received_at for request in stub.requests_to(CHAT)[calls_before:])
    assert len(calls) == len(served)
    assert all(later - earlier >= LLM_LATENCY_S * 0.9 for earlier, later in itertools.pairwise(calls)), calls


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"reranker_timeout_sec": 120}, "reranker_timeout_sec"),
        ({"topk_facts": 500, "reranker_candidate_multiplier": 10}, "reranker_candidate_multiplier"),
        ({"topk_facts": 200}, "topk_facts"),
    ],
)
def test_a_retrieve_cannot_ask_the_llm_for_more_than_one_retrieve_needs(
    base_url: str, marina: Memory, stub: OpenAIStub, overrides: dict[str, Any], field: str
) -> None:
    calls_before = len(stub.requests_to(CHAT))
    response = _post(
        base_url, f"/v1/agents/{marina.agent_id}/retrieve", {"query": "Where does Marina live?", **_with(overrides)}
    )
    assert_error(response, 422, f"body.config_overrides.{field}")
    assert len(stub.requests_to(CHAT)) == calls_before, "a refused request reached the provider"


def test_bounded_overrides_within_the_limits_are_served(base_url: str, marina: Memory) -> None:
    url = f"/v1/agents/{marina.agent_id}/retrieve"
    within = {"reranker_timeout_sec": 15, "topk_facts": 50, "reranker_candidate_multiplier": 2}
    assert _post(base_url, url, {"query": "Where does Marina live?", **_with(within)}).status_code == 200
    # Without the reranker nothing goes to the LLM: a request may still ask for many facts.
    many = {"topk_facts": 500, "reranker_candidate_multiplier": 10, "enable_reranker": False}
    assert _post(base_url, url, {"query": "Where does Marina live?", **_with(many)}).status_code == 200


def test_a_message_cannot_ask_for_a_ten_minute_extraction(base_url: str, marina: Memory) -> None:
    body = {"message": "I moved to Braga.", "speaker_name": "Marina", **_with({"extraction_timeout_sec": 600})}
    response = _post(base_url, f"/v1/agents/{marina.agent_id}/messages", body)
    assert_error(response, 422, "body.config_overrides.extraction_timeout_sec")


def _with(overrides: dict[str, Any]) -> dict[str, Any]:
    return {"config_overrides": overrides}
