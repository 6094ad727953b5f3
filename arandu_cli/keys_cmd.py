"""``arandu keys create|list|revoke``: tenant API keys (with the operator key the CLI already uses)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from arandu_cli.exit_codes import ExitCode
from arandu_cli.output import console, emit_json, fail, note, table, when
from arandu_cli.target import connected

keys = typer.Typer(help="Tenant API keys: create, list, revoke (needs an operator key).", no_args_is_help=True)

AsJson = Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")]
PERMISSION_NAMES = ("read", "write", "admin")


def parse_permissions(raw: str) -> list[str]:
    """``read,write`` -> ``["read", "write"]``; a usage error names an unknown permission."""
    wanted = [item.strip() for item in raw.split(",") if item.strip()]
    unknown = [item for item in wanted if item not in PERMISSION_NAMES]
    if unknown or not wanted:
        raise typer.BadParameter(f"some of {', '.join(PERMISSION_NAMES)}, comma-separated", param_hint="--permissions")
    return wanted


def agents_of(agent_ids: list[str] | None, agent_prefix: str | None) -> str:
    """How a key's agents read in a table."""
    return f"{agent_prefix}*" if agent_prefix is not None else ", ".join(agent_ids or [])


@keys.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Option("--name", help="The key's name (unique among keys not revoked).")],
    agent_prefix: Annotated[
        str | None, typer.Option("--agent-prefix", help="The key acts for every agent whose id starts so (acme:).")
    ] = None,
    agent: Annotated[
        list[str] | None, typer.Option("--agent", "-a", help="An agent the key acts for; repeatable.")
    ] = None,
    permissions: Annotated[
        str, typer.Option("--permissions", help="Comma-separated: read, write, admin (jobs, re-drive, erasure).")
    ] = "read,write",
    expires: Annotated[
        str | None, typer.Option("--expires", help="Expiry, ISO 8601 (2027-01-31 or 2027-01-31T12:00:00Z).")
    ] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Tenant (default: the prefix, else the name).")] = None,
    rate: Annotated[
        float | None, typer.Option("--rate", min=0.001, help="Requests per second (default: the service's).")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Create a key; it is printed once, alone on the last line, and cannot be shown again."""
    if (agent_prefix is None) == (not agent):
        fail("give --agent-prefix PREFIX or one or more --agent ID (not both)")
        raise typer.Exit(ExitCode.USAGE)
    expires_at = f"{expires}T00:00:00Z" if expires is not None and len(expires) == 10 else expires
    with connected(ctx.obj) as client:
        created = client.create_key(
            name,
            agent_ids=agent or None,
            agent_prefix=agent_prefix,
            permissions=parse_permissions(permissions),
            tenant=tenant,
            expires_at=expires_at,
            rate_limit_per_s=rate,
        )
    if as_json:
        emit_json(created)
        return
    note(
        f"created key {created.name!r} (tenant {created.tenant}) for agents "
        f"{agents_of(created.agent_ids, created.agent_prefix)}, permissions {','.join(created.permissions)}"
        + (f", expires {when(created.expires_at)}" if created.expires_at else "")
        + "; it is shown only now:"
    )
    print(created.key)


@keys.command("list")
def list_keys(
    ctx: typer.Context,
    include_revoked: Annotated[bool, typer.Option("--all", help="Revoked keys too.")] = False,
    as_json: AsJson = False,
) -> None:
    """The keys (never the keys themselves: their first characters), newest first."""
    with connected(ctx.obj) as client:
        listed = client.list_keys(include_revoked=include_revoked)
    if as_json:
        emit_json([key.model_dump(mode="json") for key in listed])
        return
    rows: list[list[Any]] = [
        [
            key.name,
            key.tenant,
            f"{key.key_hint}...",
            agents_of(key.agent_ids, key.agent_prefix),
            ",".join(key.permissions),
            when(key.expires_at) if key.expires_at else "-",
            key.status,
        ]
        for key in listed
    ]
    console.print(
        table(f"{len(listed)} key(s)", ["name", "tenant", "key", "agents", "permissions", "expires", "status"], rows)
    )


@keys.command("revoke")
def revoke(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The key's name.")],
    as_json: AsJson = False,
) -> None:
    """Revoke a key: every API process refuses it within seconds."""
    with connected(ctx.obj) as client:
        revoked = client.revoke_key(name)
    if as_json:
        emit_json(revoked)
        return
    console.print(f"revoked key {revoked.name!r} ({revoked.key_hint}...)", markup=False)
