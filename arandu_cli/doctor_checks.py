"""The checks of ``arandu doctor``: each says whether one part works and, if not, how to fix it.

They talk to the parts directly with the service's settings: PostgreSQL (read-only queries;
nothing is created or migrated here), the broker (``workers.health``), the workers (a Celery
``inspect`` broadcast: which worker consumes which queue), Beat (its heartbeat in the broker,
see ``workers.beat_heartbeat``), Flower (``/healthcheck`` and an authenticated API call) and
the API (``/readyz``). A part that depends on a broken one is reported as skipped.

When the settings came from ``./ops/dev``'s record (:mod:`arandu_cli.dev_stack`), the first check
is that stack itself, and the advice speaks of it (its logs, restarting it) rather than of
servers to install. A broker that answers is also asked whether it is this service's: a Redis that
no arandu worker or Beat ever used is some other program's, whatever it answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from sqlalchemy import Engine, text

from arandu_cli.dev_stack import DevStackRecord
from memory_core.db.engine import create_db_engine
from memory_core.db.migrate import current_revision, head_revision
from memory_core.db.server_support import read_server_support
from memory_core.settings import Settings

State = Literal["ok", "failed", "skipped", "unknown"]
QUEUES = ("ingest", "apply", "maintenance")
# Beat publishes the sweeper every 30 s: three periods of silence means it is not running.
BEAT_STALE_AFTER_S = 90.0
_ANY_ADDRESS = {"0.0.0.0", "::", ""}  # noqa: S104 - compared against, never bound


@dataclass(frozen=True)
class Check:
    """One verdict: the part, its state, what was seen, and what to do about it."""

    name: str
    state: State
    detail: str
    fix: str | None = None

    @property
    def ok(self) -> bool:
        """True unless the part failed or was skipped because another one did."""
        return self.state in ("ok", "unknown")


def _where(engine: Engine) -> str:
    url = engine.url
    host = url.host or (url.query.get("host") if url.query else None) or "localhost"
    return f"{host}{f':{url.port}' if url.port else ''}/{url.database}"


def _short(error: BaseException) -> str:
    message = str(getattr(error, "orig", None) or error).strip().splitlines()
    return f"{type(error).__name__}: {message[0] if message else ''}"[:300]


# ---- Database ----------------------------------------------------------------------------


def check_dev_stack(record: DevStackRecord) -> Check:
    """The ``./ops/dev`` process whose record gave the settings still runs."""
    if record.running:
        return Check("dev stack", "ok", f"{record.describe()}: settings from {record.path.name}")
    return Check(
        "dev stack",
        "failed",
        f"{record.describe()} is not running (its database and broker stopped with it)",
        "start it again: ./ops/dev (the data is kept), or set ARANDU_DATABASE_URL / ARANDU_BROKER_URL "
        "to servers of your own",
    )


def check_database(settings: Settings, stack: DevStackRecord | None = None) -> list[Check]:
    """Reachable, the server's version and extensions supported, migrations at head, dimension as configured."""
    engine = create_db_engine(settings, pool_size=1)
    where = _where(engine)
    try:
        try:
            with engine.connect() as conn:
                support = read_server_support(conn)
        except Exception as error:
            return [
                Check(
                    "database", "failed", f"cannot connect to {where}: {_short(error)}", _database_fix(settings, stack)
                ),
                *(
                    Check(name, "skipped", "database unreachable")
                    for name in ("server support", "migrations", "embedding dimension")
                ),
            ]
        checks = [Check("database", "ok", f"PostgreSQL {support.server_version} at {where}")]
        problems = support.problems()
        if problems:
            checks.append(Check("server support", "failed", "; ".join(problems), "see docs/production.md, 'Database'"))
        else:
            checks.append(Check("server support", "ok", support.summary()))
        checks.extend(_schema_checks(engine, settings, where))
        return checks
    finally:
        engine.dispose()


def _database_fix(settings: Settings, stack: DevStackRecord | None) -> str:
    if stack is not None:
        return (
            f"the database of {stack.describe()} does not answer: see {stack.path.parent / 'logs'}/, restart ./ops/dev"
        )
    return (
        f"start PostgreSQL there, or run ./ops/dev (nothing recorded under {settings.home}), "
        "or set ARANDU_DATABASE_URL to the right server"
    )


