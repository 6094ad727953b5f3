"""The API's group commit of single messages (api.event_writer) on the real PostgreSQL.

The writes are the service's own (:func:`accept_agent_messages` in autocommit sessions, as the
API runs them); the tests only wrap them to see each batch and, where a test needs a write in
flight, to hold the first one until the next messages are waiting.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator, Sequence

import pytest
from sqlalchemy import Engine, exc, text

from api.event_writer import EventWriter
from memory_core.db.engine import create_db_engine, create_session_factory
from memory_core.settings import Settings
from memory_core.write.intake import AcceptedMessage, IncomingMessage, accept_agent_messages


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    engine = create_db_engine(settings, pool_size=2)
    yield engine
    engine.dispose()


class Published:
    """What the writer handed to the pipeline, call by call."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, event_ids: Sequence[str]) -> None:
        self.calls.append(list(event_ids))

    @property
    def ids(self) -> list[str]:
        return [event_id for call in self.calls for event_id in call]


class RecordedWrites:
    """The service's write, with the size of every batch it was given; the first may be held."""

    def __init__(self, engine: Engine, *, hold_first: bool = False) -> None:
        self.sessions = create_session_factory(engine.execution_options(isolation_level="AUTOCOMMIT"))
        self.batches: list[int] = []
        self.published = Published()
        self.first_started = threading.Event()
        self.release_first = threading.Event()
        if not hold_first:
            self.release_first.set()

    def __call__(self, items: Sequence[tuple[str, IncomingMessage]]) -> list[AcceptedMessage]:
        self.batches.append(len(items))
        if len(self.batches) == 1:
            self.first_started.set()
            assert self.release_first.wait(timeout=30), "the test never released the first write"
        with self.sessions() as session:
            return accept_agent_messages(session, items)


def _stored(engine: Engine, agent_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT e.id, e.agent_id, e.text, r.status FROM memory_events e "
                "JOIN pipeline_runs r ON r.event_id = e.id WHERE e.agent_id = ANY(:agents)"
            ),
            {"agents": list(agent_ids)},
        ).all()
    assert all(row.status == "received" for row in rows)
    return {str(row.id): (row.agent_id, row.text) for row in rows}


def _behind_a_held_write(
    writes: RecordedWrites, first: tuple[str, IncomingMessage], rest: Sequence[tuple[str, IncomingMessage]]
) -> list[AcceptedMessage | BaseException]:
    """Send ``first``; while its write is held, send ``rest``; then let it go. Every outcome, in order.

    Published ids are in ``writes.published``; the writer is closed afterwards.
    """
    writer = EventWriter(writes, writes.published)

    async def send() -> list[AcceptedMessage | BaseException]:
        first_answer = asyncio.ensure_future(writer.accept(*first))
        await asyncio.get_running_loop().run_in_executor(None, writes.first_started.wait)
        later = [asyncio.ensure_future(writer.accept(*item)) for item in rest]
        await asyncio.sleep(0.05)  # every later message is waiting for the next write
        writes.release_first.set()
        answers = list(await asyncio.gather(first_answer, *later, return_exceptions=True))
        assert await writer.drain()
        return answers

    try:
        return asyncio.run(send())
    finally:
        writer.close()


def _accepted(outcomes: Sequence[AcceptedMessage | BaseException]) -> list[AcceptedMessage]:
    assert all(isinstance(outcome, AcceptedMessage) for outcome in outcomes), outcomes
    return [outcome for outcome in outcomes if isinstance(outcome, AcceptedMessage)]


def test_messages_that_arrive_during_a_write_are_written_together_by_the_next(engine: Engine) -> None:
    writes = RecordedWrites(engine, hold_first=True)
    agents = [f"writer-{uuid.uuid4().hex[:8]}-{index}" for index in range(4)]
    first = (agents[0], IncomingMessage(message="The first one.", speaker_name="Ana"))
    later = [(agents[i % 4], IncomingMessage(message=f"Message {i}.", speaker_name="Ana")) for i in range(20)]

    first_accepted, *later_accepted = _accepted(_behind_a_held_write(writes, first, later))

    # One statement for the message alone, one for the twenty that waited behind it.
    assert writes.batches == [1, 20]
    stored = _stored(engine, agents)
    assert len(stored) == 21
    # Every request got the event of its own message.
    assert stored[str(first_accepted.event_id)] == (first[0], first[1].message)
    for (agent_id, message), accepted in zip(later, later_accepted, strict=True):
        assert accepted.created
        assert stored[str(accepted.event_id)] == (agent_id, message.message)
    # Published once per write, in the order written.
    assert writes.published.calls == [
        [str(first_accepted.event_id)],
        [str(accepted.event_id) for accepted in later_accepted],
    ]


