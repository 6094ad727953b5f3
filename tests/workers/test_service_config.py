"""The service-wide MemoryConfig (a TOML file and ARANDU_MEMORY__ variables) and per-agent configs,
end to end: the real API over HTTP, a real worker consuming the write and maintenance queues.

The deployment under test sets, in its memory file, ``timezone``, ``topk_facts = 5`` and
``summary_refresh_max_entities = 1``, and in its environment ``topk_facts = 3`` (over the file's)
and ``max_facts_per_event = 2``. One agent then gets a config of its own through the API.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from memory_core.settings import Settings, load_settings
from tests.support.api_server import serve_api
from tests.support.services import TestServices
from tests.support.workers import isolated_app, running_worker, wait_for_runs
from tests.workers.memory_queries import MemoryInspector

API_KEY = "service-config-key"
# Four facts and five entities with the offline rules.
MESSAGE = "I live in Lisbon. I work at Acme Labs. I have a dog named Rex. My sister Julia is a doctor."
MEMORY_FILE = 'timezone = "America/Sao_Paulo"\ntopk_facts = 5\nsummary_refresh_max_entities = 1\n'


@dataclass
class Deployment:
    """The API's client, its settings and what memory holds."""

    client: httpx.Client
    settings: Settings
    memory: MemoryInspector

    def post(self, agent_id: str, message: str = MESSAGE) -> str:
        response = self.client.post(
            f"/v1/agents/{agent_id}/messages", json={"message": message, "speaker_name": "Marina", "verbose": True}
        )
        assert response.status_code in (200, 202), response.text
        return str(response.json()["event_id"])

    def extracted(self, event_id: str) -> int:
        """How many facts the event's extraction kept (its trace, as GET /v1/events/{id} shows it)."""
        response = self.client.get(f"/v1/events/{event_id}")
        assert response.status_code == 200, response.text
        [step] = [step for step in response.json()["result"]["pipeline"] if step["name"] == "extraction"]
        return int(step["data"]["facts"])

    def retrieve(self, agent_id: str, query: str = "What does Marina do?") -> dict[str, Any]:
        response = self.client.post(f"/v1/agents/{agent_id}/retrieve", json={"query": query})
        assert response.status_code == 200, response.text
        return dict(response.json())

    def run_job(self, agent_id: str, job: str) -> dict[str, Any]:
        """Run ``job`` for the agent through the API and the worker; its finished run."""
        response = self.client.post(f"/v1/agents/{agent_id}/jobs/{job}")
        assert response.status_code == 202, response.text
        run_id = response.json()["job_run_id"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            runs = self.client.get(f"/v1/agents/{agent_id}/jobs", params={"job": job}).json()["runs"]
            [run] = [run for run in runs if run["job_run_id"] == run_id]
            if run["status"] in ("done", "failed"):
                assert run["status"] == "done", run
                return dict(run)
            time.sleep(0.1)
        raise TimeoutError(f"{job} for {agent_id} did not finish")


@pytest.fixture(scope="module")
def deployment(
    migrated_database_url: str, services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    home = tmp_path_factory.mktemp("service-config")
    memory_file = home / "memory.toml"
    memory_file.write_text(MEMORY_FILE, encoding="utf-8")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("ARANDU_MEMORY_CONFIG", str(memory_file))
        env.setenv("ARANDU_MEMORY__TOPK_FACTS", "3")
        env.setenv("ARANDU_MEMORY__MAX_FACTS_PER_EVENT", "2")
        settings = load_settings(
            database_url=migrated_database_url,
            broker_url=services.broker_url,
            home=home / "home",
            embedding_dimensions=384,
            api_keys=API_KEY,
        )
    # The variables are gone again: the API and the worker below run on what was read at start.
    app = isolated_app(settings)
    own: Settings = app.arandu_settings  # type: ignore[attr-defined]
    memory = MemoryInspector(own.database_url)
    try:
        with (
            running_worker(app, concurrency=4, queues=("ingest", "apply", "maintenance")),
            serve_api(own) as base_url,
            httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30) as client,
        ):
            yield Deployment(client, own, memory)
    finally:
        memory.close()
        app.close()


def new_agent(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:10]}"


def test_file_and_environment_reach_the_api_the_write_pipeline_and_a_maintenance_job(deployment: Deployment) -> None:
    agent = new_agent("service")
    event_id = deployment.post(agent)
    assert wait_for_runs(deployment.settings.database_url, [event_id]) == {event_id: "done"}

    # The write pipeline (worker) kept at most the environment's max_facts_per_event.
    assert deployment.extracted(event_id) == 2

    # The API echoes the service config: the file's values, the environment's over the file's.
    result = deployment.retrieve(agent)
    effective = result["config_effective"]
    assert effective["timezone"] == "America/Sao_Paulo"
    assert effective["topk_facts"] == 3
    assert effective["max_facts_per_event"] == 2
    assert effective["summary_refresh_max_entities"] == 1
    assert effective["embedding_dimensions"] == 384
    assert 1 <= len(result["facts"]) <= 3

    # A maintenance job in the worker runs on it too: one stale summary refreshed of several.
    run = deployment.run_job(agent, "summaries")
    assert run["result"]["summaries_refreshed"] == 1
    assert run["result"]["stale_remaining"] >= 1