def _schema_checks(engine: Engine, settings: Settings, where: str) -> list[Check]:
    head = head_revision()
    try:
        revision = current_revision(engine)
    except Exception as error:
        return [
            Check("migrations", "failed", f"cannot read the revision: {_short(error)}", "run `arandu db upgrade`"),
            Check("embedding dimension", "skipped", "schema unreadable"),
        ]
    if revision is None:
        return [
            Check("migrations", "failed", f"{where} has no arandu schema", "run `arandu db upgrade`"),
            Check("embedding dimension", "skipped", "no schema"),
        ]
    if revision != head:
        migrations = Check("migrations", "failed", f"at {revision}, this code needs {head}", "run `arandu db upgrade`")
    else:
        migrations = Check("migrations", "ok", f"at {head} (current)")
    try:
        with engine.connect() as conn:
            stored = conn.execute(text("SELECT embedding_dimensions FROM schema_info WHERE id = 1")).scalar()
    except Exception as error:
        return [
            migrations,
            Check(
                "embedding dimension", "failed", f"cannot read schema_info: {_short(error)}", "run `arandu db upgrade`"
            ),
        ]
    if stored != settings.dimensions:
        dimension = Check(
            "embedding dimension",
            "failed",
            f"the database stores {stored}-dimensional vectors, the settings give {settings.dimensions} "
            f"({settings.embedder.value}, {settings.embedding_model})",
            "use the embedder the database was built with (ARANDU_EMBEDDING_*), or a new database",
        )
    else:
        dimension = Check(
            "embedding dimension", "ok", f"{stored} ({settings.embedder.value}, {settings.embedding_model})"
        )
    return [migrations, dimension]


# ---- Broker, workers, Beat -----------------------------------------------------------------


def check_broker(settings: Settings, stack: DevStackRecord | None = None) -> Check:
    """The broker answers a round trip and is this service's (its workers or Beat have used it)."""
    from workers.health import check_broker as ping_broker
    from workers.health import service_traces

    where = _broker_label(settings.broker_url)
    try:
        ping_broker(settings, timeout_s=3.0)
        traces = service_traces(settings)
    except Exception as error:
        if stack is not None:
            logs = stack.path.parent / "logs"
            fix = f"the broker of {stack.describe()} does not answer: see {logs}/, restart ./ops/dev"
        else:
            fix = (
                f"start Redis (or RabbitMQ), or run ./ops/dev (nothing recorded under {settings.home}), "
                "or set ARANDU_BROKER_URL to the right server"
            )
        return Check("broker", "failed", f"cannot reach {where}: {_short(error)}", fix)
    if traces is None:
        return Check("broker", "ok", f"answers at {where}")
    if not traces:
        return Check(
            "broker",
            "failed",
            f"something answers at {where}, but no arandu worker or Beat ever used it: not this service's broker",
            "set ARANDU_BROKER_URL to the service's broker (./ops/dev prints it; run arandu from the same "
            "checkout or with the same ARANDU_HOME), or start the service's workers against this one",
        )
    return Check("broker", "ok", f"answers at {where} ({', '.join(traces)})")


def _broker_label(url: str) -> str:
    # Credentials stay out of the report.
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rpartition('@')[2]}"


def check_workers(settings: Settings, timeout_s: float = 3.0, stack: DevStackRecord | None = None) -> list[Check]:
    """A live worker on each queue: the workers that answer an ``inspect`` broadcast and what they consume."""
    from workers.celery_app import create_celery_app

    app = create_celery_app(settings)
    try:
        replies: dict[str, Any] = app.control.inspect(timeout=timeout_s).active_queues() or {}
    except Exception as error:
        return [
            Check(f"worker {queue}", "failed", f"cannot ask the workers: {_short(error)}", "check the broker first")
            for queue in QUEUES
        ]
    finally:
        app.close()
    consuming: dict[str, list[str]] = {queue: [] for queue in QUEUES}
    for worker, queues in replies.items():
        for queue in queues or []:
            name = queue.get("name") if isinstance(queue, dict) else None
            if name in consuming:
                consuming[name].append(worker)
    checks = []
    for queue, workers in consuming.items():
        if workers:
            checks.append(Check(f"worker {queue}", "ok", f"{len(workers)} answering: {', '.join(sorted(workers))}"))
        else:
            checks.append(
                Check(
                    f"worker {queue}",
                    "failed",
                    f"no worker consumes the {queue} queue (none answered in {timeout_s:g} s)",
                    _worker_fix(queue, stack),
                )
            )
    return checks


def _worker_fix(queue: str, stack: DevStackRecord | None) -> str:
    if stack is None:
        return f"start one: python -m workers worker --queue {queue}"
    # ./ops/dev stops the whole stack when a child exits, so a silent worker is stopped or hung.
    return (
        f"the worker-{queue} process of ./ops/dev does not answer (stopped or hung): see "
        f"{stack.path.parent / 'logs' / f'worker-{queue}.log'}, then restart ./ops/dev"
    )


