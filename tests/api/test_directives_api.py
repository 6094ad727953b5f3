"""Procedural memory over real HTTP, on directives written by the real write pipeline (offline rule twins).

Messages go through every stage in-process (extract, resolve, reconcile, upsert), exactly what a
worker does; the API serves the directives, the cached block, retrieval with
``include_directives`` and pending operations. Decay is checked by moving stored timestamps back,
never by sleeping.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, text

from arandu_client import AranduClient, NotFoundError
from memory_core.read.directives import effective_confidence
from memory_core.write.context import WriteContext
from memory_core.write.intake import IncomingMessage, accept_messages
from memory_core.write.pipeline import run_extract, run_reconcile, run_resolve, run_upsert
from memory_core.write.schemas import WriteResult
from tests.api.test_memory_api import assert_error, new_agent
from tests.support.api_server import TEST_API_KEY

START = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
PORTUGUESE = "Always answer in Portuguese."
NO_SENHOR = 'Do not call the user "senhor".'


def teach(
    context: WriteContext,
    agent_id: str,
    message: str,
    *,
    at: datetime = START,
    speaker: str = "Rafael",
    options: dict[str, Any] | None = None,
) -> WriteResult:
    """One message through the whole write pipeline in-process; its WriteResult."""
    with context.sessions.begin() as session:
        accepted = accept_messages(
            session,
            agent_id,
            [IncomingMessage(message=message, speaker_name=speaker, occurred_at=at, options=dict(options or {}))],
        )[0]
    for stage in (run_extract, run_resolve, run_reconcile, run_upsert):
        assert stage(context, accepted.event_id) == "completed"
    with context.sessions() as session:
        stored = session.execute(
            text("SELECT result FROM pipeline_runs WHERE event_id = :id"), {"id": accepted.event_id}
        ).scalar_one()
    return WriteResult.model_validate(stored)


def directives_of(client: httpx.Client, agent_id: str, **params: Any) -> dict[str, Any]:
    response = client.get(f"/v1/agents/{agent_id}/directives", params=params)
    assert response.status_code == 200, response.text
    return dict(response.json())


def active_texts(body: dict[str, Any]) -> list[str]:
    return [item["text"] for item in body["directives"] if item["is_active"]]


# ---- Learning, reinforcing, caching --------------------------------------------------------------------


def test_a_conversation_teaches_directives_in_english_and_they_are_reinforced(
    client: httpx.Client, writer: WriteContext
) -> None:
    agent = new_agent("rafael")
    first = teach(writer, agent, "Oi! Por favor, responda sempre em português. Eu moro em Lisboa.")
    assert [(change.text, change.change) for change in first.directives] == [(PORTUGUESE, "added")]
    assert first.facts_added, "the facts of the message are still extracted"
    teach(writer, agent, "Não me chame de senhor.", at=START + timedelta(hours=1))
    teach(writer, agent, "Hi, how are you?", at=START + timedelta(hours=2))

    body = directives_of(client, agent)
    assert set(active_texts(body)) == {PORTUGUESE, NO_SENHOR}
    assert body["block"]["directive_count"] == 2
    assert body["block"]["cache_hit"] is False
    assert PORTUGUESE in body["block"]["text"]
    assert NO_SENHOR in body["block"]["text"]
    assert directives_of(client, agent)["block"]["cache_hit"] is True

    # The same directive in other words (and language) reinforces it: no second row.
    again = teach(writer, agent, "Always answer in Portuguese, please!", at=START + timedelta(days=1))
    assert [(change.text, change.change) for change in again.directives] == [(PORTUGUESE, "reinforced")]
    body = directives_of(client, agent)
    portuguese = next(item for item in body["directives"] if item["text"] == PORTUGUESE)
    assert portuguese["times_reinforced"] == 1
    assert len(body["directives"]) == 2
    # A reinforcement changes the cache key: the block is made again, then cached.
    assert body["block"]["cache_hit"] is False
    assert directives_of(client, agent)["block"]["cache_hit"] is True


def test_effective_confidence_decays_095_a_week_since_last_taught_with_a_floor(
    client: httpx.Client, writer: WriteContext, db: Engine
) -> None:
    now = datetime.now(UTC)
    assert effective_confidence(0.9, now - timedelta(weeks=2), now) == pytest.approx(0.9 * 0.95**2)
    assert effective_confidence(0.9, now - timedelta(weeks=200), now) == 0.10
    assert effective_confidence(0.9, now + timedelta(days=1), now) == 0.9

    agent = new_agent("decay")
    teach(writer, agent, "Don't call me sir.")
    teach(writer, agent, "Never use emojis.", at=START + timedelta(minutes=5))
    with db.begin() as connection:
        connection.execute(
            text(
                "UPDATE memory_directives SET last_reinforced_at = now() - CASE WHEN text LIKE '%emojis%' "
                "THEN interval '4 weeks' ELSE interval '300 weeks' END WHERE agent_id = :agent"
            ),
            {"agent": agent},
        )
    body = directives_of(client, agent)
    by_text = {item["text"]: item for item in body["directives"]}
    emojis = by_text["Do not use emojis."]
    sir = by_text['Do not call the user "sir".']
    assert emojis["effective_confidence"] == pytest.approx(emojis["confidence"] * 0.95**4, abs=1e-3)
    assert sir["effective_confidence"] == 0.10
    # Strongest first, in the list and in the block.
    assert [item["text"] for item in body["directives"]] == ["Do not use emojis.", 'Do not call the user "sir".']
    assert body["block"]["text"].index("emojis") < body["block"]["text"].index("sir")


# ---- Contradictions ----------------------------------------------------------------------------------------


def test_a_contradicting_directive_supersedes_the_old_one(client: httpx.Client, writer: WriteContext) -> None:
    agent = new_agent("contra")
    teach(writer, agent, "Call me Rafa.")
    before = directives_of(client, agent)
    assert active_texts(before) == ['Call the user "Rafa".']
    old_id = before["directives"][0]["directive_id"]

    later = teach(writer, agent, "Please don't call me Rafa.", at=START + timedelta(days=2))
    assert [change.change for change in later.directives] == ["superseded"]
    assert later.directives[0].superseded_id == old_id

    after = directives_of(client, agent, include_inactive="true")
    assert active_texts(after) == ['Do not call the user "Rafa".']
    old = next(item for item in after["directives"] if item["directive_id"] == old_id)
    assert old["is_active"] is False
    assert old["superseded_by_id"] == later.directives[0].directive_id
    assert after["block"]["directive_count"] == 1
    assert 'Call the user "Rafa".' not in after["block"]["text"].replace('Do not call the user "Rafa".', "")
    # Only the active ones without include_inactive.
    assert len(directives_of(client, agent)["directives"]) == 1


def test_the_pre_filter_threshold_decides_which_pairs_reach_the_judge(
    client: httpx.Client, writer: WriteContext
) -> None:
    # The hashing embedder puts "answer in Portuguese" and "answer in English" at about 0.66.
    agent = new_agent("threshold")
    teach(writer, agent, "Responda sempre em português.")
    teach(writer, agent, "Always answer in English.", at=START + timedelta(days=1))
    assert set(active_texts(directives_of(client, agent))) == {PORTUGUESE, "Always answer in English."}

    lowered = new_agent("threshold")
    teach(writer, lowered, "Responda sempre em português.")
    result = teach(
        writer,
        lowered,
        "Always answer in English.",
        at=START + timedelta(days=1),
        options={"config_overrides": {"contradiction_similarity_threshold": 0.5}},
    )
    assert [change.change for change in result.directives] == ["superseded"]
    assert active_texts(directives_of(client, lowered)) == ["Always answer in English."]


def test_an_older_contradicting_directive_arriving_late_is_history(client: httpx.Client, writer: WriteContext) -> None:
    agent = new_agent("late")
    teach(writer, agent, "Don't call me Rafa.", at=START + timedelta(days=5))
    late = teach(writer, agent, "Call me Rafa.", at=START)
    assert [change.change for change in late.directives] == ["history"]
    body = directives_of(client, agent, include_inactive="true")
    assert active_texts(body) == ['Do not call the user "Rafa".']
    assert len(body["directives"]) == 2


# ---- Retrieval, deletion, isolation ---------------------------------------------------------------------


def test_retrieve_includes_the_block_at_the_top_of_the_context_within_its_budget(
    client: httpx.Client, writer: WriteContext
) -> None:
    agent = new_agent("retrieve")
    teach(writer, agent, "Responda sempre em português. Eu moro em Lisboa.")
    teach(writer, agent, "Never use emojis.", at=START + timedelta(hours=1))

    plain = client.post(f"/v1/agents/{agent}/retrieve", json={"query": "Onde eu moro?"})
    assert plain.status_code == 200, plain.text
    assert "directives" not in plain.json()
    assert PORTUGUESE not in plain.json()["context"]

    response = client.post(
        f"/v1/agents/{agent}/retrieve",
        json={"query": "Onde eu moro?", "include_directives": True, "persona": "You are Lia, a kind assistant."},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    block = body["directives"]
    assert block["directive_count"] == 2
    assert block["text"].startswith("You are Lia, a kind assistant.")
    assert body["context"].startswith(block["text"])
    assert "Lisboa" in body["context"][len(block["text"]) :]

    # A greeting skips retrieval but still gets the block; a small budget cuts it.
    tight = client.post(
        f"/v1/agents/{agent}/retrieve",
        json={"query": "hi", "include_directives": True, "config_overrides": {"directive_max_tokens": 14}},
    )
    assert tight.status_code == 200, tight.text
    text_ = tight.json()["directives"]["text"]
    assert 0 < len(text_) <= 14 * 4
    assert tight.json()["context"] == text_


def test_deleting_a_directive_invalidates_the_block_and_agents_are_isolated(
    client: httpx.Client, writer: WriteContext
) -> None:
    owner, other = new_agent("owner"), new_agent("other")
    teach(writer, owner, "Never use emojis. Keep it short.")
    body = directives_of(client, owner)
    assert body["block"]["directive_count"] == 2
    assert directives_of(client, owner)["block"]["cache_hit"] is True
    emojis = next(item["directive_id"] for item in body["directives"] if "emojis" in item["text"])

    # Another agent sees nothing of the owner's, and cannot delete its directive.
    assert directives_of(client, other) == {
        "agent_id": other,
        "block": {"text": "", "directive_count": 0, "cache_hit": False},
        "directives": [],
    }
    assert_error(client.delete(f"/v1/agents/{other}/directives/{emojis}"), 404, "path.directive_id")

    deleted = client.delete(f"/v1/agents/{owner}/directives/{emojis}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"deleted": 1}
    after = directives_of(client, owner)
    assert active_texts(after) == ["Keep answers brief."]
    assert after["block"]["cache_hit"] is False
    assert "emojis" not in after["block"]["text"]
    assert_error(client.delete(f"/v1/agents/{owner}/directives/{emojis}"), 404, "path.directive_id")


def test_bad_directive_requests_are_4xx_naming_the_field(client: httpx.Client) -> None:
    agent = new_agent("bad")
    assert_error(client.delete(f"/v1/agents/{agent}/directives/not-a-uuid"), 422, "path.directive_id")
    assert_error(client.get(f"/v1/agents/{agent}/directives", params={"persona": "x" * 4001}), 422, "query.persona")
    assert_error(
        client.post(f"/v1/agents/{agent}/retrieve", json={"query": "hi", "include_directives": "yes"}),
        422,
        "body.include_directives",
    )
    assert_error(
        client.post(f"/v1/agents/{agent}/retrieve", json={"query": "hi", "persona": "x" * 4001}), 422, "body.persona"
    )
    unauthenticated = httpx.get(f"{client.base_url}/v1/agents/{agent}/directives")
    assert unauthenticated.status_code == 401


# ---- Pending operations ----------------------------------------------------------------------------------


def test_pending_operation_save_get_clear_and_expiry(client: httpx.Client, db: Engine) -> None:
    agent, other = new_agent("pending"), new_agent("pending")
    path = f"/v1/agents/{agent}/pending"
    assert_error(client.get(path), 404)
    selection = {
        "kind": "selection",
        "intent": "delete",
        "transactions": [{"id": "t1", "title": "Dentist, Monday 10:00"}, {"id": "t2", "title": "Dentist, Friday"}],
        "confirmation_text": "Which dentist appointment should I delete?",
    }
    saved = client.put(path, json=selection)
    assert saved.status_code == 200, saved.text
    body = saved.json()
    assert body["kind"] == "selection"
    assert body["intent"] == "delete"
    assert body["transactions"] == selection["transactions"]
    lifetime = datetime.fromisoformat(body["expires_at"]) - datetime.fromisoformat(body["created_at"])
    assert lifetime == timedelta(minutes=5)  # pending_operation_ttl_minutes
    assert client.get(path).json()["confirmation_text"] == selection["confirmation_text"]
    assert_error(client.get(f"/v1/agents/{other}/pending"), 404)

    # Saving again replaces it.
    execution = {"kind": "execution", "tool_calls": [{"name": "delete_event", "args": {"id": "t1"}}]}
    replaced = client.put(path, json={**execution, "confirmation_text": "Delete it?"})
    assert replaced.status_code == 200, replaced.text
    current = client.get(path).json()
    assert current["kind"] == "execution"
    assert "intent" not in current

    # Expired: absent (moved back in time, not waited for).
    with db.begin() as connection:
        connection.execute(
            text("UPDATE memory_pending_operations SET expires_at = now() - interval '1 second' WHERE agent_id = :a"),
            {"a": agent},
        )
    assert_error(client.get(path), 404)

    client.put(path, json=selection)
    assert client.delete(path).json() == {"cleared": True}
    assert client.delete(path).json() == {"cleared": False}
    assert_error(client.get(path), 404)

    assert_error(client.put(path, json={"kind": "selection", "confirmation_text": "Which?", "transactions": []}), 422)
    missing = client.put(path, json={"kind": "selection", "confirmation_text": "Which?", "transactions": []})
    assert [item["field"] for item in missing.json()["detail"]] == ["body.intent"]
    assert_error(client.put(path, json={"kind": "execution", "confirmation_text": "Go?"}), 422, "body.tool_calls")
    assert_error(
        client.put(path, json={"kind": "undo", "confirmation_text": "Go?", "tool_calls": []}), 422, "body.kind"
    )
    assert_error(client.put(path, json={**execution, "confirmation_text": " "}), 422, "body.confirmation_text")
    unknown = uuid.uuid4()
    assert_error(client.delete(f"/v1/agents/{agent}/directives/{unknown}"), 404, "path.directive_id")


def test_the_python_client_reads_the_directives_and_retrieves_with_them(
    client: httpx.Client, writer: WriteContext
) -> None:
    agent = new_agent("sdk")
    teach(writer, agent, "Never use emojis.")
    with AranduClient(str(client.base_url), TEST_API_KEY) as sdk:
        listed = sdk.directives(agent, persona="You are Lia.")
        assert [item.text for item in listed.directives] == ["Do not use emojis."]
        assert listed.block.text.startswith("You are Lia.")
        result = sdk.retrieve(agent, "hi", include_directives=True)
        assert result.directives is not None
        assert result.directives.text in result.context
        assert sdk.retrieve(agent, "hi").directives is None
        sdk.delete_directive(agent, listed.directives[0].directive_id)
        with pytest.raises(NotFoundError):
            sdk.delete_directive(agent, listed.directives[0].directive_id)
        assert sdk.directives(agent).directives == []


def test_pending_lifetime_and_directive_budget_follow_the_agents_own_config(
    client: httpx.Client, writer: WriteContext
) -> None:
    agent = new_agent("tuned")
    overrides = {"pending_operation_ttl_minutes": 1, "directive_max_tokens": 1}
    put = client.put(f"/v1/agents/{agent}/config", json={"overrides": overrides})
    assert put.status_code == 200, put.text
    saved = client.put(
        f"/v1/agents/{agent}/pending",
        json={"kind": "execution", "tool_calls": [{"name": "noop", "args": {}}], "confirmation_text": "Go?"},
    )
    assert saved.status_code == 200, saved.text
    body = saved.json()
    lifetime = datetime.fromisoformat(body["expires_at"]) - datetime.fromisoformat(body["created_at"])
    assert lifetime == timedelta(minutes=1)

    teach(writer, agent, "Please always answer me in Portuguese.")
    listed = client.get(f"/v1/agents/{agent}/directives").json()
    assert listed["directives"], listed
    assert len(listed["block"]["text"]) <= 4 * 1  # directive_max_tokens of this agent, chars / 4
