"""Relevant conversations lifted by their neighbours (``event_neighbour_share``): the turn beside a match."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory_core.config import apply_overrides
from memory_core.read.context import ReadContext
from memory_core.read.conversations import relevant_conversations
from tests.memory_core.read.conftest import NOW, MemoryBuilder

FIRST = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)

SUBJECT = "How was the lighthouse restoration weekend with the kids?"
ANSWER = "They adored it, we stayed until sunset."


def _scores(read_ctx: ReadContext, agent_id: str, query: str, **shares: float) -> dict[str, float]:
    """Each listed message's score for ``query``, with the lifts in ``shares`` and no other (reply context off)."""
    config = apply_overrides(
        read_ctx.base_config,
        {
            "topk_events": 10,
            "event_reply_context": False,
            "min_similarity": 0.0,
            "event_neighbour_share": 0.0,
            "event_question_share": 0.0,
            **shares,
        },
    ).config
    vector = read_ctx.embedder.embed_one(query)
    assert vector is not None
    with read_ctx.sessions() as session:
        events = relevant_conversations(session, agent_id, vector, ["lighthouse", "restoration"], config, now=NOW)
    return {event.event_id: event.score for event in events}


def _neighbour_search(read_ctx: ReadContext, agent_id: str, share: float) -> dict[str, float]:
    return _scores(read_ctx, agent_id, "lighthouse restoration weekend", event_neighbour_share=share)


def test_the_turn_beside_a_match_is_lifted(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    subject = memory.event(SUBJECT, speaker="Caroline", session_id="s1", occurred_at=FIRST)
    answer = memory.event(ANSWER, speaker="Melanie", session_id="s1", occurred_at=FIRST + timedelta(minutes=1))
    # The same words said in another session, next in time: no neighbour of the subject's.
    elsewhere = memory.event(ANSWER, speaker="Melanie", session_id="s2", occurred_at=FIRST + timedelta(minutes=2))
    alone = _neighbour_search(read_ctx, memory.agent_id, 0.0)
    lifted = _neighbour_search(read_ctx, memory.agent_id, 0.5)
    assert lifted[subject] >= alone[subject]
    assert lifted.get(answer, 0.0) > alone.get(answer, 0.0) + 0.1
    assert lifted[answer] > lifted.get(elsewhere, 0.0)
    assert lifted.get(elsewhere, 0.0) == pytest.approx(alone.get(elsewhere, 0.0), abs=1e-6)


def _question_search(read_ctx: ReadContext, agent_id: str, share: float) -> dict[str, float]:
    return _scores(read_ctx, agent_id, "lighthouse restoration volunteering", event_question_share=share)


def test_the_answer_to_a_matching_question_is_lifted_and_a_reaction_to_a_statement_is_not(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    at = FIRST
    question = memory.event(
        "Which lighthouse restoration are you volunteering for?", speaker="Caroline", session_id="s1", occurred_at=at
    )
    answer = memory.event(
        "The one near the harbour, every Saturday morning.",
        speaker="Melanie",
        session_id="s1",
        occurred_at=at + timedelta(minutes=1),
    )
    statement = memory.event(
        "I volunteer for the lighthouse restoration now.",
        speaker="Caroline",
        session_id="s2",
        occurred_at=at + timedelta(days=1),
    )
    reaction = memory.event(
        "The one near the harbour, every Saturday morning.",
        speaker="Melanie",
        session_id="s2",
        occurred_at=at + timedelta(days=1, minutes=1),
    )
    follow_up = memory.event(
        "Which lighthouse restoration are you volunteering for?", speaker="Caroline", session_id="s3", occurred_at=at
    )
    same_speaker = memory.event(
        "The one near the harbour, every Saturday morning.",
        speaker="Caroline",
        session_id="s3",
        occurred_at=at + timedelta(minutes=1),
    )
    alone = _question_search(read_ctx, memory.agent_id, 0.0)
    lifted = _question_search(read_ctx, memory.agent_id, 0.5)
    assert lifted[question] == pytest.approx(alone[question], abs=1e-6)
    assert lifted[statement] == pytest.approx(alone[statement], abs=1e-6)
    assert lifted.get(answer, 0.0) > alone.get(answer, 0.0) + 0.1
    # Not a question, or the speaker's own next turn: nothing answered, nothing lifted.
    assert lifted.get(reaction, 0.0) == pytest.approx(alone.get(reaction, 0.0), abs=1e-6)
    assert lifted.get(same_speaker, 0.0) == pytest.approx(alone.get(same_speaker, 0.0), abs=1e-6)
    assert follow_up in lifted
