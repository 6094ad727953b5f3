"""``arandu retrieve``, ``events``, ``facts``, ``entities`` and ``jobs`` against a served API, and exit codes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from arandu_cli.exit_codes import ExitCode
from tests.cli.conftest import CliStack, write_ndjson
from tests.support.services import free_port


@dataclass(frozen=True)
class Remembered:
    """An agent whose memory holds Rafael's home and job."""

    agent: str
    import_outcome: dict[str, object]


@pytest.fixture(scope="module")
def remembered(cli_stack: CliStack, tmp_path_factory: pytest.TempPathFactory) -> Remembered:
    agent = "cli-memory-agent"
    said = [
        ("Eu moro em Curitiba.", "2024-01-10T10:00:00Z"),
        ("Eu trabalho na Vertix.", "2024-01-11T10:00:00Z"),
        ("Eu moro em São Paulo.", "2024-06-01T10:00:00Z"),
    ]
    lines = [json.dumps({"message": text, "speaker_name": "Rafael", "occurred_at": at}) for text, at in said]
    source = write_ndjson(tmp_path_factory.mktemp("memory") / "rafael.ndjson", lines)
    result = cli_stack.run(["import", str(source), "--agent", agent, "--json"])
    assert result.exit_code == 0, result.output
    return Remembered(agent, json.loads(result.stdout))


def test_retrieve_prints_the_context_and_a_table_of_facts(cli_stack: CliStack, remembered: Remembered) -> None:
    result = cli_stack.run(["retrieve", "--agent", remembered.agent, "Onde o Rafael mora?"])

    assert result.exit_code == 0, result.output
    context, _, facts_table = result.stdout.partition("fact(s)")
    assert "São Paulo" in context
    assert "Rafael" in facts_table
    assert "São Paulo" in facts_table
    assert "2024-06-01 10:00:00Z -> now" in facts_table


def test_retrieve_json_and_as_of_show_what_was_true_then(cli_stack: CliStack, remembered: Remembered) -> None:
    now = cli_stack.run(["retrieve", "--agent", remembered.agent, "Onde o Rafael mora?", "--json"])
    then = cli_stack.run(
        ["retrieve", "--agent", remembered.agent, "Onde o Rafael mora?", "--as-of", "2024-03-01T00:00:00Z", "--json"]
    )

    assert now.exit_code == 0, now.output
    assert then.exit_code == 0, then.output
    now_texts = [fact["fact_text"] for fact in json.loads(now.stdout)["facts"]]
    then_texts = [fact["fact_text"] for fact in json.loads(then.stdout)["facts"]]
    assert any("São Paulo" in text for text in now_texts)
    assert not any("Curitiba" in text for text in now_texts)
    assert any("Curitiba" in text for text in then_texts)


def test_facts_list_get_and_delete(cli_stack: CliStack, remembered: Remembered) -> None:
    listed = cli_stack.run(["facts", "list", "--agent", remembered.agent, "--entity", "person:rafael", "--json"])
    assert listed.exit_code == 0, listed.output
    page = json.loads(listed.stdout)
    vertix = next(fact for fact in page["facts"] if "Vertix" in fact["fact_text"])

    shown = cli_stack.run(["facts", "get", vertix["fact_id"], "--agent", remembered.agent])
    assert shown.exit_code == 0, shown.output
    assert "Vertix" in shown.stdout
    assert "person:rafael" in shown.stdout

    human = cli_stack.run(["facts", "list", "--agent", remembered.agent])
    assert f"of {page['total']}" in human.stdout
    assert vertix["fact_id"] in human.stdout

    deleted = cli_stack.run(["facts", "delete", vertix["fact_id"], "--agent", remembered.agent])
    assert deleted.exit_code == 0, deleted.output
    assert "deleted 1 fact(s)" in deleted.stdout
    gone = cli_stack.run(["facts", "get", vertix["fact_id"], "--agent", remembered.agent])
    assert gone.exit_code == ExitCode.NOT_FOUND
    assert "not found" in gone.stderr


def test_entities_list(cli_stack: CliStack, remembered: Remembered) -> None:
    result = cli_stack.run(["entities", "list", "--agent", remembered.agent, "--json"])
    assert result.exit_code == 0, result.output
    keys = {entity["canonical_key"] for entity in json.loads(result.stdout)["entities"]}
    assert "person:rafael" in keys
    human = cli_stack.run(["entities", "list", "--agent", remembered.agent])
    assert "person:rafael" in human.stdout


