"""Supervisor behind ``./ops/dev``: embedded services, migrations, every process, demo, clean stop.

Children run in their own sessions so that one Ctrl-C reaches this supervisor only, and
the stop happens in order: Flower, Beat, workers (warm shutdown), API, then Redis and
PostgreSQL. Nothing it started is left behind.

Once the stack is ready, a child that exits is started again, with a line saying so: one
crashed worker must not take the API and the other pools down with it (the event log in
PostgreSQL holds what it was doing; the sweeper re-enqueues it). A child that keeps exiting
(:data:`MAX_RESTARTS` times within :data:`RESTART_WINDOW_S`) is a configuration problem, not a
crash, and stops the stack with its log. During start-up any exit stops the stack at once.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from arandu_cli.dev_stack import write_record
from memory_core.db.migrate import DatabaseSchemaError, upgrade
from memory_core.settings import Settings, SettingsError, load_settings
from ops.embedded import EmbeddedStack
from ops.rss import stack_memory_bytes

READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
# A child restarted this many times within the window gives up (it fails on start, not by accident).
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0


@dataclass
class Child:
    """One process of the stack, with its log file."""

    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    restarts: list[float] = field(default_factory=list)
    # Settings of this process alone, over the stack's environment.
    own_env: dict[str, str] = field(default_factory=dict)
    _log: IO[bytes] | None = field(default=None, repr=False)

    def start(self, env: dict[str, str]) -> None:
        """Start in a new session, output appended to the log file."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.popen = subprocess.Popen(
            self.argv, env={**env, **self.own_env}, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def alive(self) -> bool:
        """True while the process runs."""
        return self.popen is not None and self.popen.poll() is None

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the child's whole process group (prefork pool children included)."""
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signum)

    def close_log(self) -> None:
        """Close the log file handle."""
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 30) -> str:
        """The end of the log, for error messages."""
        if not self.log_path.exists():
            return "(no output)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def _secret_file(path: Path) -> str:
    """A development secret kept under $ARANDU_HOME so restarts keep the same value."""
    if path.exists():
        value = path.read_text().strip()
        if value:
            return value
    value = secrets.token_urlsafe(24)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value + "\n")
    path.chmod(0o600)
    return value


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