def check_beat(settings: Settings, now: float | None = None) -> Check:
    """Beat published a scheduled task recently (or started recently and has none due yet)."""
    from workers.beat_heartbeat import read_heartbeat

    fix = "start Beat (exactly one per deployment): python -m workers beat"
    try:
        beat = read_heartbeat(settings)
    except NotImplementedError as error:
        return Check("beat", "unknown", f"cannot tell: {error}")
    except Exception as error:
        return Check("beat", "failed", f"cannot read its heartbeat: {_short(error)}", "check the broker first")
    if beat is None:
        return Check("beat", "failed", "Beat never ran against this broker (no heartbeat)", fix)
    age = beat.age_s(now)
    where = f"{beat.host or '?'} pid {beat.pid or '?'}"
    if age is None or age > BEAT_STALE_AFTER_S:
        return Check("beat", "failed", f"last sign of life {age:.0f} s ago ({where}): Beat is not running", fix)
    if beat.published_at is None:
        return Check("beat", "ok", f"started {age:.0f} s ago on {where}; its first task is due within 30 s")
    return Check("beat", "ok", f"published {beat.task} {age:.0f} s ago ({where})")


# ---- Flower and the API -------------------------------------------------------------------


def flower_url(settings: Settings) -> str:
    """Where Flower listens, as a URL this machine can reach."""
    host = "127.0.0.1" if settings.flower_host in _ANY_ADDRESS else settings.flower_host
    return f"http://{host}:{settings.flower_port}"


def check_flower(settings: Settings, url: str | None = None) -> Check:
    """Flower answers its health check and accepts the configured basic-auth credentials."""
    base = (url or flower_url(settings)).rstrip("/")
    fix = "start it: python -m workers flower (with ARANDU_FLOWER_PASSWORD set)"
    try:
        health = httpx.get(f"{base}/healthcheck", timeout=5)
    except httpx.HTTPError as error:
        return Check("flower", "failed", f"no answer at {base}: {_short(error)}", fix)
    if health.status_code != 200 or health.text.strip() != "OK":
        return Check("flower", "failed", f"{base}/healthcheck answered {health.status_code}", fix)
    if settings.flower_password is None:
        return Check("flower", "ok", f"up at {base} (ARANDU_FLOWER_PASSWORD not set here: login not checked)")
    auth = (settings.flower_user, settings.flower_password.get_secret_value())
    try:
        workers = httpx.get(f"{base}/api/workers", auth=auth, timeout=10)
    except httpx.HTTPError as error:
        return Check("flower", "failed", f"{base}/api/workers: {_short(error)}", fix)
    if workers.status_code == 401:
        return Check(
            "flower",
            "failed",
            f"{base} refuses ARANDU_FLOWER_USER / ARANDU_FLOWER_PASSWORD",
            "use the credentials Flower was started with",
        )
    if workers.status_code != 200:
        return Check("flower", "failed", f"{base}/api/workers answered {workers.status_code}", fix)
    return Check("flower", "ok", f"up at {base}, login accepted")


def check_api(url: str, api_key: str | None) -> Check:
    """The API answers ``/readyz`` (its own view of the database and broker)."""
    from arandu_client import AranduClient, TransportError

    fix = "start it: python -m api (or set --url / ARANDU_URL)"
    try:
        with AranduClient(url, api_key, timeout=10) as client:
            ready = client.ready()
    except TransportError as error:
        return Check("api", "failed", f"no answer at {url}: {error}", fix)
    except Exception as error:
        return Check("api", "failed", f"{url}: {_short(error)}", fix)
    if not ready.ready:
        broken = ", ".join(f"{name} {state}" for name, state in ready.checks.items() if state != "ok")
        return Check("api", "failed", f"{url} is up but not ready: {broken}", "fix the parts it names")
    return Check("api", "ok", f"ready at {url}")


def run_checks(
    settings: Settings,
    api_url: str,
    api_key: str | None,
    flower: str | None = None,
    stack: DevStackRecord | None = None,
) -> list[Check]:
    """Every check, in dependency order; a part behind a broken one is skipped, not blamed.

    ``stack``: the ``./ops/dev`` record the settings came from. When that stack is not running,
    every part is skipped behind it: they all stopped with it.
    """
    checks: list[Check] = []
    if stack is not None:
        checks.append(check_dev_stack(stack))
        if checks[0].state != "ok":
            names = ["database", "pgvector", "migrations", "embedding dimension", "broker"]
            names += [f"worker {queue}" for queue in QUEUES] + ["beat", "flower", "api"]
            return checks + [Check(name, "skipped", "./ops/dev is not running") for name in names]
    checks.extend(check_database(settings, stack))
    broker = check_broker(settings, stack)
    checks.append(broker)
    if broker.state == "ok":
        checks.extend(check_workers(settings, stack=stack))
        checks.append(check_beat(settings))
    else:
        reason = "broker unreachable" if broker.detail.startswith("cannot reach") else "not the service's broker"
        checks.extend(Check(f"worker {queue}", "skipped", reason) for queue in QUEUES)
        checks.append(Check("beat", "skipped", reason))
    steps: list[Callable[[], Check]] = [lambda: check_flower(settings, flower), lambda: check_api(api_url, api_key)]
    checks.extend(step() for step in steps)
    return checks
