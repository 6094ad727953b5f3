"""Start a worker pool, Beat or Flower with the service's settings.

    python -m workers worker --queue ingest|apply|maintenance
    python -m workers beat
    python -m workers flower

Pools follow ARCHITECTURE.md: ``ingest`` (LLM-bound extraction) and ``apply`` run on
thread pools, ``maintenance`` on a prefork pool. Concurrency comes from the settings.
"""

from __future__ import annotations

import argparse
import logging
import sys

from memory_core.db.engine import create_db_engine
from memory_core.db.migrate import DatabaseSchemaError, check_schema
from memory_core.settings import Settings, SettingsError, get_settings
from workers.priority import lower_database_backends, lower_priority

POOLS = {"ingest": "threads", "apply": "threads", "maintenance": "prefork"}


def _concurrency(settings: Settings, queue: str) -> int:
    return {
        "ingest": settings.ingest_concurrency,
        "apply": settings.apply_concurrency,
        "maintenance": settings.maintenance_concurrency,
    }[queue]


def _check_database(settings: Settings) -> None:
    engine = create_db_engine(settings, pool_size=1)
    try:
        check_schema(engine, settings)
    finally:
        engine.dispose()


def run_worker(settings: Settings, queue: str, name: str | None = None) -> None:
    """Run a worker consuming ``queue`` until it receives SIGTERM (warm shutdown) or SIGINT.

    ``name`` (default: the queue) tells apart several worker processes of one queue on a host.
    """
    from workers.celery_app import app

    _check_database(settings)
    # Background work may yield the CPU to requests (workers.priority says why nice alone does not).
    lower_priority(settings.worker_nice)
    lower_database_backends(settings.worker_nice)
    app.worker_main(
        [
            "worker",
            f"--queues={queue}",
            f"--pool={POOLS[queue]}",
            f"--concurrency={_concurrency(settings, queue)}",
            f"--hostname={name or queue}@%h",
            f"--loglevel={settings.log_level.value}",
            "--task-events",
            # Workers of one pool do not need each other's heartbeats; this keeps broker chatter down.
            "--without-mingle",
            "--without-gossip",
        ]
    )


def run_beat(settings: Settings) -> None:
    """Run Celery Beat with its schedule state under ``$ARANDU_HOME``."""
    from workers.beat_heartbeat import install
    from workers.celery_app import app

    lower_priority(settings.worker_nice)  # a schedule tick needs no hurry; a request does

    settings.home.mkdir(parents=True, exist_ok=True)
    install(app)  # Beat answers no ping: its heartbeat in the broker is what `arandu doctor` checks
    app.start(
        [
            "beat",
            f"--schedule={settings.home / 'celerybeat-schedule'}",
            f"--pidfile={settings.home / 'celerybeat.pid'}",
            f"--loglevel={settings.log_level.value}",
        ]
    )


def run_flower(settings: Settings) -> None:
    """Run Flower behind basic auth; refuses to start without a password."""
    from workers.celery_app import app

    if settings.flower_password is None or not settings.flower_password.get_secret_value():
        raise SettingsError("ARANDU_FLOWER_PASSWORD is not set: Flower does not run without basic auth")
    # Flower follows every task's events: under a backlog that is thousands a second, and a
    # monitoring page can wait for a request.
    lower_priority(settings.worker_nice)
    app.start(
        [
            "flower",
            f"--address={settings.flower_host}",
            f"--port={settings.flower_port}",
            f"--basic-auth={settings.flower_user}:{settings.flower_password.get_secret_value()}",
            "--persistent=False",
            f"--logging={settings.log_level.value.lower()}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the chosen process."""
    parser = argparse.ArgumentParser(prog="python -m workers", description="Run an arandu Celery process.")
    sub = parser.add_subparsers(dest="process", required=True)
    worker = sub.add_parser("worker", help="a worker pool for one queue")
    worker.add_argument("--queue", required=True, choices=sorted(POOLS))
    worker.add_argument("--name", help="node name when several processes consume one queue (default: the queue)")
    sub.add_parser("beat", help="the periodic scheduler")
    sub.add_parser("flower", help="the monitoring UI")
    args = parser.parse_args(argv)
    try:
        settings = get_settings()
        logging.basicConfig(level=settings.log_level.value, format="%(asctime)s %(levelname)s %(name)s %(message)s")
        if args.process == "worker":
            run_worker(settings, args.queue, args.name)
        elif args.process == "beat":
            run_beat(settings)
        else:
            run_flower(settings)
    except (SettingsError, DatabaseSchemaError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
