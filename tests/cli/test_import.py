"""``arandu import`` against a served API and a real worker: progress, resume, malformed input, failures."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from arandu_cli.exit_codes import ExitCode
from tests.cli.conftest import POISON, CliStack, write_ndjson

START = datetime(2023, 1, 1, 9, 0, tzinfo=UTC)
PROGRESS = re.compile(r"processed (\d+)/(\d+)\s+done (\d+)\s+failed (\d+)\s+pending (\d+)")


def _history(count: int, *, poison_at: int | None = None) -> list[str]:
    """``count`` dated messages of two speakers; every third carries its own message_id."""
    lines = []
    for index in range(count):
        speaker = "Ana" if index % 2 == 0 else "Bruno"
        message = f"Day {index}: I went hiking near the lake number {index} with my cousin."
        if index == poison_at:
            message = f"{POISON} {message}"
        record: dict[str, str] = {
            "message": message,
            "speaker_name": speaker,
            "occurred_at": (START + timedelta(hours=index)).isoformat(),
            "session_id": f"s{index // 50}",
        }
        if index % 3 == 0:
            record["message_id"] = f"hist-{index}"
        lines.append(json.dumps(record))
    return lines


def _events(stack: CliStack, agent: str) -> int:
    return stack.count("SELECT count(*) FROM memory_events WHERE agent_id = :agent", agent=agent)


def test_import_follows_500_messages_to_the_end_and_a_rerun_creates_nothing(
    cli_stack: CliStack, agent: str, tmp_path: Path
) -> None:
    history = write_ndjson(tmp_path / "history.ndjson", _history(500))

    first = cli_stack.run(["import", str(history), "--agent", agent, "--chunk", "200"])

    assert first.exit_code == 0, first.output
    progress = [tuple(map(int, match)) for match in PROGRESS.findall(first.stderr)]
    assert progress, first.stderr
    processed = [item[0] for item in progress]
    assert processed == sorted(processed), "progress never goes backwards"
    assert progress[-1] == (500, 500, 500, 0, 0)
    assert "sent 500/500 messages (3 import(s))" in first.stderr
    assert "500 messages (500 new, 0 already imported) in 3 import(s)" in first.stdout
    assert "done 500, failed 0, pending 0" in first.stdout
    assert _events(cli_stack, agent) == 500
    done = cli_stack.count(
        "SELECT count(*) FROM pipeline_runs WHERE agent_id = :agent AND status = 'done'", agent=agent
    )
    assert done == 500
    facts = cli_stack.count("SELECT count(*) FROM memory_facts WHERE agent_id = :agent", agent=agent)
    assert facts > 0

    again = cli_stack.run(["import", str(history), "--agent", agent, "--chunk", "200", "--json"])

    assert again.exit_code == 0, again.output
    outcome = json.loads(again.stdout)
    assert outcome["status"] == "done"
    assert (outcome["messages"], outcome["new"], outcome["already_imported"]) == (500, 0, 500)
    assert (outcome["done"], outcome["failed"], outcome["pending"]) == (500, 0, 0)
    assert _events(cli_stack, agent) == 500
    assert cli_stack.count("SELECT count(*) FROM memory_facts WHERE agent_id = :agent", agent=agent) == facts


def test_an_import_left_unfinished_is_followed_to_the_end_by_running_it_again(
    cli_stack: CliStack, agent: str, tmp_path: Path
) -> None:
    history = write_ndjson(tmp_path / "history.ndjson", _history(300))

    cut_short = cli_stack.run(["import", str(history), "--agent", agent, "--timeout", "0.5", "--json"])

    assert cut_short.exit_code == ExitCode.TIMEOUT, cut_short.output
    first = json.loads(cut_short.stdout)
    assert first["status"] == "timeout"
    assert first["new"] == 300
    assert first["pending"] > 0
    assert "still pending" in cut_short.stderr

    resumed = cli_stack.run(["import", str(history), "--agent", agent, "--json"])

    assert resumed.exit_code == 0, resumed.output
    outcome = json.loads(resumed.stdout)
    assert (outcome["new"], outcome["already_imported"], outcome["done"], outcome["pending"]) == (0, 300, 300, 0)
    progress = [tuple(map(int, match)) for match in PROGRESS.findall(resumed.stderr)]
    assert progress[0][4] > 0, "the second run found messages of the first one still pending and followed them"
    assert progress[-1] == (300, 300, 300, 0, 0)
    assert _events(cli_stack, agent) == 300


def test_a_malformed_line_is_named_with_its_line_number_and_nothing_is_sent(
    cli_stack: CliStack, agent: str, tmp_path: Path
) -> None:
    lines = _history(12)
    lines[6] = lines[6].replace('"occurred_at": "2023', '"occurred_at": "yesterday 2023')
    lines.insert(9, '{"message": "broken", "speaker_name": "Ana",')  # becomes line 10
    lines[2] = lines[2].replace('"occurred_at": "2023', '"occurred_at": "3023')  # a thousand years ahead
    source = write_ndjson(tmp_path / "bad.ndjson", lines)

    result = cli_stack.run(["import", str(source), "--agent", agent, "--chunk", "5"])

    assert result.exit_code == ExitCode.USAGE
    assert "line 3: occurred_at '3023-" in result.stderr
    assert "is in the future" in result.stderr
    assert "line 7: occurred_at must be an ISO 8601 date-time" in result.stderr
    assert "line 10: not valid JSON" in result.stderr
    assert "3 malformed line(s): nothing was sent" in result.stderr
    assert _events(cli_stack, agent) == 0


def test_a_json_file_names_the_line_of_the_bad_message(cli_stack: CliStack, agent: str, tmp_path: Path) -> None:
    messages = [json.loads(line) for line in _history(4)]
    del messages[2]["speaker_name"]
    source = tmp_path / "history.json"
    source.write_text(json.dumps({"messages": messages}, indent=2), encoding="utf-8")
    # With indent=2 each message object takes 7 lines after the 2 opening ones (or 8 with a message_id).
    text = source.read_text()
    expected_line = text[: text.index('"Day 2:')].count("\n")  # the line of "{" opening message 3

    result = cli_stack.run(["import", str(source), "--agent", agent])

    assert result.exit_code == ExitCode.USAGE
    assert f"line {expected_line}: missing speaker_name" in result.stderr
    assert _events(cli_stack, agent) == 0


def test_a_chunk_the_service_refuses_is_named_and_what_was_sent_before_it_is_said(
    cli_stack: CliStack, agent: str, tmp_path: Path
) -> None:
    lines = _history(6)
    record = json.loads(lines[4])
    record["message"] = "x" * (cli_stack.settings.max_message_bytes + 10)  # over the server's limit
    lines[4] = json.dumps(record)
    source = write_ndjson(tmp_path / "big.ndjson", lines)

    result = cli_stack.run(["import", str(source), "--agent", agent, "--chunk", "3"])

    assert result.exit_code == ExitCode.USAGE, result.output
    assert "refused the chunk of lines 4-6" in result.stderr
    assert "line 5 message" in result.stderr
    assert "lines 1-3 (3 messages, 1 import(s)) were sent" in result.stderr
    assert "nothing from line 4 on was sent" in result.stderr
    assert _events(cli_stack, agent) == 3


def test_failed_messages_are_listed_with_their_event_ids_and_errors(
    cli_stack: CliStack, agent: str, tmp_path: Path
) -> None:
    source = write_ndjson(tmp_path / "history.ndjson", _history(8, poison_at=5))

    result = cli_stack.run(["import", str(source), "--agent", agent, "--json"])

    assert result.exit_code == ExitCode.FAILED, result.output
    outcome = json.loads(result.stdout)
    assert (outcome["status"], outcome["done"], outcome["failed"], outcome["pending"]) == ("failed", 7, 1, 0)
    [failed] = outcome["failed_events"]
    assert failed["line"] == 6
    assert failed["stage"] == "extract"
    assert "embedding provider refused" in failed["error"]
    status = cli_stack.count(
        "SELECT count(*) FROM pipeline_runs WHERE event_id = CAST(:event AS uuid) AND status = 'failed'",
        event=failed["event_id"],
    )
    assert status == 1

    human = cli_stack.run(["import", str(source), "--agent", agent])

    assert human.exit_code == ExitCode.FAILED
    assert "(0 new, 8 already imported)" in human.stdout
    assert failed["event_id"] in human.stdout
    assert "embedding provider refused" in human.stdout


def test_standard_input_is_read_with_a_dash(cli_stack: CliStack, agent: str) -> None:
    result = cli_stack.run(["import", "-", "--agent", agent, "--json"], input_text="\n".join(_history(3)) + "\n")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["done"] == 3
    assert _events(cli_stack, agent) == 3


def test_generated_ids_are_stable_across_runs_and_differ_by_position(tmp_path: Path) -> None:
    from arandu_cli.import_source import SourceMessage, read_messages

    line = json.dumps({"message": "hello there", "speaker_name": "Ana", "occurred_at": "2024-01-01T00:00:00Z"})
    source = write_ndjson(tmp_path / "same.ndjson", [line, line])
    first = [item for item in read_messages(source, "ndjson") if isinstance(item, SourceMessage)]
    second = [item for item in read_messages(source, "ndjson") if isinstance(item, SourceMessage)]
    assert [item.message_id for item in first] == [item.message_id for item in second]
    assert first[0].message_id != first[1].message_id
