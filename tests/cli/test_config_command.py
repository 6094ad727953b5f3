"""``arandu config AGENT``: show, change and remove an agent's overrides against a served API."""

from __future__ import annotations

import json

import httpx

from arandu_cli.exit_codes import ExitCode
from tests.cli.conftest import CliStack
from tests.support.api_server import auth_headers


def test_config_sets_keeps_shows_and_removes_overrides(cli_stack: CliStack, agent: str) -> None:
    none = cli_stack.run(["config", agent])
    assert none.exit_code == 0, none.output
    assert "no overrides" in none.stdout

    first = cli_stack.run(["config", agent, "--set", "topk_facts=7", "--set", "min_confidence=0.4"])
    assert first.exit_code == 0, first.output
    # A later --set changes one field and keeps the others (the API's PUT alone would replace them).
    second = cli_stack.run(["config", agent, "--set", "topk_facts=9", "--json"])
    assert second.exit_code == 0, second.output
    answer = json.loads(second.stdout)
    assert answer["overrides"] == {"topk_facts": 9, "min_confidence": 0.4}
    assert answer["config_effective"]["topk_facts"] == 9

    # The service agrees, read through the JSON API.
    with httpx.Client(base_url=cli_stack.base_url, headers=auth_headers(), timeout=30) as api:
        assert api.get(f"/v1/agents/{agent}/config").json()["overrides"] == {"topk_facts": 9, "min_confidence": 0.4}

    shown = cli_stack.run(["config", agent])
    assert shown.exit_code == 0, shown.output
    # Each override beside the value the agent's work runs on.
    rows = [[cell.strip() for cell in line.split("│") if cell.strip()] for line in shown.stdout.splitlines()]
    assert ["topk_facts", "9", "9"] in rows
    assert ["min_confidence", "0.4", "0.4"] in rows

    removed = cli_stack.run(["config", agent, "--unset", "--json"])
    assert removed.exit_code == 0, removed.output
    assert json.loads(removed.stdout)["overrides"] == {}
    assert "no overrides" in cli_stack.run(["config", agent]).stdout


def test_config_refuses_bad_fields_values_and_option_pairs(cli_stack: CliStack, agent: str) -> None:
    unknown = cli_stack.run(["config", agent, "--set", "topk_factz=3"])
    assert unknown.exit_code == ExitCode.USAGE
    assert "topk_factz" in unknown.stderr

    out_of_bounds = cli_stack.run(["config", agent, "--set", "min_confidence=7"])
    assert out_of_bounds.exit_code == ExitCode.USAGE
    assert "min_confidence" in out_of_bounds.stderr

    malformed = cli_stack.run(["config", agent, "--set", "topk_facts"])
    assert malformed.exit_code == ExitCode.USAGE
    assert "FIELD=VALUE" in malformed.stderr

    both = cli_stack.run(["config", agent, "--set", "topk_facts=3", "--unset"])
    assert both.exit_code == ExitCode.USAGE

    # Nothing was stored by the refused calls.
    assert "no overrides" in cli_stack.run(["config", agent]).stdout