def test_an_agents_config_changes_its_pipeline_retrieval_and_jobs_and_no_one_elses(deployment: Deployment) -> None:
    own, other = new_agent("tuned"), new_agent("plain")
    client = deployment.client

    untouched = client.get(f"/v1/agents/{own}/config")
    assert untouched.status_code == 200
    assert untouched.json()["overrides"] == {}
    assert untouched.json()["updated_at"] is None
    assert untouched.json()["config_effective"]["topk_facts"] == 3

    overrides = {"max_facts_per_event": 1, "topk_facts": 1, "summary_refresh_max_entities": 2, "timezone": "Asia/Tokyo"}
    put = client.put(f"/v1/agents/{own}/config", json={"overrides": overrides})
    assert put.status_code == 200, put.text
    assert put.json()["overrides"] == overrides
    assert put.json()["config_effective"]["topk_facts"] == 1
    # What the agent did not set still comes from the service.
    assert put.json()["config_effective"]["max_facts_per_event"] == 1
    assert client.get(f"/v1/agents/{own}/config").json()["overrides"] == overrides

    # Both agents' messages go through the same worker (in one chunk when they arrive together).
    own_event, other_event = deployment.post(own), deployment.post(other)
    statuses = wait_for_runs(deployment.settings.database_url, [own_event, other_event])
    assert set(statuses.values()) == {"done"}
    assert deployment.extracted(own_event) == 1
    assert deployment.extracted(other_event) == 2

    own_result, other_result = deployment.retrieve(own), deployment.retrieve(other)
    assert own_result["config_effective"]["topk_facts"] == 1
    assert own_result["config_effective"]["timezone"] == "Asia/Tokyo"
    assert len(own_result["facts"]) == 1
    assert other_result["config_effective"]["topk_facts"] == 3
    assert other_result["config_effective"]["timezone"] == "America/Sao_Paulo"
    # A request's overrides still come last.
    asked = client.post(f"/v1/agents/{own}/retrieve", json={"query": "Marina", "config_overrides": {"topk_facts": 2}})
    assert asked.json()["config_effective"]["topk_facts"] == 2
    assert asked.json()["config_effective"]["timezone"] == "Asia/Tokyo"

    assert deployment.run_job(own, "summaries")["result"]["summaries_refreshed"] == 2
    assert deployment.run_job(other, "summaries")["result"]["summaries_refreshed"] == 1

    # DELETE: the agent runs on the service config again.
    deleted = client.delete(f"/v1/agents/{own}/config")
    assert deleted.status_code == 200
    assert deleted.json()["overrides"] == {}
    assert deleted.json()["config_effective"]["topk_facts"] == 3
    assert deployment.retrieve(own)["config_effective"]["timezone"] == "America/Sao_Paulo"


def _problems(response: httpx.Response) -> dict[str, str]:
    return {item["field"]: item["message"] for item in response.json()["detail"]}


def test_bad_agent_configs_are_refused_naming_the_field(deployment: Deployment) -> None:
    agent = new_agent("refused")
    path = f"/v1/agents/{agent}/config"
    client = deployment.client

    cases: list[tuple[dict[str, Any], str]] = [
        ({"overrides": {"topk_fact": 4}}, "body.overrides.topk_fact"),
        ({"overrides": {"topk_facts": 0}}, "body.overrides.topk_facts"),
        ({"overrides": {"timezone": "Mars/Olympus"}}, "body.overrides.timezone"),
        ({"overrides": {"embedding_dimensions": 1536}}, "body.overrides.embedding_dimensions"),
        ({"overrides": {"enable_reranker": "no"}}, "body.overrides.enable_reranker"),
        ({"overrides": {"hot_tier_ratio": 0.9}}, "body.overrides.hot_tier_ratio"),
        ({"config": {"topk_facts": 4}}, "body.overrides"),
    ]
    for body, field in cases:
        response = client.put(path, json=body)
        assert response.status_code == 422, (body, response.text)
        assert field in _problems(response), (body, response.text)
    assert "did you mean 'topk_facts'" in client.put(path, json={"overrides": {"topk_fact": 4}}).text
    assert client.put(path, content=b"{not json", headers={"Content-Type": "application/json"}).status_code in (
        400,
        422,
    )
    # Nothing was stored by any of them.
    assert client.get(path).json()["overrides"] == {}

    # Scopes: a read key reads the config but cannot change it; no key, no answer.
    created = client.post("/v1/keys", json={"name": "reader", "agent_ids": [agent], "permissions": ["read"]})
    assert created.status_code == 201, created.text
    reader = {"Authorization": f"Bearer {created.json()['key']}"}
    assert client.get(path, headers=reader).status_code == 200
    assert client.put(path, json={"overrides": {"topk_facts": 4}}, headers=reader).status_code == 403
    assert client.delete(path, headers=reader).status_code == 403
    assert client.get(f"/v1/agents/{new_agent('elsewhere')}/config", headers=reader).status_code == 403
    assert httpx.get(f"{client.base_url}{path}").status_code == 401
