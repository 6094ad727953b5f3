"""``arandu agents erase`` against a served API: the prompt, --yes, the per-table counts and --json."""

from __future__ import annotations

import json
from pathlib import Path

from arandu_cli.exit_codes import ExitCode
from tests.cli.conftest import CliStack, write_ndjson


def _agent_rows(cli_stack: CliStack, agent: str) -> int:
    return cli_stack.count(
        "SELECT (SELECT count(*) FROM memory_events WHERE agent_id = :agent)"
        " + (SELECT count(*) FROM memory_facts WHERE agent_id = :agent)"
        " + (SELECT count(*) FROM memory_entities WHERE agent_id = :agent)",
        agent=agent,
    )


def test_agents_erase_asks_for_the_id_then_prints_the_rows_deleted_per_table(
    cli_stack: CliStack, agent: str, tmp_path: Path
) -> None:
    said = [("Eu moro em Curitiba.", "2024-01-10T10:00:00Z"), ("Eu trabalho na Vertix.", "2024-01-11T10:00:00Z")]
    lines = [json.dumps({"message": text, "speaker_name": "Rafael", "occurred_at": at}) for text, at in said]
    source = write_ndjson(tmp_path / "rafael.ndjson", lines)
    imported = cli_stack.run(["import", str(source), "--agent", agent, "--json"])
    assert imported.exit_code == 0, imported.output
    other = f"{agent}-other"
    assert cli_stack.run(["import", str(source), "--agent", other, "--json"]).exit_code == 0
    before = _agent_rows(cli_stack, agent)
    assert before > 0

    # The wrong id typed back: nothing is erased.
    refused = cli_stack.run(["agents", "erase", "--agent", agent], input_text="someone-else\n")
    assert refused.exit_code == ExitCode.FAILED, refused.output
    assert f"Erasing agent {agent} deletes" in refused.stderr
    assert "active fact(s)" in refused.stderr
    assert "not erased" in refused.stderr
    assert _agent_rows(cli_stack, agent) == before

    erased = cli_stack.run(["agents", "erase", "--agent", agent], input_text=f"{agent}\n")
    assert erased.exit_code == 0, erased.output
    assert f"agent {agent} erased:" in erased.stdout
    for table in ("memory_events", "memory_facts", "memory_entities", "pipeline_runs", "pipeline_stage_outputs"):
        assert table in erased.stdout
    assert _agent_rows(cli_stack, agent) == 0
    assert _agent_rows(cli_stack, other) == before

    again = cli_stack.run(["agents", "erase", "--agent", agent, "--yes", "--json"])
    assert again.exit_code == 0, again.output
    answer = json.loads(again.stdout)
    assert answer["agent_id"] == agent
    assert "memory_events" in answer["deleted"]
    assert set(answer["deleted"].values()) == {0}

    bad = cli_stack.run(["agents", "erase", "--agent", "not valid!", "--yes"])
    assert bad.exit_code == ExitCode.USAGE, bad.output
