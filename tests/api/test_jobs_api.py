"""The maintenance-job endpoints over real HTTP, with a real worker on the ``maintenance`` queue,
and the typed client's ``run_job`` / ``list_jobs`` / ``wait_for_job`` (sync and async)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from celery import Celery

from arandu_client import AranduClient, AsyncAranduClient, ConflictError, InvalidRequestError, NotFoundError
from memory_core.maintenance.registry import JOB_NAMES
from memory_core.settings import Settings
from tests.support.api_server import TEST_API_KEY, auth_headers, serve_api
from tests.support.services import TestServices
from tests.support.workers import running_worker
from tests.workers.maintenance_support import Gate, JobRuns, jobs_settings, maintenance_app, new_agent, remember
from workers.tasks.maintenance import job_overrides


@dataclass
class JobsStack:
    """API and maintenance worker sharing private queues."""

    base_url: str
    settings: Settings
    app: Celery
    runs: JobRuns
    http: httpx.Client


@pytest.fixture
def stack(services: TestServices, tmp_path: Path) -> Iterator[JobsStack]:
    settings = jobs_settings(services, tmp_path)
    runs = JobRuns(settings.database_url)
    with maintenance_app(settings) as (app, _), running_worker(app, concurrency=2, queues=("maintenance",)):
        own: Settings = app.arandu_settings  # type: ignore[attr-defined]
        with serve_api(own) as base_url, httpx.Client(base_url=base_url, headers=auth_headers(), timeout=30) as http:
            yield JobsStack(base_url=base_url, settings=own, app=app, runs=runs, http=http)
    runs.close()


def _wait_listed(stack: JobsStack, agent: str, run_id: str, timeout: float = 60) -> dict[str, object]:
    with AranduClient(stack.base_url, TEST_API_KEY) as client:
        return client.wait_for_job(agent, run_id, timeout=timeout, poll_interval=0.2).model_dump(mode="json")


def test_run_a_job_now_and_see_it_in_the_list(stack: JobsStack) -> None:
    agent = new_agent("api")
    remember(stack.settings, agent, ["I live in Lisbon.", "My sister Julia is a doctor."])

    response = stack.http.post(f"/v1/agents/{agent}/jobs/importance")
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert accepted["job"] == "importance"
    assert accepted["status"] == "queued"
    assert accepted["trigger"] == "api"
    run_id = accepted["job_run_id"]

    run = _wait_listed(stack, agent, run_id)
    assert run["status"] == "done"
    listed = stack.http.get(f"/v1/agents/{agent}/jobs", params={"limit": 10})
    assert listed.status_code == 200, listed.text
    [shown] = listed.json()["runs"]
    assert shown["job_run_id"] == run_id
    assert shown["job"] == "importance"
    assert shown["status"] == "done"
    assert shown["trigger"] == "api"
    assert shown["task_id"] == run_id
    assert shown["created_at"] <= shown["started_at"] <= shown["finished_at"]
    assert shown["duration_ms"] > 0
    assert shown["result"]["entities_scored"] >= 2
    assert shown["error"] is None

    assert stack.http.get(f"/v1/agents/{agent}/jobs", params={"job": "importance"}).json()["runs"] == [shown]
    assert stack.http.get(f"/v1/agents/{agent}/jobs", params={"job": "memify"}).json()["runs"] == []
    # Agent-scoped: another agent sees none of it.
    assert stack.http.get(f"/v1/agents/{new_agent()}/jobs").json() == {"runs": []}


def test_a_job_already_running_answers_409_naming_the_run(stack: JobsStack) -> None:
    agent = new_agent("busy")
    remember(stack.settings, agent, ["I have a dog named Rex."])
    gate = Gate()
    job_overrides(stack.app)["importance"] = gate
    first = stack.http.post(f"/v1/agents/{agent}/jobs/importance").json()["job_run_id"]
    assert gate.entered.wait(60)

    second = stack.http.post(f"/v1/agents/{agent}/jobs/importance")
    assert second.status_code == 409, second.text
    body = second.json()
    assert first in body["error"]
    assert "already running" in body["error"]
    assert body["detail"][0]["field"] == "path.job"
    with AranduClient(stack.base_url, TEST_API_KEY) as client, pytest.raises(ConflictError, match=first):
        client.run_job(agent, "importance")
    # The guard is per (agent, job): the same job for another agent is accepted.
    other_agent = new_agent("other")
    other = stack.http.post(f"/v1/agents/{other_agent}/jobs/importance")
    assert other.status_code == 202, other.text

    gate.opened.set()
    assert _wait_listed(stack, agent, first)["status"] == "done"
    assert _wait_listed(stack, other_agent, other.json()["job_run_id"])["status"] == "done"
    again = stack.http.post(f"/v1/agents/{agent}/jobs/importance")
    assert again.status_code == 202, again.text
    assert _wait_listed(stack, agent, again.json()["job_run_id"])["status"] == "done"
    assert [run["status"] for run in stack.http.get(f"/v1/agents/{agent}/jobs").json()["runs"]] == ["done", "done"]


def test_bad_input_is_answered_naming_the_field(stack: JobsStack) -> None:
    agent = new_agent("bad")
    unknown = stack.http.post(f"/v1/agents/{agent}/jobs/defrag")
    assert unknown.status_code == 404
    assert "defrag" in unknown.json()["error"]
    for job in JOB_NAMES:
        assert job in unknown.json()["error"]
    assert unknown.json()["detail"][0]["field"] == "path.job"

    bad_agent = stack.http.post("/v1/agents/not%20valid!/jobs/importance")
    assert bad_agent.status_code == 422
    assert bad_agent.json()["detail"][0]["field"] == "path.agent_id"
    assert stack.http.get("/v1/agents/not%20valid!/jobs").json()["detail"][0]["field"] == "path.agent_id"
    for limit in ("0", "501", "ten"):
        answer = stack.http.get(f"/v1/agents/{agent}/jobs", params={"limit": limit})
        assert answer.status_code == 422, limit
        assert answer.json()["detail"][0]["field"] == "query.limit"
        assert "query.limit" in answer.json()["error"]

    wrong_job = stack.http.get(f"/v1/agents/{agent}/jobs", params={"job": "defrag"})
    assert wrong_job.status_code == 422
    assert wrong_job.json()["detail"][0]["field"] == "query.job"

    assert httpx.post(f"{stack.base_url}/v1/agents/{agent}/jobs/importance").status_code == 401
    assert httpx.get(f"{stack.base_url}/v1/agents/{agent}/jobs").status_code == 401
    # Nothing was queued by any of these.
    assert stack.runs.of(agent) == []


def test_client_runs_and_lists_jobs_sync_and_async(stack: JobsStack) -> None:
    agent = new_agent("client")
    remember(stack.settings, agent, ["I work at Acme Labs.", "Bruno plays the guitar."])
    with AranduClient(stack.base_url, TEST_API_KEY) as client:
        accepted = client.run_job(agent, "importance")
        assert accepted.status == "queued"
        run = client.wait_for_job(agent, accepted.job_run_id, timeout=60, poll_interval=0.2)
        assert run.finished
        assert run.status == "done"
        assert run.result is not None
        assert run.result["entities_scored"] >= 2
        with pytest.raises(NotFoundError, match="valid jobs"):
            client.run_job(agent, "nope")
        with pytest.raises(InvalidRequestError) as caught:
            client.list_jobs(agent, limit=0)
        assert "query.limit" in caught.value.fields

    async def use_async() -> list[str]:
        async with AsyncAranduClient(stack.base_url, TEST_API_KEY) as client:
            accepted = await client.run_job(agent, "importance")
            await client.wait_for_job(agent, accepted.job_run_id, timeout=60, poll_interval=0.2)
            page = await client.list_jobs(agent, limit=1)
            return [run.job_run_id for run in page.runs]

    newest = asyncio.run(use_async())
    assert len(newest) == 1
    with AranduClient(stack.base_url, TEST_API_KEY) as client:
        assert [run.status for run in client.list_jobs(agent).runs] == ["done", "done"]
        assert client.list_jobs(agent, job="memify").runs == []
        assert client.list_jobs(agent).runs[0].job_run_id == newest[0]
