"""Single messages coalesced into chunks of several agents (``workers.intake``), end to end.

Real API over HTTP, real workers, PostgreSQL and Redis: what a user sees is that every message
is processed exactly as if it were alone, in fewer tasks, and that nothing waits forever when a
collector is lost or an agent is busy elsewhere.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
from celery import Celery
from sqlalchemy import create_engine, text

from memory_core.settings import Settings
from memory_core.write.context import WriteContext, build_write_context
from memory_core.write.intake import IncomingMessage, accept_messages
from memory_core.write.pipeline import run_stage_chunk
from tests.support.api_server import eventually_equal, serve_api
from tests.support.workers import isolated_app, running_worker, wait_for_runs
from tests.workers.conftest import API_KEY
from tests.workers.memory_queries import MemoryInspector
from workers.intake import IntakeQueue
from workers.metrics_ledger import MetricsLedger
from workers.redis_client import redis_client_for

T0 = datetime(2025, 2, 1, 9, 0, tzinfo=UTC)
CITIES = ("Recife", "Lisboa", "Porto Alegre", "Curitiba")


def _intake(app: Celery) -> IntakeQueue:
    settings: Settings = app.arandu_settings  # type: ignore[attr-defined]
    return IntakeQueue(redis_client_for(settings.broker_url), settings.broker_key_prefix)


def _task_runs(app: Celery, task: str) -> int:
    settings: Settings = app.arandu_settings  # type: ignore[attr-defined]
    ledger = MetricsLedger.for_settings(settings)
    assert ledger is not None
    stats = ledger.snapshot().tasks.get(task)
    return 0 if stats is None else stats.count


def test_single_messages_of_several_agents_are_processed_in_shared_chunks(write_settings: Settings) -> None:
    app = isolated_app(write_settings)
    own: Settings = app.arandu_settings  # type: ignore[attr-defined]
    agents = [f"agent-{uuid.uuid4().hex[:8]}" for _ in range(4)]
    memory = MemoryInspector(own.database_url)
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with serve_api(own) as base_url, httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
        sent: list[str] = []
        # Each agent moves twice; the messages arrive interleaved across agents.
        for step in range(3):
            for number, agent in enumerate(agents):
                city = CITIES[(number + step) % len(CITIES)]
                response = client.post(
                    f"/v1/agents/{agent}/messages",
                    json={
                        "message": f"Eu moro em {city}.",
                        "speaker_name": "Rafael",
                        "occurred_at": (T0 + timedelta(days=30 * step)).isoformat(),
                    },
                )
                assert response.status_code == 202, response.text
                sent.append(response.json()["event_id"])
        eventually_equal(lambda: _intake(app).depth(), len(sent))  # pushed just after each answer
        with running_worker(app, concurrency=4):
            assert wait_for_runs(own.database_url, sent) == dict.fromkeys(sent, "done")
        # Twelve messages of four agents in one chunk: each stage ran once, not twelve times.
        assert _task_runs(app, "ingest.collect") == 1
        assert _task_runs(app, "ingest.extract") == 1
        assert _task_runs(app, "apply.upsert") == 1
        for number, agent in enumerate(agents):
            residence = [f for f in memory.all_facts(agent) if f["attribute_key"] == "location.residence"]
            active = [f["fact_text"] for f in residence if f["valid_to"] is None]
            # The last move wins, each agent's history is its own.
            assert active == [f"Rafael mora em {CITIES[(number + 2) % len(CITIES)]}."], agent
            assert len(residence) == 3
            # Counters summed over the multi-agent chunk land on each agent's own rows.
            counts = {key: entity["fact_count"] for key, entity in memory.entities(agent).items()}
            places = {f"place:{CITIES[(number + step) % len(CITIES)].lower().replace(' ', '_')}" for step in range(3)}
            current = f"place:{CITIES[(number + 2) % len(CITIES)].lower().replace(' ', '_')}"
            assert {key: counts[key] for key in places} == {key: int(key == current) for key in places}
            registry = memory.rows(
                "SELECT seen_count FROM memory_attribute_registry WHERE agent_id = :a AND key = 'location.residence'",
                a=agent,
            )
            assert [row["seen_count"] for row in registry] == [3]
            response = client.get(f"/v1/events/{sent[8 + number]}")
            assert response.json()["result"]["facts_updated"], response.json()
    memory.close()


def test_a_message_without_company_starts_at_once_and_one_with_company_waits_for_more(
    write_settings: Settings,
) -> None:
    # A long wait and a chunk of three: a lone message held for the wait would take 6 s.
    slow = write_settings.model_copy(update={"pipeline_intake_wait_ms": 6000, "pipeline_intake_chunk_size": 3})
    app = isolated_app(slow)
    own: Settings = app.arandu_settings  # type: ignore[attr-defined]
    agent = f"agent-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": f"Bearer {API_KEY}"}

    def post(client: httpx.Client, message: str) -> str:
        response = client.post(f"/v1/agents/{agent}/messages", json={"message": message, "speaker_name": "Rafael"})
        assert response.status_code == 202, response.text
        return str(response.json()["event_id"])

    with (
        serve_api(own) as base_url,
        httpx.Client(base_url=base_url, headers=headers, timeout=30) as client,
        running_worker(app, concurrency=4),
    ):
        started = time.monotonic()
        alone = post(client, "Eu moro em Recife.")
        # Nobody else is writing: the message is in memory long before the wait would end.
        assert wait_for_runs(own.database_url, [alone], timeout_s=30) == {alone: "done"}
        assert time.monotonic() - started < 4.5
        # The next two come within the wait of the first and of each other: their collector
        # waits, and the second, a second later, joins the first's chunk.
        first = post(client, "Eu trabalho na Vertix.")
        time.sleep(1.0)
        second = post(client, "Eu gosto de jazz.")
        assert wait_for_runs(own.database_url, [first, second], timeout_s=60) == dict.fromkeys([first, second], "done")
    assert _task_runs(app, "ingest.collect") == 2
    assert _task_runs(app, "ingest.extract") == 2


def _accept(context: WriteContext, agent: str, message: str) -> uuid.UUID:
    with context.sessions.begin() as session:
        accepted = accept_messages(session, agent, [IncomingMessage(message=message, speaker_name="Marina")])
    return accepted[0].event_id


def _status(context: WriteContext, event_id: uuid.UUID) -> str:
    with context.sessions() as session:
        return str(
            session.execute(
                text("SELECT status FROM pipeline_runs WHERE event_id = :id"), {"id": str(event_id)}
            ).scalar_one()
        )


def test_an_agent_locked_elsewhere_holds_back_only_its_own_messages_of_a_chunk(context: WriteContext) -> None:
    busy, free = f"agent-{uuid.uuid4().hex[:8]}", f"agent-{uuid.uuid4().hex[:8]}"
    chunk = [_accept(context, busy, "Eu moro em Natal."), _accept(context, free, "Eu moro em Belém.")]
    for stage in ("extract", "resolve", "reconcile"):
        assert set(run_stage_chunk(context, stage, chunk).values()) == {"completed"}

    # Another transaction holds the busy agent's lock (as a concurrent chunk's upsert would).
    holder = create_engine(context.settings.database_url)
    connection = holder.connect()
    transaction = connection.begin()
    connection.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"), {"key": f"arandu:{busy}"})
    outcome: dict[uuid.UUID, object] = {}
    worker = threading.Thread(target=lambda: outcome.update(run_stage_chunk(context, "upsert", chunk)))
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while _status(context, chunk[1]) != "done":
            assert time.monotonic() < deadline, "the free agent's message waited for the busy agent"
            time.sleep(0.05)
        assert _status(context, chunk[0]) == "reconciled"
        assert worker.is_alive()
    finally:
        transaction.rollback()
        connection.close()
        holder.dispose()
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert outcome == {chunk[0]: "completed", chunk[1]: "completed"}
    assert _status(context, chunk[0]) == "done"


def test_the_sweeper_starts_messages_whose_collector_was_lost(write_settings: Settings) -> None:
    app = isolated_app(write_settings)
    own: Settings = app.arandu_settings  # type: ignore[attr-defined]
    context = build_write_context(own)
    intake = _intake(app)
    try:
        event_id = str(_accept(context, f"agent-{uuid.uuid4().hex[:8]}", "Eu trabalho na Vertix."))
        # The push claimed the collector, whose publication then failed: nobody will take the id.
        assert intake.push([event_id]).publish_collector is True
        with running_worker(app, concurrency=2):
            time.sleep(0.5)
            assert intake.depth() == 1
            app.signature("apply.sweep_stuck_runs", immutable=True).apply_async()
            assert wait_for_runs(own.database_url, [event_id], timeout_s=30) == {event_id: "done"}
        assert intake.depth() == 0
    finally:
        intake.close()
        context.close()


def test_coalescing_is_off_without_a_wait_or_without_redis(write_settings: Settings) -> None:
    assert IntakeQueue.for_settings(write_settings) is not None
    no_wait = write_settings.model_copy(update={"pipeline_intake_wait_ms": 0})
    assert IntakeQueue.for_settings(no_wait) is None
    # Workers configured without a wait still drain what an API with one queued.
    assert IntakeQueue.for_settings(no_wait, producer=False) is not None
    rabbit = write_settings.model_copy(update={"broker_url": "amqp://guest:guest@127.0.0.1:5672//"})
    assert IntakeQueue.for_settings(rabbit) is None
    assert IntakeQueue.for_settings(rabbit, producer=False) is None
