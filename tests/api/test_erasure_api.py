"""Erasing an agent (``DELETE /v1/agents/{agent_id}?confirm=true``) over real HTTP, with a real worker.

The memory of the erased agent is written by the real pipeline and maintenance jobs, so every
table with an agent column holds its rows before the erasure; which tables those are is asked
of the schema here, independently of the code under test. A second agent's rows must come
through untouched. The race test erases while the agent's messages and jobs are in flight.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import httpx
import pytest
from celery import Celery
from celery.signals import task_failure, task_postrun, task_retry
from sqlalchemy import Engine, create_engine, text

from arandu_client import AgentErased, AranduClient, AsyncAranduClient
from memory_core.maintenance.registry import JOB_NAMES
from memory_core.maintenance.runs import request_run
from memory_core.providers.hashing_embedder import HashingEmbedder
from memory_core.read.agent_index import agent_index_name, agent_text_index_name, build_agent_index
from memory_core.settings import Settings
from memory_core.write.context import WriteContext, build_write_context
from tests.support.api_server import TEST_API_KEY, api_settings, auth_headers, serve_api
from tests.support.api_server import poll as shared_poll
from tests.support.services import TestServices
from tests.support.workers import running_worker
from tests.workers.maintenance_support import CountingFactory, Gate
from workers.celery_app import create_celery_app
from workers.tasks.maintenance import job_overrides, task_name

STAGE_TASKS = ("ingest.extract", "apply.resolve", "apply.reconcile", "apply.upsert")
# What the maintenance jobs find to work on: people at a company and a city (relationships,
# clusters, communities), feelings (emotion tags, trends), and repeated episodes (observations).
MESSAGES = [
    "A Fernanda trabalha na Orion Tech.",
    "A Fernanda mora em Campinas.",
    "O Bruno trabalha na Orion Tech.",
    "O Bruno mora em Campinas.",
    "My sister Julia is a doctor in Lisbon.",
    "I have a dog named Rex.",
    "Estou feliz com o time!",
    "I am so happy today, Rex learned a new trick.",
]


class SlowEmbedder(HashingEmbedder):
    """The hashing embedder, taking ``delay_s`` per call when a test wants messages to stay in flight."""

    def __init__(self) -> None:
        super().__init__(384)
        self.delay_s = 0.0

    def embed(self, texts: list[str]) -> list[list[float]]:
        if self.delay_s:
            time.sleep(self.delay_s)
        return super().embed(texts)


@dataclass
class TaskLog:
    """Every task the worker ran (name, first argument, return value), and the ones that failed or retried."""

    finished: list[tuple[str, Any, Any]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    retried: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_postrun(self, sender: Any = None, args: Sequence[Any] | None = None, retval: Any = None, **_: Any) -> None:
        with self.lock:
            self.finished.append((str(getattr(sender, "name", "")), (args or [None])[0], retval))

    def on_failure(self, sender: Any = None, exception: BaseException | None = None, **_: Any) -> None:
        with self.lock:
            self.failed.append((str(getattr(sender, "name", "")), repr(exception)))

    def on_retry(self, sender: Any = None, reason: Any = None, **_: Any) -> None:
        with self.lock:
            self.retried.append((str(getattr(sender, "name", "")), repr(reason)))

    def stage_results(self, event_ids: Sequence[str]) -> dict[tuple[str, str], Any]:
        """(event id, stage task) -> what the stage returned for it: a single event's outcome, or the
        summary of the chunk it ran in ("completed 4, missing 2"; small batches run as one chunk)."""
        wanted = set(event_ids)
        results: dict[tuple[str, str], Any] = {}
        with self.lock:
            for name, arg, value in self.finished:
                if name not in STAGE_TASKS:
                    continue
                for event_id in arg if isinstance(arg, list) else [arg]:
                    if event_id in wanted:
                        results[(event_id, name)] = value
        return results

    def result_of(self, task: str, argument: str) -> Any:
        """What ``task`` returned for ``argument`` (None while it has not run)."""
        with self.lock:
            return next((value for name, arg, value in self.finished if name == task and arg == argument), None)


@dataclass
class Stack:
    base_url: str
    settings: Settings
    app: Celery
    engine: Engine
    http: httpx.Client
    embedder: SlowEmbedder
    tasks: TaskLog


@pytest.fixture(scope="module")
def stack(services: TestServices, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # A database of this module alone: table counts before and after are compared whole.
    from memory_core.db.migrate import upgrade

    url = services.new_database("arandu_erase")
    settings = api_settings(url, services.broker_url, tmp_path_factory.mktemp("erase-home"))
    upgrade(settings)
    own = settings.model_copy(update={"broker_key_prefix": f"t{uuid.uuid4().hex[:10]}:"})
    embedder = SlowEmbedder()

    def write_context(worker_settings: Settings) -> WriteContext:
        return build_write_context(worker_settings, embedder=embedder)

    maintenance = CountingFactory()
    app = create_celery_app(own, context_factory=write_context, maintenance_context_factory=maintenance)
    tasks = TaskLog()
    task_postrun.connect(tasks.on_postrun, weak=False)
    task_failure.connect(tasks.on_failure, weak=False)
    task_retry.connect(tasks.on_retry, weak=False)
    engine = create_engine(url)
    try:
        with (
            running_worker(app, concurrency=4, queues=("ingest", "apply", "maintenance")),
            serve_api(own) as base_url,
            httpx.Client(base_url=base_url, headers=auth_headers(), timeout=60) as http,
        ):
            yield Stack(base_url, own, app, engine, http, embedder, tasks)
    finally:
        task_postrun.disconnect(tasks.on_postrun)
        task_failure.disconnect(tasks.on_failure)
        task_retry.disconnect(tasks.on_retry)
        maintenance.close()
        engine.dispose()
        app.close()


def new_agent(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


# ---- What the schema holds of an agent (asked of information_schema, not of the code under test) ----------


def tables_with_agent_column(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        return list(
            connection.execute(
                text(
                    "SELECT c.table_name FROM information_schema.columns c JOIN information_schema.tables t "
                    "ON t.table_schema = c.table_schema AND t.table_name = c.table_name "
                    "WHERE c.table_schema = current_schema() AND c.column_name = 'agent_id' "
                    "AND t.table_type = 'BASE TABLE' ORDER BY 1"
                )
            ).scalars()
        )


def rows_of(engine: Engine, agent: str) -> dict[str, int]:
    """Rows of ``agent`` in every table with an agent column."""
    counts: dict[str, int] = {}
    with engine.connect() as connection:
        for table in tables_with_agent_column(engine):
            counts[table] = int(
                connection.execute(
                    text(f'SELECT count(*) FROM "{table}" WHERE agent_id = :agent'), {"agent": agent}
                ).scalar_one()
            )
    return counts


def stage_outputs_of(engine: Engine, event_ids: Sequence[str]) -> int:
    with engine.connect() as connection:
        return int(
            connection.execute(
                text("SELECT count(*) FROM pipeline_stage_outputs WHERE event_id = ANY(CAST(:ids AS uuid[]))"),
                {"ids": list(event_ids)},
            ).scalar_one()
        )


def event_ids_of(engine: Engine, agent: str) -> list[str]:
    with engine.connect() as connection:
        return [
            str(value)
            for value in connection.execute(
                text("SELECT id FROM memory_events WHERE agent_id = :agent"), {"agent": agent}
            ).scalars()
        ]


def agent_indexes_present(engine: Engine, agent: str) -> int:
    with engine.connect() as connection:
        return int(
            connection.execute(
                text("SELECT count(*) FROM pg_indexes WHERE indexname = ANY(:names)"),
                {"names": [agent_index_name(agent), agent_text_index_name(agent)]},
            ).scalar_one()
        )


T = TypeVar("T")


def poll(check: Callable[[], T], what: str) -> T:
    """:func:`tests.support.api_server.poll` with this module's longer wait (the erasure's jobs queue behind others)."""
    return shared_poll(check, what, timeout_s=90)


# ---- Seeding ---------------------------------------------------------------------------------------------


def write_memory(stack: Stack, client: AranduClient, agent: str) -> None:
    """Messages (a batch and an import), retrievals, every maintenance job, and the tables offline code never writes."""
    now = datetime.now(UTC)
    # The agent's own config (agent_configs), put first so that everything below runs on it.
    configured = stack.http.put(f"/v1/agents/{agent}/config", json={"overrides": {"topk_facts": 15}})
    assert configured.status_code == 200, configured.text
    batch = client.send_batch(
        agent,
        [
            {"message": text_, "speaker_name": "Rafael", "occurred_at": now - timedelta(hours=len(MESSAGES) - i)}
            for i, text_ in enumerate(MESSAGES)
        ],
    )
    imported = client.start_import(
        agent,
        [
            {
                "message": "I moved to Porto last year.",
                "speaker_name": "Rafael",
                "occurred_at": now - timedelta(days=2),
            },
            {"message": "Rex is a golden retriever.", "speaker_name": "Rafael", "occurred_at": now - timedelta(days=1)},
        ],
    )
    for event_id in batch.event_ids:
        assert client.wait_for_event(event_id, timeout=120, poll_interval=0.1).status == "done"
    assert client.wait_for_import(imported.import_id, timeout=120, poll_interval=0.1).status == "done"
    for question in ("Where does Fernanda work?", "What is the name of the dog?", "Who lives in Campinas?"):
        assert client.retrieve(agent, question).facts
    for job in JOB_NAMES:
        run = client.run_job(agent, job)
        assert client.wait_for_job(agent, run.job_run_id, timeout=120, poll_interval=0.1).status == "done", job
    with stack.engine.begin() as connection:
        # Procedural memory: a directive, a cached block and a pending operation of the agent.
        connection.execute(
            text("INSERT INTO memory_directives (agent_id, text, text_key) VALUES (:agent, 'Do not use emojis.', 'x')"),
            {"agent": agent},
        )
        connection.execute(
            text(
                "INSERT INTO memory_directive_blocks (agent_id, cache_key, text, directive_count) "
                "VALUES (:agent, 'k', '- Do not use emojis.', 1)"
            ),
            {"agent": agent},
        )
        connection.execute(
            text(
                "INSERT INTO memory_pending_operations (agent_id, kind, confirmation_text, expires_at) "
                "VALUES (:agent, 'execution', 'Delete the dentist appointment?', now() + interval '5 minutes')"
            ),
            {"agent": agent},
        )
        # A finished re-process of the agent (memory_core.maintenance.reprocess): its record goes too.
        connection.execute(
            text("INSERT INTO agent_reprocesses (agent_id, status, finished_at) VALUES (:agent, 'done', now())"),
            {"agent": agent},
        )
        # LLM usage: this stack runs offline, so no call is ever counted; a row of an LLM's day.
        connection.execute(
            text(
                "INSERT INTO llm_usage (agent_id, day, skill, model, calls, input_tokens, output_tokens) "
                "VALUES (:agent, CURRENT_DATE, 'extract_informed', 'gpt-stub', 1, 100, 20)"
            ),
            {"agent": agent},
        )
    # Retrieval counts are written behind the request.
    poll(lambda: rows_of(stack.engine, agent)["memory_fact_usage"] > 0, "no retrieval counts were written")


# ---- Tests -----------------------------------------------------------------------------------------------


def test_erasure_needs_confirm_true_a_valid_agent_id_and_a_key(stack: Stack) -> None:
    agent = new_agent("guarded")
    for params in ({}, {"confirm": "false"}):
        refused = stack.http.delete(f"/v1/agents/{agent}", params=params)
        assert refused.status_code == 400, refused.text
        assert "confirm=true" in refused.json()["error"]
        assert refused.json()["detail"][0]["field"] == "query.confirm"
    not_a_bool = stack.http.delete(f"/v1/agents/{agent}", params={"confirm": "maybe"})
    assert not_a_bool.status_code == 422
    assert not_a_bool.json()["detail"][0]["field"] == "query.confirm"
    bad_agent = stack.http.delete("/v1/agents/not%20valid!", params={"confirm": "true"})
    assert bad_agent.status_code == 422
    assert bad_agent.json()["detail"][0]["field"] == "path.agent_id"
    assert httpx.delete(f"{stack.base_url}/v1/agents/{agent}", params={"confirm": "true"}).status_code == 401

    # An agent with nothing: 200 with every table, all zeros.
    nothing = stack.http.delete(f"/v1/agents/{agent}", params={"confirm": "true"})
    assert nothing.status_code == 200, nothing.text
    body = nothing.json()
    assert body["agent_id"] == agent
    assert body["indexes_dropped"] is False
    assert set(tables_with_agent_column(stack.engine)) | {"pipeline_stage_outputs"} == set(body["deleted"])
    assert set(body["deleted"].values()) == {0}


def test_erasure_removes_everything_of_the_agent_and_nothing_of_another(stack: Stack) -> None:
    erased, kept = new_agent("erased"), new_agent("kept")
    with AranduClient(stack.base_url, TEST_API_KEY, timeout=60) as client:
        write_memory(stack, client, erased)
        write_memory(stack, client, kept)
        # A large agent gets search indexes of its own (memory_core.read.agent_index): built here at once.
        assert build_agent_index(stack.engine, erased).created
        assert agent_indexes_present(stack.engine, erased) == 2

        before = rows_of(stack.engine, erased)
        empty = sorted(table for table, count in before.items() if count == 0)
        assert not empty, f"the seeding left these tables without rows of the agent: {empty}"
        kept_before = rows_of(stack.engine, kept)
        events = event_ids_of(stack.engine, erased)
        outputs = stage_outputs_of(stack.engine, events)
        assert outputs >= 4 * len(events)

        answer = client.erase_agent(erased)

        assert isinstance(answer, AgentErased)
        assert answer.agent_id == erased
        assert answer.deleted == {**before, "pipeline_stage_outputs": outputs}
        assert answer.total == sum(before.values()) + outputs
        assert answer.indexes_dropped is True
        assert set(rows_of(stack.engine, erased).values()) == {0}
        assert stage_outputs_of(stack.engine, events) == 0
        assert agent_indexes_present(stack.engine, erased) == 0
        assert rows_of(stack.engine, kept) == kept_before
        # What the API shows of it is empty; of the other agent, all there.
        assert client.list_facts(erased).total == 0
        assert client.list_entities(erased).total == 0
        assert client.list_jobs(erased).runs == []
        assert client.retrieve(erased, "Where does Fernanda work?").facts == []
        assert client.list_facts(kept).total > 0

        # Idempotent: again, nothing to delete (and the async client says the same).
        again = client.erase_agent(erased)
        assert again.total == 0
        assert set(again.deleted) == set(answer.deleted)

    async def erase_async() -> AgentErased:
        async with AsyncAranduClient(stack.base_url, TEST_API_KEY, timeout=60) as aclient:
            return await aclient.erase_agent(erased)

    assert asyncio.run(erase_async()).total == 0
    assert rows_of(stack.engine, kept) == kept_before


def test_erasure_while_messages_and_jobs_are_in_flight_leaves_nothing_and_fails_no_task(stack: Stack) -> None:
    agent, other = new_agent("racing"), new_agent("bystander")
    with AranduClient(stack.base_url, TEST_API_KEY, timeout=60) as client:
        write_memory(stack, client, agent)
        bystander_events = client.send_batch(other, [{"message": "I live in Lisbon.", "speaker_name": "Ana"}])
        assert client.wait_for_event(bystander_events.event_ids[0], timeout=60).status == "done"
        other_before = rows_of(stack.engine, other)

        # A job held running at its start (it goes on, for real, once the gate opens after the
        # erasure), and one queued in the broker for a few seconds.
        gate = Gate("clustering")
        job_overrides(stack.app)["clustering"] = gate
        try:
            running = client.run_job(agent, "clustering").job_run_id
            assert gate.entered.wait(60)
            with stack.engine.begin() as connection:
                queued = str(request_run(connection, agent, "memify", "api").run_id)  # type: ignore[arg-type]
            stack.app.signature(task_name("memify"), args=(queued,), immutable=True).apply_async(
                task_id=queued, countdown=3, expires=60
            )

            # Messages in flight: each stage's embeddings take a while.
            stack.embedder.delay_s = 0.05
            sent: list[str] = []
            for round_ in range(3):
                sent += client.send_batch(
                    agent,
                    [
                        {"message": f"Note {round_}-{i}: I met Carla at the gym.", "speaker_name": "Rafael"}
                        for i in range(6)
                    ],
                ).event_ids
            poll(lambda: len(stack.tasks.stage_results(sent)) >= 4, "no stage ran")
            with stack.engine.connect() as connection:
                unfinished = connection.execute(
                    text(
                        "SELECT count(*) FROM pipeline_runs "
                        "WHERE event_id = ANY(CAST(:ids AS uuid[])) AND status <> 'done'"
                    ),
                    {"ids": sent},
                ).scalar_one()
            assert unfinished > 0, "every message was processed before the erasure: nothing was in flight"

            answer = client.erase_agent(agent)
            gate.opened.set()
        finally:
            gate.opened.set()
            job_overrides(stack.app).pop("clustering", None)
            stack.embedder.delay_s = 0.0

        assert answer.deleted["memory_events"] >= len(sent)
        # The worker drains: every stage of every erased message ran, and both jobs ended.
        poll(
            lambda: len(stack.tasks.stage_results(sent)) == 4 * len(sent), "the erased messages' stages did not all run"
        )
        poll(lambda: stack.tasks.result_of(task_name("clustering"), running) is not None, "the held job did not end")
        poll(lambda: stack.tasks.result_of(task_name("memify"), queued) is not None, "the queued job did not run")
        assert stack.tasks.result_of(task_name("clustering"), running) == "erased"
        assert stack.tasks.result_of(task_name("memify"), queued) == "skipped"
        outcomes = Counter(
            word for value in stack.tasks.stage_results(sent).values() for word in re.findall(r"[a-z]+", str(value))
        )
        assert set(outcomes) <= {"completed", "missing", "skipped"}, outcomes
        assert outcomes["missing"] > 0, outcomes
        assert stack.tasks.failed == []
        # Stage completions and the erasure lock run rows in the same (event-id) order: they
        # queue, and no stage ever has to retry.
        assert stack.tasks.retried == []

        assert set(rows_of(stack.engine, agent).values()) == {0}
        assert stage_outputs_of(stack.engine, sent) == 0
        assert rows_of(stack.engine, other) == other_before

        # A message after the erasure starts a fresh memory.
        fresh = client.send_message(agent, "I live in Recife.", "Rafael")
        assert client.wait_for_event(fresh.event_id, timeout=60).status == "done"
        assert [fact.fact_text for fact in client.list_facts(agent).facts] == ["Rafael lives in Recife."]
        assert rows_of(stack.engine, agent)["memory_events"] == 1
