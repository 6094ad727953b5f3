"""Time anchors: a query that names a calendar date ranks the messages said on it first."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_core.read.context import ReadContext
from memory_core.read.pipeline import retrieve
from memory_core.read.planner import TimeAnchor, plan_retrieval, time_anchor
from tests.memory_core.read.conftest import MemoryBuilder


@pytest.mark.parametrize(
    ("query", "anchor"),
    [
        ("When did Melanie go camping in June?", TimeAnchor(month=6)),
        ("What did she show on October 13, 2023?", TimeAnchor(year=2023, month=10, day=13)),
        ("What did the donations buy on 16 August, 2023?", TimeAnchor(year=2023, month=8, day=16)),
        ("What happened on the 3rd of May?", TimeAnchor(month=5)),
        ("How many times did she go to the beach in 2023?", TimeAnchor(year=2023)),
        ("O que a Ana fez em 13 de outubro de 2023?", TimeAnchor(year=2023, month=10, day=13)),
        ("Onde ela estava em março?", TimeAnchor(month=3)),
        ("What did they do in May?", TimeAnchor(month=5)),
        ("Plans for Mar 3rd", TimeAnchor(month=3, day=3)),
        # Words that only look like months, and relative dates, are no anchor.
        ("What may happen next?", None),
        ("Did they march in the parade?", None),
        ("I set it up and went out", None),
        ("What did she do last week?", None),
        ("Where does Ana live?", None),
    ],
)
def test_a_query_names_a_calendar_date(query: str, anchor: TimeAnchor | None) -> None:
    assert time_anchor(query) == anchor
    assert plan_retrieval(query).anchor == anchor


def _camping(memory: MemoryBuilder) -> tuple[str, str]:
    june = memory.event(
        "We went camping by the lake, it was lovely.",
        speaker="Melanie",
        occurred_at=datetime(2023, 6, 27, 13, 0, tzinfo=UTC),
        session_id="s1",
    )
    july = memory.event(
        "We went camping by the lake, it was lovely.",
        speaker="Melanie",
        occurred_at=datetime(2023, 7, 20, 13, 0, tzinfo=UTC),
        session_id="s2",
    )
    return june, july


def test_the_message_said_on_the_named_date_ranks_first(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    june, july = _camping(memory)

    # Without a date the two messages (the same words) match alike and the newer comes first.
    plain = retrieve(read_ctx, agent_id=memory.agent_id, query="When did Melanie go camping by the lake?")
    assert [event.event_id for event in plain.events][:2] == [july, june]

    in_june = retrieve(read_ctx, agent_id=memory.agent_id, query="When did Melanie go camping in June?")
    assert in_june.events[0].event_id == june
    scores = {event.event_id: event.score for event in in_june.events}
    assert july in scores, "a match said on another date is kept, only ranked lower"
    assert scores[july] < scores[june]


def test_the_date_is_read_in_the_configured_time_zone(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    # 01:00 UTC on 1 July is still 30 June in São Paulo (UTC-3).
    late = memory.event(
        "Camping by the lake at night, lovely.",
        speaker="Melanie",
        occurred_at=datetime(2023, 7, 1, 1, 0, tzinfo=UTC),
    )
    other = memory.event(
        "Camping by the lake in the morning, lovely.",
        speaker="Melanie",
        occurred_at=datetime(2023, 7, 1, 15, 0, tzinfo=UTC),
    )
    query = "Where did Melanie go camping on 30 June 2023?"

    in_utc = retrieve(read_ctx, agent_id=memory.agent_id, query=query)
    in_sao_paulo = retrieve(
        read_ctx, agent_id=memory.agent_id, query=query, config_overrides={"timezone": "America/Sao_Paulo"}
    )

    # In UTC neither was said on 30 June: the newer first. In São Paulo the late one was.
    assert in_utc.events[0].event_id == other
    assert in_sao_paulo.events[0].event_id == late