class DevStack:
    """Everything ``./ops/dev`` runs, started and stopped in order."""

    def __init__(self, settings: Settings, stop_event: threading.Event) -> None:
        self.settings = settings
        self.stop_event = stop_event
        self.home = settings.home.resolve()
        self.embedded: EmbeddedStack | None = None
        self.children: list[Child] = []
        self.env: dict[str, str] = {}
        self.api_key = ""
        self.flower_password = ""

    def prepare_environment(self) -> Settings:
        """Start embedded services where no URL is given, and fix keys for every child."""
        env = dict(os.environ)
        env["ARANDU_HOME"] = str(self.home)
        if "ARANDU_DATABASE_URL" not in os.environ or "ARANDU_BROKER_URL" not in os.environ:
            self.embedded = EmbeddedStack(self.home)
            self.embedded.postgres.data_dir.parent.mkdir(parents=True, exist_ok=True)
            if "ARANDU_DATABASE_URL" not in os.environ:
                self.embedded.postgres.start()
                env["ARANDU_DATABASE_URL"] = self.embedded.postgres.ensure_database("arandu")
            if "ARANDU_BROKER_URL" not in os.environ:
                self.embedded.redis.start()
                env["ARANDU_BROKER_URL"] = self.embedded.redis.url
        if self.settings.api_keys:
            self.api_key = self.settings.api_keys[0]
        else:
            self.api_key = _secret_file(self.home / "dev-api-key")
            env["ARANDU_API_KEYS"] = self.api_key
        if self.settings.flower_password is not None:
            self.flower_password = self.settings.flower_password.get_secret_value()
        else:
            self.flower_password = _secret_file(self.home / "dev-flower-password")
            env["ARANDU_FLOWER_PASSWORD"] = self.flower_password
        self.env = env
        os.environ.update(env)
        return load_settings()

    def start_processes(self, settings: Settings) -> None:
        """Start API, the three worker pools, Beat and Flower."""
        for host, port, what in (
            (settings.api_host, settings.api_port, "ARANDU_API_PORT"),
            (settings.flower_host, settings.flower_port, "ARANDU_FLOWER_PORT"),
        ):
            if not _port_free(host, port):
                raise RuntimeError(f"port {port} on {host} is in use: set {what} to a free port")
        python = sys.executable
        logs = self.home / "logs"
        specs = [
            ("api", [python, "-m", "api"]),
            *((f"api-{index}", [python, "-m", "api"]) for index in range(2, settings.api_processes + 1)),
            ("worker-ingest", [python, "-m", "workers", "worker", "--queue", "ingest"]),
            ("worker-apply", [python, "-m", "workers", "worker", "--queue", "apply"]),
            *(
                (
                    f"worker-apply-{index}",
                    [python, "-m", "workers", "worker", "--queue", "apply", "--name", f"apply{index}"],
                )
                for index in range(2, settings.apply_processes + 1)
            ),
            ("worker-maintenance", [python, "-m", "workers", "worker", "--queue", "maintenance"]),
            ("beat", [python, "-m", "workers", "beat"]),
            ("flower", [python, "-m", "workers", "flower"]),
        ]
        for name, argv in specs:
            # The stack runs its API processes one by one (each its own role in the logs and the
            # benchmarks' CPU figures), so none supervises processes of its own.
            own_env = {"ARANDU_API_WORKERS": "1"} if name.startswith("api") else {}
            child = Child(name, argv, logs / f"{name}.log", own_env=own_env)
            child.start(self.env)
            self.children.append(child)

    def _check_children(self) -> None:
        for child in self.children:
            if not child.alive():
                code = child.popen.returncode if child.popen else None
                raise RuntimeError(f"{child.name} exited with code {code}; its log ends with:\n{child.log_tail()}")

    def restart_exited_children(self) -> list[str]:
        """Start again every child that exited (after start-up); the names of those restarted.

        Raises ``RuntimeError`` for a child that exited :data:`MAX_RESTARTS` times within
        :data:`RESTART_WINDOW_S`.
        """
        restarted: list[str] = []
        now = time.monotonic()
        for child in self.children:
            if child.alive() or self.stop_event.is_set():
                continue
            code = child.popen.returncode if child.popen else None
            child.restarts = [moment for moment in child.restarts if now - moment < RESTART_WINDOW_S]
            if len(child.restarts) >= MAX_RESTARTS:
                raise RuntimeError(
                    f"{child.name} exited with code {code}, {len(child.restarts) + 1} times within "
                    f"{RESTART_WINDOW_S:.0f} s; its log ends with:\n{child.log_tail()}"
                )
            # A prefork pool's children may outlive their parent's SIGKILL: none may consume beside the new one.
            child.signal_group(signal.SIGKILL)
            child.close_log()
            child.restarts.append(now)
            print(
                f"{child.name} exited with code {code}; restarting it (restart {len(child.restarts)} "
                f"within {RESTART_WINDOW_S:.0f} s; log {child.log_path})",
                flush=True,
            )
            child.start(self.env)
            restarted.append(child.name)
        return restarted

    def wait_ready(self, settings: Settings) -> float:
        """Block until the API is ready, Flower answers and a worker replies on each queue."""
        from workers.celery_app import create_celery_app

        started = time.monotonic()
        deadline = started + READY_TIMEOUT_S
        api_url = f"http://{settings.api_host}:{settings.api_port}/readyz"
        flower_url = f"http://{settings.flower_host}:{settings.flower_port}/healthcheck"
        celery_app = create_celery_app(settings)
        workers = {"ingest", "apply", "maintenance", *(f"apply{i}" for i in range(2, settings.apply_processes + 1))}
        pending = {"api", "flower", *workers}
        with httpx.Client(timeout=2.0) as client:
            while pending:
                if self.stop_event.is_set():
                    raise KeyboardInterrupt
                self._check_children()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"not ready after {READY_TIMEOUT_S:.0f} s: waiting for {sorted(pending)}")
                for name, url in (("api", api_url), ("flower", flower_url)):
                    if name in pending:
                        with contextlib.suppress(httpx.HTTPError):
                            if client.get(url).status_code == 200:
                                pending.discard(name)
                if pending & workers:
                    # A broker that restarted under this process leaves a broken pooled connection:
                    # the next ping opens a fresh one.
                    with contextlib.suppress(*celery_app.connection_for_write().connection_errors):
                        for reply in celery_app.control.ping(timeout=0.5) or []:
                            for node in reply:
                                pending.discard(node.split("@", 1)[0])
                if pending:
                    time.sleep(0.2)
        return time.monotonic() - started

    def memory_mib(self) -> float:
        """Proportional memory of every process of the stack, embedded servers included."""
        pids = [os.getpid(), *(child.popen.pid for child in self.children if child.popen is not None)]
        data_dirs = [self.embedded.postgres.data_dir, self.embedded.redis.data_dir] if self.embedded else []
        return stack_memory_bytes(pids, data_dirs) / (1024 * 1024)

    def banner(self, settings: Settings, ready_s: float) -> str:
        """What a developer needs to use the running stack."""
        api = f"http://{settings.api_host}:{settings.api_port}"
        flower = f"http://{settings.flower_host}:{settings.flower_port}"
        return "\n".join(
            [
                "",
                f"arandu is running (ready in {ready_s:.1f} s, stack memory {self.memory_mib():.0f} MiB)",
                f"  API        {api}   (OpenAPI docs at {api}/docs)",
                f"  API key    {self.api_key}   (send as 'Authorization: Bearer <key>')",
                f"  explorer   {api}/ui/   (log in with the API key)",
                f"  MCP        {api}/mcp   (the key and 'X-Arandu-Agent-Id: <agent>'; or stdio: arandu mcp -a <agent>)",
                f"  Flower     {flower}   (user {settings.flower_user}, password {self.flower_password})",
                f"  database   {settings.database_url}",
                f"  broker     {settings.broker_url}",
                f"  logs       {self.home / 'logs'}/",
                "Press Ctrl-C to stop.",
                "",
            ]
        )

    def stop(self) -> None:
        """Stop every child (warm shutdown, then kill after a grace period), then the servers."""
        for child in reversed(self.children):
            child.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for child in self.children:
            if child.popen is None:
                continue
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(max(0.1, deadline - time.monotonic()))
            # Whatever is left in the group (a pool child that ignored SIGTERM) gets SIGKILL.
            child.signal_group(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(5)
            child.close_log()
        if self.embedded is not None:
            self.embedded.stop()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``./ops/dev``."""
    parser = argparse.ArgumentParser(prog="ops/dev", description="Run the whole arandu stack locally.")
    parser.add_argument("--no-demo", action="store_true", help="do not send the sample conversation")
    args = parser.parse_args(argv)

    stop_event = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        stop_event.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)

    try:
        settings = load_settings()
    except SettingsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    stack = DevStack(settings, stop_event)
    code = 0
    try:
        print(f"starting arandu under {stack.home}")
        run_settings = stack.prepare_environment()
        # So that `arandu doctor` / `arandu db` in another shell find this stack, not localhost's defaults.
        write_record(run_settings)
        upgrade(run_settings)
        stack.start_processes(run_settings)
        ready_s = stack.wait_ready(run_settings)
        print(stack.banner(run_settings, ready_s), flush=True)
        if not args.no_demo:
            from ops.demo import run_demo

            run_demo(f"http://{run_settings.api_host}:{run_settings.api_port}", stack.api_key)
        while not stop_event.wait(1.0):
            stack.restart_exited_children()
    except KeyboardInterrupt:
        pass
    except (SettingsError, DatabaseSchemaError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        code = 1
    finally:
        print("stopping arandu...", flush=True)
        stack.stop()
        print("stopped.", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
