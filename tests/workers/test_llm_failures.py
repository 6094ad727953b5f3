"""The LLM failing in every way a real one does: the seeds' fallbacks, retries, failure, re-drive."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import text

from memory_core.cognition.llm import build_llm_write_skills
from memory_core.providers.openai_llm import OpenAIChatProvider
from memory_core.settings import Settings
from memory_core.write.context import WriteContext, build_write_context
from memory_core.write.pipeline import run_extract
from tests.support.llm_script import LLMBehaviour
from tests.support.openai_stub import OpenAIStub
from tests.workers.conftest import WritePath, start_write_path


@dataclass
class LLMPath:
    """The write path over an OpenAI-compatible stub whose behaviour the test controls."""

    path: WritePath
    behaviour: LLMBehaviour
    stub: OpenAIStub


@pytest.fixture
def llm_path(write_settings: Settings) -> Iterator[LLMPath]:
    behaviour = LLMBehaviour("ok", timeout_delay_s=3.0)
    settings = write_settings.model_copy(update={"pipeline_max_attempts": 3, "pipeline_max_throttled_retries": 4})
    with OpenAIStub(chat_handler=behaviour) as stub:

        def context(own: Settings) -> WriteContext:
            provider = OpenAIChatProvider(api_key="sk-test", model="stub-model", base_url=stub.base_url, timeout_s=1.0)
            return build_write_context(own, skills=build_llm_write_skills(provider))

        for path in start_write_path(settings, context):
            yield LLMPath(path=path, behaviour=behaviour, stub=stub)


def test_a_working_llm_extracts_with_one_informed_call(llm_path: LLMPath) -> None:
    event = llm_path.path.post("Eu moro em Lisboa.", "Rafael")
    assert llm_path.path.wait([event]) == {event: "done"}
    result = llm_path.path.event(event)["result"]
    assert [fact["fact_text"] for fact in result["facts_added"]] == ["Rafael mora em Lisboa"]
    assert result["tokens_used"]["total_tokens"] > 0
    assert llm_path.behaviour.calls.get("informed") == 1
    agent = llm_path.path.agent_id
    profile = llm_path.path.memory.entities(agent)["person:rafael"]["profile_text"]
    assert profile == "Rafael lives in Lisbon."


@pytest.mark.parametrize("mode", ["error", "invalid_json", "timeout"])
def test_llm_failures_fall_back_and_keep_the_event(llm_path: LLMPath, mode: str) -> None:
    llm_path.behaviour.mode = mode
    event = llm_path.path.post("Eu trabalho na Vertix desde março.", "Rafael")
    assert llm_path.path.wait([event], timeout_s=120) == {event: "done"}
    status = llm_path.path.event(event)
    # Seeds: informed extraction fails -> blind extraction -> empty extraction; the event is kept.
    assert status["result"]["facts_added"] == []
    assert status["result"]["error"]
    assert llm_path.behaviour.calls.get("informed", 0) >= 1
    assert llm_path.behaviour.calls.get("scan", 0) >= 1
    events = llm_path.path.memory.rows("SELECT text FROM memory_events WHERE agent_id = :a", a=llm_path.path.agent_id)
    assert events == [{"text": "Eu trabalho na Vertix desde março."}]


def test_rate_limit_storm_retries_then_fails_and_can_be_redriven(llm_path: LLMPath) -> None:
    llm_path.behaviour.mode = "rate_limit"
    event = llm_path.path.post("Eu moro em Lisboa.", "Rafael")
    assert llm_path.path.wait([event], timeout_s=120) == {event: "failed"}
    failed = llm_path.path.event(event)
    assert failed["stage"] == "extract"
    # Refusals with Retry-After spend their own budget (4 here), not the attempts meant for failures.
    assert failed["attempts"] == 0
    assert failed["throttled_retries"] == 5
    assert "429" in failed["error"]
    assert llm_path.behaviour.calls.get("informed", 0) >= 5

    llm_path.behaviour.mode = "ok"
    retry = llm_path.path.client.post(f"/v1/events/{event}/retry")
    assert retry.status_code == 202, retry.text
    assert llm_path.path.wait([event], timeout_s=60) == {event: "done"}
    done = llm_path.path.event(event)
    assert [fact["fact_text"] for fact in done["result"]["facts_added"]] == ["Rafael mora em Lisboa"]


def test_rate_limits_with_retry_after_do_not_spend_the_attempts_meant_for_failures(llm_path: LLMPath) -> None:
    # More refusals in a row than there are attempts (3), within their own budget (4): each said when to return.
    llm_path.behaviour.refuse_next = 4
    event = llm_path.path.post("Eu moro em Lisboa.", "Rafael")
    assert llm_path.path.wait([event], timeout_s=120) == {event: "done"}
    done = llm_path.path.event(event)
    assert done["attempts"] == 0
    assert done["throttled_retries"] == 4
    assert [fact["fact_text"] for fact in done["result"]["facts_added"]] == ["Rafael mora em Lisboa"]


def test_a_stage_redone_after_its_answer_was_stored_does_not_ask_the_model_again(llm_path: LLMPath) -> None:
    event = llm_path.path.post("Eu moro em Lisboa.", "Rafael")
    assert llm_path.path.wait([event]) == {event: "done"}
    assert llm_path.behaviour.calls.get("informed") == 1
    stored = llm_path.path.memory.rows("SELECT llm_cache FROM pipeline_runs WHERE event_id = :e", e=event)
    answers = stored[0]["llm_cache"]
    assert answers, "the model's answer is stored with the run"
    assert all({"output", "tokens"} <= set(answer) for answer in answers.values())

    # As a redelivery after a crash between the model's answer and the stage's completion.
    with llm_path.path.memory.engine.begin() as connection:
        connection.execute(text("UPDATE pipeline_runs SET status = 'received' WHERE event_id = :e"), {"e": event})
    provider = OpenAIChatProvider(api_key="sk-test", model="stub-model", base_url=llm_path.stub.base_url)
    ctx = build_write_context(llm_path.path.settings, skills=build_llm_write_skills(provider))
    try:
        assert run_extract(ctx, uuid.UUID(event)) == "completed"
    finally:
        ctx.close()
    assert llm_path.behaviour.calls.get("informed") == 1
