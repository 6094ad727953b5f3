"""Reply context in relevant conversations: a matched message brings the next message of its session."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from memory_core.config import MemoryConfig, apply_overrides
from memory_core.read.context import ReadContext
from memory_core.read.conversations import (
    REPLY_TO_QUESTION_FACTOR,
    REPLY_TO_STATEMENT_FACTOR,
    relevant_conversations,
    reply_factor,
)
from memory_core.read.entities import TimeWindow
from memory_core.read.pipeline import retrieve
from memory_core.read.schemas import RetrievedEvent
from memory_core.write.repository import vector_literal
from tests.memory_core.read.conftest import NOW, MemoryBuilder

SAID = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
QUESTION = "What did you research about the lighthouse restoration?"
ANSWER = "Mostly adoption agencies in Ohio."
QUERY = "lighthouse restoration research"


def _search(
    read_ctx: ReadContext,
    agent_id: str,
    query: str = QUERY,
    *,
    config: MemoryConfig | None = None,
    session_id: str | None = None,
    window: TimeWindow | None = None,
) -> list[RetrievedEvent]:
    vector = read_ctx.embedder.embed_one(query)
    assert vector is not None
    # The reply mechanism alone: the answer to a matched question is not also lifted on its own.
    alone = apply_overrides(config or read_ctx.base_config, {"event_question_share": 0.0}).config
    with read_ctx.sessions() as session:
        return relevant_conversations(
            session,
            agent_id,
            vector,
            [],
            alone,
            now=NOW,
            session_id=session_id,
            window=window,
        )


def _ids(events: Sequence[RetrievedEvent]) -> list[tuple[str, str | None]]:
    return [(event.event_id, event.reply_to) for event in events]


def _turns(memory: MemoryBuilder, lines: Sequence[tuple[str, str]], *, session_id: str = "s1") -> list[str]:
    """Turns of one session, all stamped ``SAID`` (as an import stamps a session), inserted in order."""
    return [memory.event(line, speaker=speaker, session_id=session_id, occurred_at=SAID) for speaker, line in lines]


def test_the_reply_follows_its_parent_with_a_score_just_below(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    _, question, answer, _ = _turns(
        memory,
        [
            ("Caroline", "Good morning, sunshine!"),
            ("Melanie", QUESTION),
            ("Caroline", ANSWER),
            ("Melanie", "Nice, sounds good."),
        ],
    )
    events = _search(read_ctx, memory.agent_id)
    assert _ids(events) == [(question, None), (answer, question)]
    parent, reply = events
    assert reply.text == ANSWER
    assert reply.speaker == "Caroline"
    assert reply.occurred_at == SAID
    assert reply.score == pytest.approx(parent.score * REPLY_TO_QUESTION_FACTOR, abs=1e-5)


def test_the_reply_to_a_statement_counts_for_less_than_the_answer_to_a_question() -> None:
    assert reply_factor(QUESTION) == REPLY_TO_QUESTION_FACTOR
    assert reply_factor("¿Qué investigaste sobre el faro") == REPLY_TO_QUESTION_FACTOR
    assert reply_factor("I researched the lighthouse restoration.") == REPLY_TO_STATEMENT_FACTOR
    assert REPLY_TO_STATEMENT_FACTOR < REPLY_TO_QUESTION_FACTOR < 1.0


def test_the_reply_to_a_statement_gets_the_statement_share(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    statement = "I researched the lighthouse restoration last week."
    said, reaction = _turns(memory, [("Melanie", statement), ("Caroline", "Wow, that sounds like fun!")])
    events = _search(read_ctx, memory.agent_id, query="lighthouse restoration research")
    assert _ids(events) == [(said, None), (reaction, said)]
    assert events[1].score == pytest.approx(events[0].score * REPLY_TO_STATEMENT_FACTOR, abs=1e-5)


def test_the_context_shows_the_reply_under_its_parent(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    _turns(memory, [("Melanie", QUESTION), ("Caroline", ANSWER)])
    result = retrieve(read_ctx, agent_id=memory.agent_id, query=QUESTION)
    assert [event.reply_to is not None for event in result.events] == [False, True]
    # Each with who said it: "I did" means nothing in a two-person conversation without the name.
    assert f"- (2023-05-08) Melanie: {QUESTION}\n  - reply: Caroline: {ANSWER}" in result.context


def test_no_reply_when_the_same_speaker_goes_on(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    (question, _, _) = _turns(
        memory, [("Melanie", QUESTION), ("Melanie", "Also, the weather was lovely."), ("Caroline", ANSWER)]
    )
    assert _ids(_search(read_ctx, memory.agent_id)) == [(question, None)]


def test_no_reply_across_sessions(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    question = memory.event(QUESTION, speaker="Melanie", session_id="s1", occurred_at=SAID)
    memory.event(ANSWER, speaker="Caroline", session_id="s2", occurred_at=SAID + timedelta(minutes=1))
    assert _ids(_search(read_ctx, memory.agent_id)) == [(question, None)]
    # Searching one session: the reply is looked for in it too.
    assert _ids(_search(read_ctx, memory.agent_id, session_id="s1")) == [(question, None)]


def test_the_session_filter_still_gets_the_reply(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    question, answer = _turns(memory, [("Melanie", QUESTION), ("Caroline", ANSWER)], session_id="s7")
    assert _ids(_search(read_ctx, memory.agent_id, session_id="s7")) == [(question, None), (answer, question)]
    assert _search(read_ctx, memory.agent_id, session_id="other") == []


def test_no_reply_after_the_as_of_end(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    question = memory.event(QUESTION, speaker="Melanie", occurred_at=SAID)
    answer = memory.event(ANSWER, speaker="Caroline", occurred_at=SAID + timedelta(hours=2))
    before_reply = TimeWindow(start=SAID - timedelta(days=1), end=SAID + timedelta(hours=1))
    assert _ids(_search(read_ctx, memory.agent_id, window=before_reply)) == [(question, None)]
    covering = TimeWindow(start=SAID - timedelta(days=1), end=SAID + timedelta(hours=2))
    assert _ids(_search(read_ctx, memory.agent_id, window=covering)) == [(question, None), (answer, question)]


def test_switching_it_off_lists_the_matched_messages_only(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    question, _ = _turns(memory, [("Melanie", QUESTION), ("Caroline", ANSWER)])
    config = apply_overrides(read_ctx.base_config, {"event_reply_context": False}).config
    events = _search(read_ctx, memory.agent_id, config=config)
    assert _ids(events) == [(question, None)]
    with_replies = _search(read_ctx, memory.agent_id)
    # The matched message itself is scored exactly as without replies.
    assert with_replies[0].model_dump() == events[0].model_dump()


def test_another_agents_messages_are_never_the_reply(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    other = MemoryBuilder(memory.engine, memory.embedder, f"{memory.agent_id}-other")
    question = memory.event(QUESTION, speaker="Melanie", session_id="s1", occurred_at=SAID)
    # Same session id, same occurred_at, sent in between: the next row of the table, but not this agent's.
    other.event("Secret of another agent: the vault code.", speaker="Stranger", session_id="s1", occurred_at=SAID)
    answer = memory.event(ANSWER, speaker="Caroline", session_id="s1", occurred_at=SAID)
    events = _search(read_ctx, memory.agent_id)
    assert _ids(events) == [(question, None), (answer, question)]
    assert all("vault" not in event.text for event in events)
    # And the other agent's search sees none of this agent's messages, replies included.
    assert all(event.event_id not in {question, answer} for event in _search(read_ctx, other.agent_id))


def test_a_reply_already_chosen_is_listed_once_under_its_parent(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    question, answer = _turns(
        memory, [("Melanie", QUESTION), ("Caroline", "The lighthouse restoration research was about Ohio.")]
    )
    events = _search(read_ctx, memory.agent_id)
    assert _ids(events) == [(question, None), (answer, question)]
    assert events[1].score <= events[0].score


def test_a_reply_chosen_above_its_parent_stays_apart(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    _opener, answer = _turns(
        memory, [("Melanie", "Any news on that project?"), ("Caroline", "The lighthouse restoration research is done.")]
    )
    events = _search(read_ctx, memory.agent_id)
    assert _ids(events)[0] == (answer, None)
    assert [event_id for event_id, _ in _ids(events)].count(answer) == 1


def test_replies_compete_for_topk_and_the_weakest_give_way(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    strong, strong_reply = _turns(memory, [("Melanie", QUESTION), ("Caroline", ANSWER)], session_id="strong")
    # A weaker match (older, and a looser wording) with a reply of its own.
    old = SAID - timedelta(days=400)
    weak = memory.event("Any lighthouse news?", speaker="Melanie", session_id="weak", occurred_at=old)
    memory.event("None at all, sorry.", speaker="Caroline", session_id="weak", occurred_at=old + timedelta(minutes=1))
    config = apply_overrides(read_ctx.base_config, {"topk_events": 3}).config
    events = _search(read_ctx, memory.agent_id, config=config)
    assert events[0].score * reply_factor(QUESTION) > events[2].score
    # Three places: the strong match, its reply, then the weak match; the weak match's reply is cut.
    assert _ids(events) == [(strong, None), (strong_reply, strong), (weak, None)]

    # With two places the reply of the strong match displaces the weak match.
    config = apply_overrides(read_ctx.base_config, {"topk_events": 2}).config
    assert _ids(_search(read_ctx, memory.agent_id, config=config)) == [(strong, None), (strong_reply, strong)]
    # With one place, the match alone.
    config = apply_overrides(read_ctx.base_config, {"topk_events": 1}).config
    assert _ids(_search(read_ctx, memory.agent_id, config=config)) == [(strong, None)]


def _legacy_event(memory: MemoryBuilder, message: str, speaker: str, occurred_at: datetime) -> str:
    """A message stored before migration 0005: no seq."""
    event_id = str(uuid.uuid4())
    vector = memory.embedder.embed_one(message)
    assert vector is not None
    with memory.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO memory_events (id, agent_id, text, speaker, session_id, occurred_at, seq, embedding_vec) "
                "VALUES (:id, :agent, :text, :speaker, 's1', :at, NULL, CAST(:vec AS vector))"
            ),
            {
                "id": event_id,
                "agent": memory.agent_id,
                "text": message,
                "speaker": speaker,
                "at": occurred_at,
                "vec": vector_literal(vector),
            },
        )
    return event_id


def test_messages_without_seq_get_a_reply_only_when_their_order_is_known(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    # Same occurred_at and no seq: which came first is unknown, so no reply.
    question = _legacy_event(memory, QUESTION, "Melanie", SAID)
    _legacy_event(memory, ANSWER, "Caroline", SAID)
    assert _ids(_search(read_ctx, memory.agent_id)) == [(question, None)]

    other = MemoryBuilder(memory.engine, memory.embedder, f"{memory.agent_id}-later")
    question = _legacy_event(other, QUESTION, "Melanie", SAID)
    answer = _legacy_event(other, ANSWER, "Caroline", SAID + timedelta(minutes=1))
    assert _ids(_search(read_ctx, other.agent_id)) == [(question, None), (answer, question)]
    # A newer row (with seq) sharing the legacy row's occurred_at arrived after it.
    newer = MemoryBuilder(memory.engine, memory.embedder, f"{memory.agent_id}-mixed")
    question = _legacy_event(newer, QUESTION, "Melanie", SAID)
    answer = newer.event(ANSWER, speaker="Caroline", session_id="s1", occurred_at=SAID)
    assert _ids(_search(read_ctx, newer.agent_id)) == [(question, None), (answer, question)]


@pytest.mark.parametrize(
    ("question", "later", "query"),
    [
        ("Where does Ana live?", "I live in Porto now, by the river.", "Where does Ana live?"),
        ("Onde a Ana mora?", "Eu moro no Porto agora, perto do rio.", "Onde a Ana mora?"),
    ],
)
def test_no_reply_from_a_message_said_years_later_in_the_same_session(
    read_ctx: ReadContext, memory: MemoryBuilder, question: str, later: str, query: str
) -> None:
    # Two imports into the default session, two years apart: the second one's first message is the
    # next message of the session, but it answers nothing the first import asked.
    asked = memory.event(question, speaker="Bruno", occurred_at=SAID)
    memory.event(later, speaker="Ana", occurred_at=SAID + timedelta(days=730))
    events = _search(read_ctx, memory.agent_id, query=query)
    assert (asked, None) in _ids(events)
    assert [event.reply_to for event in events] == [None] * len(events)
    result = retrieve(read_ctx, agent_id=memory.agent_id, query=query)
    assert "reply:" not in result.context


@pytest.mark.parametrize(("question", "answer"), [(QUESTION, ANSWER), ("Onde a Ana mora?", "Eu moro em Lisboa.")])
def test_a_reply_within_the_gap_is_kept_and_the_gap_is_a_setting(
    read_ctx: ReadContext, memory: MemoryBuilder, question: str, answer: str
) -> None:
    asked = memory.event(question, speaker="Melanie", occurred_at=SAID)
    replied = memory.event(answer, speaker="Caroline", occurred_at=SAID + timedelta(minutes=5))
    assert _ids(_search(read_ctx, memory.agent_id, query=question)) == [(asked, None), (replied, asked)]
    # Five minutes is too long when the bound is one minute.
    tight = apply_overrides(read_ctx.base_config, {"event_reply_max_gap_s": 60}).config
    assert _ids(_search(read_ctx, memory.agent_id, query=question, config=tight)) == [(asked, None)]
