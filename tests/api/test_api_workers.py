"""``python -m api`` with ARANDU_API_WORKERS: several server processes on one port, supervised."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import psutil

from tests.support.api_server import poll
from tests.support.processes import running_api_process, service_env
from tests.support.services import TestServices, free_port


def _servers(api: subprocess.Popen[str]) -> list[psutil.Process]:
    """The server processes the API's supervisor started (multiprocessing's spawned children)."""
    found = []
    for child in psutil.Process(api.pid).children():
        try:
            if child.is_running() and child.status() != psutil.STATUS_ZOMBIE and "spawn" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def _pair(servers: list[psutil.Process]) -> list[psutil.Process] | None:
    return servers if len(servers) == 2 else None


def _serving(process: psutil.Process, port: int) -> bool:
    """Whether ``process`` holds an accepted connection on ``port``."""
    return any(
        conn.status == psutil.CONN_ESTABLISHED and conn.laddr and conn.laddr.port == port
        for conn in process.net_connections(kind="tcp")
    )


def test_the_api_serves_from_its_workers_replaces_one_that_dies_and_stops_them_all(
    migrated_database_url: str, services: TestServices, tmp_path: Path
) -> None:
    port = free_port()
    env = service_env(
        database_url=migrated_database_url,
        broker_url=services.broker_url,
        api_port=port,
        api_keys="secret-key",
        api_workers=2,
        home=tmp_path,
    )
    with running_api_process(env, port) as (base_url, api):
        servers = poll(lambda: _pair(_servers(api)), "two server processes")

        # Both take connections: sixteen keep-alive clients, each answered, land on both.
        clients = [httpx.Client(base_url=base_url, timeout=10) for _ in range(16)]
        try:
            for client in clients:
                assert client.get("/readyz").status_code == 200
            assert all(_serving(server, port) for server in servers), "a server process took no connection"
        finally:
            for client in clients:
                client.close()

        # One that dies is replaced, and the API goes on answering.
        victim = servers[0]
        victim.kill()
        victim.wait(10)
        replaced = poll(
            lambda: _pair([server for server in _servers(api) if server.pid != victim.pid]),
            "a replacement for the killed server process",
        )
        poll(lambda: httpx.get(f"{base_url}/readyz", timeout=5).status_code == 200, "answers after the kill")
        assert api.poll() is None

    # Stopping the API (SIGTERM, as a container stop sends) stops every server process with it.
    assert api.returncode == 0
    _, alive = psutil.wait_procs(replaced, timeout=10)
    assert not alive, f"server processes left running: {[p.pid for p in alive]}"
