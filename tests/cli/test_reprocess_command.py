"""``arandu reprocess AGENT`` and ``arandu events failed / retry-failed`` against a served API and worker.

The stack's embedder refuses any text holding POISON, so such a message fails in the live log
and again when the agent is re-processed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from arandu_cli.exit_codes import ExitCode
from tests.cli.conftest import POISON, CliStack, write_ndjson


def test_reprocess_follows_to_the_switch_and_failed_events_are_listed_and_re_driven(
    cli_stack: CliStack, agent: str, tmp_path: Path
) -> None:
    said = [("Eu moro em Recife.", "2024-02-10T10:00:00Z"), (f"{POISON} Eu gosto de frevo.", "2024-02-11T10:00:00Z")]
    lines = [json.dumps({"message": text, "speaker_name": "Lia", "occurred_at": at}) for text, at in said]
    imported = cli_stack.run(["import", str(write_ndjson(tmp_path / "lia.ndjson", lines)), "--agent", agent, "--json"])
    assert imported.exit_code == ExitCode.FAILED, imported.output  # one message failed

    listed = cli_stack.run(["events", "failed", "--agent", agent, "--json"])
    assert listed.exit_code == 0, listed.output
    page = json.loads(listed.stdout)
    assert [event["stage"] for event in page["events"]] == ["extract"]
    assert POISON in page["events"][0]["text"]
    assert page["next_cursor"] is None

    never = cli_stack.run(["reprocess", agent, "--status"])
    assert never.exit_code == ExitCode.NOT_FOUND, never.output
    reprocessed = cli_stack.run(["reprocess", agent, "--wait", "--json"])
    # Switched to the new memory, with the poisoned message failed again.
    assert reprocessed.exit_code == ExitCode.FAILED, reprocessed.output
    answer = json.loads(reprocessed.stdout)
    assert (answer["agent_id"], answer["status"], answer["done"], answer["failed"]) == (agent, "done", 1, 1)
    shown = cli_stack.run(["reprocess", agent, "--status"])
    assert "done" in shown.stdout
    assert answer["reprocess_id"] in shown.stdout
    nothing = cli_stack.run(["reprocess", agent, "--cancel"])
    assert nothing.exit_code == ExitCode.CONFLICT, nothing.output
    assert cli_stack.count("SELECT count(*) FROM memory_facts WHERE agent_id = :a AND valid_to IS NULL", a=agent) >= 1

    retried = cli_stack.run(["events", "retry-failed", "--agent", agent])
    assert retried.exit_code == 0, retried.output
    assert "1 failed event(s)" in retried.stdout
    assert "1 from extract" in retried.stdout
    deadline = time.monotonic() + 30
    while cli_stack.count("SELECT count(*) FROM pipeline_runs WHERE agent_id = :a AND status = 'failed'", a=agent) < 1:
        assert time.monotonic() < deadline, "the re-driven event did not fail again"
        time.sleep(0.1)
