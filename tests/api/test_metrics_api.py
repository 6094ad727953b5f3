"""GET /metrics on the real stack: API over HTTP, real workers, real PostgreSQL and Redis.

Each test owns a fresh database and its own broker key prefix, so the counts it reads are
exactly what it caused.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from celery import Celery
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text

from memory_core.cognition.llm import build_llm_write_skills
from memory_core.db.migrate import upgrade
from memory_core.providers.openai_llm import OpenAIChatProvider
from memory_core.settings import Settings, load_settings
from memory_core.write.context import WriteContext, build_write_context
from tests.support.api_server import auth_headers, serve_api
from tests.support.llm_script import LLMBehaviour
from tests.support.openai_stub import OpenAIStub
from tests.support.services import TestServices
from tests.support.workers import running_worker, wait_for_runs
from workers.celery_app import create_celery_app

STAGE_TASKS = ("ingest.extract", "apply.resolve", "apply.reconcile", "apply.upsert")
Sample = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass
class Stack:
    settings: Settings
    client: httpx.Client
    agent_id: str

    def scrape(self) -> Sample:
        """Every sample of GET /metrics (sent without credentials, as Prometheus does)."""
        response = httpx.get(f"{self.client.base_url}/metrics", timeout=30)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/plain")
        samples: Sample = {}
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
        return samples

    def post(self, message: str) -> str:
        response = self.client.post(
            f"/v1/agents/{self.agent_id}/messages", json={"message": message, "speaker_name": "Rafael"}
        )
        assert response.status_code == 202, response.text
        return str(response.json()["event_id"])


def value(samples: Sample, name: str, **labels: str) -> float:
    """One sample's value; 0 when the series does not exist (a counter nobody incremented yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def own_settings(services: TestServices, tmp_path: Path) -> Settings:
    url = services.new_database("arandu_metrics")
    settings = load_settings(
        database_url=url,
        broker_url=services.broker_url,
        broker_key_prefix=f"m{uuid.uuid4().hex[:10]}:",
        home=tmp_path / "home",
        embedding_dimensions=384,
        api_keys="test-key",
        metrics_cache_s=0,
        pipeline_max_attempts=3,
        pipeline_retry_base_s=0.2,
        pipeline_retry_max_s=1.0,
    )
    upgrade(settings)
    return settings


@pytest.fixture
def stack(own_settings: Settings) -> Iterator[Stack]:
    with (
        serve_api(own_settings) as base_url,
        httpx.Client(base_url=base_url, headers=auth_headers(), timeout=30) as client,
    ):
        yield Stack(settings=own_settings, client=client, agent_id=f"agent-{uuid.uuid4().hex[:10]}")


def test_metrics_follow_events_through_queues_stages_and_skills(stack: Stack) -> None:
    before = stack.scrape()
    assert value(before, "arandu_events_received_total") == 0
    for source in ("database", "broker", "ledger"):
        assert value(before, "arandu_metrics_source_up", source=source) == 1

    messages = ["Eu moro em Lisboa.", "Minha irmã se chama Carla.", "Eu trabalho na Vertix.", "Eu adoro café."]
    events = [stack.post(message) for message in messages]

    # No worker yet: the events wait for the collector, which waits in the ingest queue. The API
    # publishes committed events on a thread of its own, after answering: wait for all four.
    deadline = time.monotonic() + 15
    waiting = stack.scrape()
    while value(waiting, "arandu_queue_depth", queue="intake") < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
        waiting = stack.scrape()
    assert value(waiting, "arandu_events_received_total") == 4
    assert value(waiting, "arandu_events_processed_total") == 0
    assert value(waiting, "arandu_events_in_pipeline", status="received") == 4
    assert value(waiting, "arandu_queue_depth", queue="intake") == 4
    assert value(waiting, "arandu_queue_depth", queue="ingest") == 1

    app: Celery = create_celery_app(stack.settings)
    with running_worker(app, concurrency=4):
        assert wait_for_runs(stack.settings.database_url, events) == dict.fromkeys(events, "done")
        after = stack.scrape()

    assert value(after, "arandu_events_received_total") == 4
    assert value(after, "arandu_events_processed_total") == 4
    assert value(after, "arandu_events_failed_total") == 0
    assert value(after, "arandu_events_in_pipeline", status="received") == 0
    for queue in ("intake", "ingest", "apply", "maintenance"):
        assert value(after, "arandu_queue_depth", queue=queue) == 0
    # The collector took the four messages as one chunk: each stage ran once for all of them.
    for task in ("ingest.collect", *STAGE_TASKS):
        count = value(after, "arandu_task_duration_seconds_count", task=task)
        assert count == 1, task
        assert value(after, "arandu_task_duration_seconds_bucket", task=task, le="+Inf") == count
        assert value(after, "arandu_task_duration_seconds_sum", task=task) > 0
        assert value(after, "arandu_task_runs_total", task=task, state="SUCCESS") == 1
    extraction_calls = sum(
        count
        for (name, labels), count in after.items()
        if name == "arandu_skill_calls_total"
        and dict(labels)["skill"].startswith("extract")
        and dict(labels)["implementation"] == "offline"
    )
    assert extraction_calls >= 4
    # Offline rules cost no tokens.
    assert not [name for name, _ in after if name == "arandu_llm_tokens_total"]