def test_events_show_and_retry(cli_stack: CliStack, remembered: Remembered) -> None:
    facts = json.loads(cli_stack.run(["facts", "list", "--agent", remembered.agent, "--json"]).stdout)["facts"]
    event_id = facts[0]["source_event_id"]

    shown = cli_stack.run(["events", "show", event_id, "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["status"] == "done"
    human = cli_stack.run(["events", "show", event_id])
    assert "done" in human.stdout
    assert event_id in human.stdout

    refused = cli_stack.run(["events", "retry", event_id])
    assert refused.exit_code == ExitCode.CONFLICT
    assert "not failed" in refused.stderr
    # The hint names the command's flag, not the HTTP body the API would take.
    assert f"arandu events retry {event_id} --from-scratch" in " ".join(refused.stderr.split())
    assert '{"from_scratch"' not in refused.stderr

    again = cli_stack.run(["events", "retry", event_id, "--from-scratch", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["start_stage"] == "extract"

    unknown = cli_stack.run(["events", "show", "00000000-0000-0000-0000-000000000000"])
    assert unknown.exit_code == ExitCode.NOT_FOUND


def test_exit_codes_for_a_wrong_key_an_unreachable_api_and_bad_input(
    cli_stack: CliStack, remembered: Remembered, tmp_path: Path
) -> None:
    wrong_key = cli_stack.run(["facts", "list", "--agent", remembered.agent], key="not-the-key")
    assert wrong_key.exit_code == ExitCode.AUTH
    assert "ARANDU_API_KEY" in wrong_key.stderr

    nowhere = f"http://127.0.0.1:{free_port()}"
    from typer.testing import CliRunner

    from arandu_cli.main import app

    unreachable = CliRunner().invoke(app, ["--url", nowhere, "--api-key", "k", "entities", "list", "--agent", "a"])
    assert unreachable.exit_code == ExitCode.UNAVAILABLE
    assert "cannot reach the arandu API" in unreachable.stderr

    bad_limit = cli_stack.run(["facts", "list", "--agent", remembered.agent, "--limit", "0"])
    assert bad_limit.exit_code == ExitCode.USAGE

    empty_query = cli_stack.run(["retrieve", "--agent", remembered.agent, " "])
    assert empty_query.exit_code == ExitCode.USAGE
    assert "query" in empty_query.stderr

    missing = cli_stack.run(["import", str(tmp_path / "nope.ndjson"), "--agent", remembered.agent])
    assert missing.exit_code == ExitCode.USAGE
    assert "no such file" in missing.stderr


def test_jobs_run_and_list(cli_stack: CliStack, remembered: Remembered) -> None:
    ran = cli_stack.run(["jobs", "run", "importance", "--agent", remembered.agent, "--wait", "--json"])

    assert ran.exit_code == 0, ran.output
    run = json.loads(ran.stdout)
    assert (run["job"], run["status"], run["trigger"]) == ("importance", "done", "api")
    assert run["result"]["entities_scored"] >= 1

    listed = cli_stack.run(["jobs", "list", "--agent", remembered.agent, "--json"])
    assert listed.exit_code == 0, listed.output
    assert run["job_run_id"] in [item["job_run_id"] for item in json.loads(listed.stdout)["runs"]]
    human = cli_stack.run(["jobs", "list", "--agent", remembered.agent])
    assert run["job_run_id"] in human.stdout
    assert "importance" in human.stdout

    queued = cli_stack.run(["jobs", "run", "summaries", "--agent", remembered.agent])
    assert queued.exit_code == 0, queued.output
    assert "job summaries queued" in queued.stdout
    only = cli_stack.run(["jobs", "list", "--agent", remembered.agent, "--job", "summaries", "--json"])
    assert only.exit_code == 0, only.output
    assert {item["job"] for item in json.loads(only.stdout)["runs"]} == {"summaries"}

    unknown = cli_stack.run(["jobs", "run", "defragment", "--agent", remembered.agent])
    assert unknown.exit_code == ExitCode.NOT_FOUND
    assert "importance" in unknown.stderr  # the message lists the valid jobs
