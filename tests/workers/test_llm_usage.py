"""LLM usage accounting end to end: real calls to an OpenAI-compatible stub through the real pipeline.

The stub answers every chat request with usage numbers of its own choosing and remembers them;
``GET /v1/agents/{id}/usage``, ``arandu usage`` and ``/metrics`` must show exactly those, once,
for the agent that caused them. The test owns its database, so ``/metrics`` totals are its own.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from arandu_cli.main import app as cli_app
from memory_core.cognition.llm import build_llm_write_skills
from memory_core.cognition.maintenance_models import FactLine, SummaryInput
from memory_core.cognition.maintenance_skills import build_llm_maintenance_skills
from memory_core.config import MemoryConfig
from memory_core.db.migrate import upgrade
from memory_core.maintenance.context import MaintenanceContext, build_maintenance_context
from memory_core.providers.hashing_embedder import HashingEmbedder
from memory_core.providers.openai_llm import OpenAIChatProvider
from memory_core.settings import Settings, load_settings
from memory_core.write.context import WriteContext, build_write_context
from memory_core.write.pipeline import run_extract
from tests.support.api_server import auth_headers, serve_api
from tests.support.llm_script import LLMBehaviour
from tests.support.openai_stub import OpenAIStub, StubReply
from tests.support.services import TestServices
from tests.support.workers import running_worker, wait_for_runs
from tests.workers.maintenance_support import JobRuns, fan_out, jobs_settings, new_agent, remember
from workers.celery_app import create_celery_app
from workers.tasks.maintenance import job_overrides

COUNTERS = ("calls", "input_tokens", "output_tokens", "cached_input_tokens")


@dataclass
class ServedUsage:
    """A chat handler answering like :class:`LLMBehaviour`, with distinct usage numbers it records."""

    behaviour: LLMBehaviour = field(default_factory=LLMBehaviour)
    served: list[tuple[str, dict[str, int]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> StubReply:
        reply = self.behaviour(body)
        system = next((m.get("content", "") for m in body.get("messages", []) if m.get("role") == "system"), "")
        with self.lock:
            number = len(self.served)
            usage = {
                "input_tokens": 300 + 17 * number,
                "output_tokens": 20 + number,
                "cached_input_tokens": 128 if number % 2 == 0 else 0,
            }
            self.served.append((self.behaviour._skill(system), {"calls": 1, **usage}))
        return StubReply(
            content=reply.content,
            usage={
                "prompt_tokens": usage["input_tokens"],
                "completion_tokens": usage["output_tokens"],
                "total_tokens": usage["input_tokens"] + usage["output_tokens"],
                "prompt_tokens_details": {"cached_tokens": usage["cached_input_tokens"]},
            },
        )

    def totals(self, skill: str | None = None) -> dict[str, int]:
        """What the stub served (to calls of the behaviour's ``skill``, or all)."""
        with self.lock:
            items = [usage for name, usage in self.served if skill is None or name == skill]
        return {name: sum(usage[name] for usage in items) for name in COUNTERS}


@dataclass
class UsageStack:
    settings: Settings
    client: httpx.Client
    served: ServedUsage
    stub: OpenAIStub

    def post(self, agent: str, message: str) -> str:
        response = self.client.post(f"/v1/agents/{agent}/messages", json={"message": message, "speaker_name": "Rafael"})
        assert response.status_code == 202, response.text
        return str(response.json()["event_id"])

    def usage(self, agent: str, **params: str) -> dict[str, Any]:
        response = self.client.get(f"/v1/agents/{agent}/usage", params=params)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def scrape(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        response = httpx.get(f"{self.client.base_url}/metrics", timeout=30)
        assert response.status_code == 200, response.text
        return {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples
        }

    def context(self) -> WriteContext:
        provider = OpenAIChatProvider(api_key="sk-test", model="stub-model", base_url=self.stub.base_url, timeout_s=5)
        return build_write_context(self.settings, skills=build_llm_write_skills(provider))


@pytest.fixture
def usage_stack(services: TestServices, tmp_path: Path) -> Iterator[UsageStack]:
    served = ServedUsage()
    with OpenAIStub(chat_handler=served) as stub:
        # The API's own calls (the reranker, dry runs) go to the stub too.
        settings = load_settings(
            database_url=services.new_database("arandu_usage"),
            broker_url=services.broker_url,
            broker_key_prefix=f"u{uuid.uuid4().hex[:10]}:",
            home=tmp_path / "home",
            embedding_dimensions=384,
            api_keys="test-key",
            metrics_cache_s=0,
            pipeline_retry_base_s=0.2,
            pipeline_retry_max_s=1.0,
            llm_provider="openai",
            llm_base_url=stub.base_url,
            llm_model="stub-model",
            retrieval_bookkeeping_flush_s=0.2,
            # One call per skill and message: the accounting of batched calls is tested with
            # batching (tests/workers/test_llm_batching.py), whose stub speaks the batch prompt.
            pipeline_llm_batching=False,
        )
        upgrade(settings)

        def llm_context(own: Settings) -> WriteContext:
            provider = OpenAIChatProvider(api_key="sk-test", model="stub-model", base_url=stub.base_url, timeout_s=5)
            return build_write_context(own, skills=build_llm_write_skills(provider))

        app = create_celery_app(settings, context_factory=llm_context)
        with (
            serve_api(settings) as base_url,
            httpx.Client(base_url=base_url, headers=auth_headers(), timeout=30) as client,
            running_worker(app, concurrency=4),
        ):
            yield UsageStack(settings=settings, client=client, served=served, stub=stub)


def _counts(body: dict[str, Any]) -> dict[str, int]:
    return {name: int(body[name]) for name in COUNTERS}


def _usage_rows(settings: Settings, agent: str) -> list[tuple[Any, ...]]:
    with create_engine(settings.database_url).connect() as conn:
        rows = conn.execute(
            text(
                "SELECT skill, model, calls, failures, input_tokens, output_tokens, cached_input_tokens "
                "FROM llm_usage WHERE agent_id = :a ORDER BY skill, model"
            ),
            {"a": agent},
        ).all()
    return [tuple(row) for row in rows]


def test_usage_counts_what_the_model_served_once_per_agent_and_skill(usage_stack: UsageStack) -> None:
    stack = usage_stack
    ana, bia = f"ana-{uuid.uuid4().hex[:8]}", f"bia-{uuid.uuid4().hex[:8]}"
    first = [stack.post(ana, "Eu moro em Lisboa."), stack.post(ana, "Eu trabalho na Vertix desde março.")]
    assert set(wait_for_runs(stack.settings.database_url, first).values()) == {"done"}
    served_to_ana = stack.served.totals()
    informed_to_ana = stack.served.totals("informed")
    other = stack.post(bia, "Eu moro em Lisboa.")
    assert wait_for_runs(stack.settings.database_url, [other]) == {other: "done"}
    served_to_all = stack.served.totals()

    # The endpoint shows exactly what the stub served on ana's behalf, by day and by skill.
    body = stack.usage(ana)
    today = datetime.now(UTC).date()
    assert body["agent_id"] == ana
    assert (body["since"], body["until"]) == ((today - timedelta(days=29)).isoformat(), today.isoformat())
    assert _counts(body["totals"]) == served_to_ana
    assert served_to_ana["cached_input_tokens"] > 0
    assert body["totals"]["failures"] == 0
    assert [day["day"] for day in body["by_day"]] == [today.isoformat()]
    assert _counts(body["by_day"][0]) == served_to_ana
    by_skill = {(item["skill"], item["model"]): _counts(item) for item in body["by_skill"]}
    assert by_skill[("extract_informed", "stub-model")] == informed_to_ana
    assert informed_to_ana["calls"] == 2
    summed = {name: sum(item[name] for item in by_skill.values()) for name in COUNTERS}
    assert summed == served_to_ana

    # The other agent's usage is its own; neither sees the other's.
    bia_body = stack.usage(bia)
    assert {name: served_to_ana[name] + bia_body["totals"][name] for name in COUNTERS} == served_to_all

    # A redelivered extract (the run is past it) asks nothing and counts nothing.
    before = _usage_rows(stack.settings, ana)
    ctx = stack.context()
    try:
        assert run_extract(ctx, uuid.UUID(first[0])) == "skipped"
        assert _usage_rows(stack.settings, ana) == before

        # A crash after the model answered and before the stage completed: the redelivery
        # reuses the stored answer (no call) and counts its cost, which nobody had counted.
        _undo_stage_completion(stack.settings, first[0], "extract")
        assert _usage_rows(stack.settings, ana) != before
        calls_before = len(stack.stub.chat_requests)
        assert run_extract(ctx, uuid.UUID(first[0])) == "completed"
        assert len(stack.stub.chat_requests) == calls_before
        assert _usage_rows(stack.settings, ana) == before
    finally:
        ctx.close()

    # The API's calls: a dry run (counted though nothing is kept) and a retrieval's reranker
    # (counted by a background flush).
    served_before = stack.served.totals()
    dry = stack.client.post(
        f"/v1/agents/{ana}/messages", json={"message": "Eu moro no Porto.", "speaker_name": "Rafael", "dry_run": True}
    )
    assert dry.status_code == 200, dry.text
    assert "by_skill" not in dry.json()["result"]["tokens_used"]
    retrieved = stack.client.post(f"/v1/agents/{ana}/retrieve", json={"query": "Onde o Rafael mora?"})
    assert retrieved.status_code == 200, retrieved.text
    assert stack.served.totals("other")["calls"] >= 1  # the reranker asked
    api_calls = {name: stack.served.totals()[name] - served_before[name] for name in COUNTERS}
    assert api_calls["calls"] >= 2
    served_to_ana = {name: served_to_ana[name] + api_calls[name] for name in COUNTERS}
    served_to_all = stack.served.totals()
    deadline = time.monotonic() + 10
    while _counts(stack.usage(ana)["totals"]) != served_to_ana and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _counts(stack.usage(ana)["totals"]) == served_to_ana
    assert "rerank" in {item["skill"] for item in stack.usage(ana)["by_skill"]}

    # /metrics: the operator's totals by skill, every agent's (this test owns the database).
    samples = stack.scrape()
    metric_totals = {
        "calls": "arandu_llm_calls_total",
        "input_tokens": "arandu_llm_input_tokens_total",
        "output_tokens": "arandu_llm_output_tokens_total",
        "cached_input_tokens": "arandu_llm_cached_input_tokens_total",
    }
    for counter, metric in metric_totals.items():
        total = sum(count for (name, _), count in samples.items() if name == metric)
        assert total == served_to_all[counter], metric
    assert samples[("arandu_llm_calls_total", frozenset({("skill", "extract_informed")}))] == 4  # 3 + the dry run
    # The ledger's skill counters keep their names next to these.
    assert any(name == "arandu_skill_calls_total" for name, _ in samples)

    # The CLI shows the same numbers.
    runner = CliRunner()
    base = ["--url", str(stack.client.base_url), "--api-key", "test-key"]
    shown = runner.invoke(cli_app, [*base, "usage", "--agent", ana, "--json"], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    assert _counts(json.loads(shown.stdout)["totals"]) == served_to_ana
    table = runner.invoke(cli_app, [*base, "usage", "--agent", ana], catch_exceptions=False)
    assert table.exit_code == 0, table.output
    assert f"{served_to_ana['calls']:,} calls" in table.stdout
    assert "extract_informed" in table.stdout
    assert today.isoformat() in table.stdout


def _undo_stage_completion(settings: Settings, event_id: str, stage: str) -> None:
    """Put a run back to before ``stage`` completed, its usage taken back out, its stored answers kept."""
    with create_engine(settings.database_url).begin() as conn:
        agent, usage = conn.execute(
            text("SELECT agent_id, token_usage -> :stage FROM pipeline_runs WHERE event_id = :e"),
            {"e": event_id, "stage": stage},
        ).one()
        for item in usage["by_skill"]:
            conn.execute(
                text(
                    "UPDATE llm_usage SET calls = calls - :calls, failures = failures - :failures, "
                    "input_tokens = input_tokens - :input_tokens, output_tokens = output_tokens - :output_tokens, "
                    "cached_input_tokens = cached_input_tokens - :cached_input_tokens "
                    "WHERE agent_id = :agent AND skill = :skill AND model = :model"
                ),
                {**item, "agent": agent},
            )
        status = {"extract": "received", "resolve": "extracted", "reconcile": "resolved"}[stage]
        conn.execute(text("UPDATE pipeline_runs SET status = :s WHERE event_id = :e"), {"s": status, "e": event_id})


def test_usage_validates_its_days_and_covers_a_chosen_range(usage_stack: UsageStack) -> None:
    agent = f"val-{uuid.uuid4().hex[:8]}"
    client = usage_stack.client
    for params, field_name in (
        ({"since": "2025-13-01"}, "query.since"),
        ({"until": "yesterday"}, "query.until"),
        ({"since": "2025-02-01", "until": "2025-01-01"}, "query.since"),
        ({"since": "2024-01-01", "until": "2025-01-02"}, "query.until"),
    ):
        refused = client.get(f"/v1/agents/{agent}/usage", params=params)
        assert refused.status_code == 422, (params, refused.text)
        assert refused.json()["detail"][0]["field"] == field_name, params
    # A year, leap day included, is allowed; an agent without usage answers zeros.
    year = usage_stack.usage(agent, since="2024-01-01", until="2024-12-31")
    assert (year["since"], year["until"]) == ("2024-01-01", "2024-12-31")
    assert set(year["totals"].values()) == {0}
    assert year["by_day"] == year["by_skill"] == []
    # Days outside the range are left out.
    with create_engine(usage_stack.settings.database_url).begin() as conn:
        conn.execute(
            text(
                "INSERT INTO llm_usage (agent_id, day, skill, model, calls, input_tokens, output_tokens) VALUES "
                "(:a, '2024-03-01', 'rerank', 'm', 2, 50, 5), (:a, '2024-04-01', 'rerank', 'm', 1, 20, 2)"
            ),
            {"a": agent},
        )
    march = usage_stack.usage(agent, since="2024-03-01", until="2024-03-31")
    assert march["totals"]["calls"] == 2
    assert [(day["day"], day["calls"], day["input_tokens"], day["output_tokens"]) for day in march["by_day"]] == [
        ("2024-03-01", 2, 50, 5)
    ]
    assert httpx.get(f"{client.base_url}/v1/agents/{agent}/usage").status_code == 401


def test_a_maintenance_jobs_llm_calls_are_counted_with_its_run(services: TestServices, tmp_path: Path) -> None:
    settings = jobs_settings(services, tmp_path)
    agent = new_agent("summarised")
    remember(settings, agent, ["I live in Lisbon."])
    runs = JobRuns(settings.database_url)
    answers = [
        StubReply.text(
            json.dumps({"summary": "Marina lives in Lisbon.", "label": "Marina"}),
            usage={"prompt_tokens": 210, "completion_tokens": 12, "total_tokens": 222},
        ),
        StubReply.text("no JSON here", usage={"prompt_tokens": 190, "completion_tokens": 4, "total_tokens": 194}),
    ]
    with OpenAIStub() as stub:
        stub.enqueue_chat(*answers)

        def llm_maintenance(own: Settings) -> MaintenanceContext:
            provider = OpenAIChatProvider(api_key="sk-test", model="stub-model", base_url=stub.base_url, timeout_s=5)
            return build_maintenance_context(
                own, skills=build_llm_maintenance_skills(provider), embedder=HashingEmbedder(384), pool_size=2
            )

        def two_summaries(context: MaintenanceContext, agent_id: str, config: MemoryConfig) -> dict[str, Any]:
            facts = [FactLine(fact_id=str(uuid.uuid4()), text="Marina lives in Lisbon.")]
            good = context.skills.summarize_entity.run(SummaryInput(subject="Marina", facts=facts))
            rescued = context.skills.summarize_entity.run(SummaryInput(subject="Marina", facts=facts))
            return {"summaries": 2, "fallbacks": int(good.used_fallback) + int(rescued.used_fallback)}

        app = create_celery_app(
            settings.model_copy(update={"broker_key_prefix": f"t{uuid.uuid4().hex[:10]}:"}),
            maintenance_context_factory=llm_maintenance,
        )
        try:
            with running_worker(app, concurrency=1, queues=("maintenance",)):
                job_overrides(app)["summaries"] = two_summaries
                fan_out(app, "summaries")
                [run] = runs.wait_finished(agent, "summaries")
        finally:
            app.close()
            runs.close()
    assert run["status"] == "done", run
    assert run["result"] == {"summaries": 2, "fallbacks": 1}
    # Two answers received, one unusable (the offline summary stood in): both cost tokens.
    assert _usage_rows(settings, agent) == [("summarize_entity", "stub-model", 2, 1, 400, 16, 0)]