def test_metrics_count_llm_tokens_by_skill_and_failed_events(own_settings: Settings) -> None:
    behaviour = LLMBehaviour("ok")
    with OpenAIStub(chat_handler=behaviour) as stub:

        def llm_context(settings: Settings) -> WriteContext:
            provider = OpenAIChatProvider(api_key="sk-test", model="stub-model", base_url=stub.base_url, timeout_s=5.0)
            return build_write_context(settings, skills=build_llm_write_skills(provider))

        app = create_celery_app(own_settings, context_factory=llm_context)
        with (
            serve_api(own_settings) as base_url,
            httpx.Client(base_url=base_url, headers=auth_headers(), timeout=30) as client,
            running_worker(app, concurrency=4),
        ):
            stack = Stack(settings=own_settings, client=client, agent_id=f"agent-{uuid.uuid4().hex[:10]}")
            done = stack.post("Eu moro em Lisboa.")
            assert wait_for_runs(own_settings.database_url, [done]) == {done: "done"}
            behaviour.mode = "rate_limit"
            failed = stack.post("Eu trabalho na Vertix.")
            assert wait_for_runs(own_settings.database_url, [failed], timeout_s=120) == {failed: "failed"}
            samples = stack.scrape()

    assert value(samples, "arandu_events_received_total") == 2
    assert value(samples, "arandu_events_processed_total") == 1
    assert value(samples, "arandu_events_failed_total") == 1
    assert value(samples, "arandu_skill_calls_total", skill="extract_informed", implementation="llm", outcome="ok") == 1
    # Every 429 was a failed call of the same skill; the task retried it until the attempts ran out.
    assert (
        value(samples, "arandu_skill_calls_total", skill="extract_informed", implementation="llm", outcome="error") >= 3
    )
    assert value(samples, "arandu_task_runs_total", task="ingest.extract", state="RETRY") >= 2
    with create_engine(own_settings.database_url).connect() as conn:
        stored = conn.execute(
            text("SELECT token_usage FROM pipeline_runs WHERE event_id = :id"), {"id": done}
        ).scalar_one()
    recorded_input = sum(int(stage.get("input_tokens", 0)) for stage in stored.values())
    assert recorded_input > 0
    assert (
        value(samples, "arandu_llm_tokens_total", skill="extract_informed", implementation="llm", direction="input") > 0
    )
    total_input = sum(
        count
        for (name, labels), count in samples.items()
        if name == "arandu_llm_tokens_total" and dict(labels)["direction"] == "input"
    )
    # The ledger and the run agree on what the done event cost (the failed one cost nothing: 429s carry no usage).
    assert total_input == recorded_input


def test_metrics_count_job_runs_by_outcome_and_report_a_dead_broker(own_settings: Settings, tmp_path: Path) -> None:
    # What maintenance workers leave behind in the job-runs table.
    with create_engine(own_settings.database_url).begin() as conn:
        for job, status in [
            ("importance", "done"),
            ("importance", "done"),
            ("clustering", "failed"),
            ("memify", "running"),
        ]:
            conn.execute(
                text("INSERT INTO maintenance_job_runs (agent_id, job, status) VALUES ('a', :job, :status)"),
                {"job": job, "status": status},
            )
    dead_broker = own_settings.model_copy(update={"broker_url": f"redis+socket://{tmp_path}/no-such.sock"})
    with serve_api(dead_broker) as base_url:
        stack = Stack(settings=dead_broker, client=httpx.Client(base_url=base_url), agent_id="unused")
        samples = stack.scrape()
        stack.client.close()
    assert value(samples, "arandu_job_runs_total", job="importance", outcome="done") == 2
    assert value(samples, "arandu_job_runs_total", job="clustering", outcome="failed") == 1
    assert value(samples, "arandu_job_runs_active", job="memify", status="running") == 1
    assert value(samples, "arandu_metrics_source_up", source="database") == 1
    assert value(samples, "arandu_metrics_source_up", source="broker") == 0
    assert value(samples, "arandu_metrics_source_up", source="ledger") == 0