def test_a_known_message_id_is_answered_with_its_event_and_not_published_again(engine: Engine) -> None:
    writes = RecordedWrites(engine, hold_first=True)
    agent = f"writer-{uuid.uuid4().hex[:8]}"
    other = f"{agent}-other"
    message = IncomingMessage(message="Eu moro em Recife.", speaker_name="Ana", message_id="m-1")

    # The same message id twice in the next batch, and once for another agent (ids are per agent).
    accepted = _accepted(
        _behind_a_held_write(writes, (agent, message), [(agent, message), (agent, message), (other, message)])
    )

    assert writes.batches == [1, 3]
    assert [item.created for item in accepted] == [True, False, False, True]
    assert accepted[1].event_id == accepted[2].event_id == accepted[0].event_id
    assert accepted[3].event_id != accepted[0].event_id
    assert len(_stored(engine, [agent])) == 1
    assert len(_stored(engine, [other])) == 1
    assert writes.published.ids == [str(accepted[0].event_id), str(accepted[3].event_id)]


def test_a_message_the_database_refuses_fails_alone(engine: Engine) -> None:
    writes = RecordedWrites(engine, hold_first=True)
    agent = f"writer-{uuid.uuid4().hex[:8]}"
    # Longer than the speaker column: the API refuses it with a 422 before it gets here, so
    # it stands for a row PostgreSQL refuses whatever the reason.
    refused = IncomingMessage(message="Refused.", speaker_name="x" * 300)
    fine = [IncomingMessage(message=f"Fine {i}.", speaker_name="Ana") for i in range(4)]

    rest = [(agent, item) for item in (fine[1], refused, fine[2], fine[3])]
    outcomes = _behind_a_held_write(writes, (agent, fine[0]), rest)

    assert isinstance(outcomes[2], exc.DBAPIError), outcomes[2]
    stored = _stored(engine, [agent])
    assert sorted(text_ for _, text_ in stored.values()) == ["Fine 0.", "Fine 1.", "Fine 2.", "Fine 3."]
    answered = [outcome for index, outcome in enumerate(outcomes) if index != 2]
    assert all(isinstance(outcome, AcceptedMessage) and outcome.created for outcome in answered)
    assert sorted(writes.published.ids) == sorted(stored)
    # The batch of four failed as a whole, then each of its messages was written alone.
    assert writes.batches == [1, 4, 1, 1, 1, 1]


def test_a_publisher_that_hangs_holds_up_neither_the_answers_nor_the_next_writes(engine: Engine) -> None:
    writes = RecordedWrites(engine)
    broker_back = threading.Event()
    published: list[list[str]] = []

    def hanging_publish(event_ids: Sequence[str]) -> None:
        broker_back.wait(timeout=30)
        published.append(list(event_ids))

    writer = EventWriter(writes, hanging_publish)
    agent = f"writer-{uuid.uuid4().hex[:8]}"

    async def send() -> list[AcceptedMessage]:
        answers = []
        for index in range(5):  # one after the other: five writes, while the first publish hangs
            answers.append(await asyncio.wait_for(writer.accept(agent, IncomingMessage(f"M {index}.", "Ana")), 10))
        assert published == []
        broker_back.set()
        assert await writer.drain()
        return answers

    try:
        accepted = asyncio.run(send())
    finally:
        broker_back.set()
        writer.close()

    assert writes.batches == [1, 1, 1, 1, 1]
    # The first publish waited for the broker; the four ids written meanwhile went out together.
    assert published == [[str(accepted[0].event_id)], [str(item.event_id) for item in accepted[1:]]]


def test_an_unreachable_database_fails_the_waiting_messages_together_without_retrying_each(settings: Settings) -> None:
    # Nothing listens on the port: every connection attempt is refused at once.
    unreachable = create_db_engine(settings.model_copy(update={"database_url": "postgresql://postgres@127.0.0.1:1/x"}))
    writes = RecordedWrites(unreachable, hold_first=True)
    agent = f"writer-{uuid.uuid4().hex[:8]}"
    messages = [(agent, IncomingMessage(message=f"M {i}.", speaker_name="Ana")) for i in range(5)]
    try:
        outcomes = _behind_a_held_write(writes, messages[0], messages[1:])
    finally:
        unreachable.dispose()

    assert all(isinstance(outcome, exc.OperationalError) for outcome in outcomes), outcomes
    assert writes.batches == [1, 4]
    assert writes.published.calls == []
