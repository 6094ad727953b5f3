"""``arandu keys create|list|revoke`` against a served API, with the operator key the CLI uses."""

from __future__ import annotations

import json
import time
import uuid

import httpx

from tests.cli.conftest import CliStack
from tests.support.api_server import auth_headers


def test_create_list_use_and_revoke_a_key(cli_stack: CliStack) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    prefix = f"{name}:"
    created = cli_stack.run(
        ["keys", "create", "--name", name, "--agent-prefix", prefix, "--permissions", "read", "--expires", "2099-01-31"]
    )
    assert created.exit_code == 0, created.output
    key = created.stdout.strip().splitlines()[-1]
    assert key.startswith("ak_")
    assert "shown only now" in created.stderr

    reader = httpx.Client(base_url=cli_stack.base_url, headers=auth_headers(key), timeout=30)
    assert reader.get(f"/v1/agents/{prefix}a/facts").status_code == 200
    assert reader.get("/v1/agents/elsewhere/facts").status_code == 403

    listed = cli_stack.run(["keys", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    mine = next(item for item in json.loads(listed.stdout) if item["name"] == name)
    assert mine["agent_prefix"] == prefix
    assert mine["permissions"] == ["read"]
    assert mine["expires_at"].startswith("2099-01-31")
    assert key not in listed.stdout
    table = cli_stack.run(["keys", "list"])
    assert name in table.stdout
    assert key not in table.stdout

    revoked = cli_stack.run(["keys", "revoke", name])
    assert revoked.exit_code == 0, revoked.output
    deadline = time.monotonic() + 5
    while reader.get(f"/v1/agents/{prefix}a/facts").status_code == 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    again = cli_stack.run(["keys", "revoke", name])
    assert again.exit_code != 0
    assert "no key named" in again.stderr


def test_create_needs_agents_and_known_permissions(cli_stack: CliStack) -> None:
    neither = cli_stack.run(["keys", "create", "--name", "x"])
    assert neither.exit_code != 0
    assert "--agent-prefix" in neither.stderr
    bad = cli_stack.run(["keys", "create", "--name", "x", "--agent", "a", "--permissions", "read,root"])
    assert bad.exit_code != 0
    assert "--permissions" in bad.output


def test_a_tenant_key_cannot_manage_keys(cli_stack: CliStack) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    created = cli_stack.run(["keys", "create", "--name", name, "--agent", "a1", "--permissions", "read,write,admin"])
    key = created.stdout.strip().splitlines()[-1]
    refused = cli_stack.run(["keys", "list"], key=key)
    assert refused.exit_code != 0
    assert "403" in refused.stderr
    assert "operator key" in refused.stderr
