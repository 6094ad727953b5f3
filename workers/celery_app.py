"""The Celery application: broker, queues, routing and the reliability settings the pipeline rests on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery
from kombu import Exchange, Queue

from beat_schedule import build_beat_schedule
from memory_core.settings import Settings, get_settings

QUEUES: tuple[str, ...] = ("ingest", "apply", "maintenance")


def broker_transport_options(settings: Settings) -> dict[str, Any]:
    """Options every client of the broker must share (API, workers, Beat, Flower)."""
    options: dict[str, Any] = {
        # Redis redelivers an unacknowledged task after this long: it must exceed the longest
        # task plus its longest retry countdown, or running tasks get executed twice.
        "visibility_timeout": settings.broker_visibility_timeout_s,
    }
    if settings.broker_key_prefix and settings.broker_url.startswith(("redis", "rediss")):
        options["global_keyprefix"] = settings.broker_key_prefix
    return options


def create_celery_app(
    settings: Settings,
    *,
    context_factory: Callable[[Settings], Any] | None = None,
    maintenance_context_factory: Callable[[Settings], Any] | None = None,
) -> Celery:
    """Build the Celery app for ``settings`` (tests build their own, possibly with scripted skills)."""
    from workers import broker_compat
    from workers.task_metrics import install_task_metrics
    from workers.tasks.maintenance import register_maintenance_tasks
    from workers.tasks.pipeline import register_pipeline_tasks
    from workers.tasks.reprocess import register_reprocess_tasks

    broker_compat.install()  # a worker must outlive its broker (see the module)
    app = Celery("arandu", set_as_current=False)
    app.arandu_settings = settings  # type: ignore[attr-defined]
    app.arandu_context_factory = context_factory  # type: ignore[attr-defined]
    app.arandu_maintenance_context_factory = maintenance_context_factory  # type: ignore[attr-defined]
    app.conf.update(
        broker_url=settings.broker_url,
        broker_transport_options=broker_transport_options(settings),
        broker_connection_retry_on_startup=True,
        # State lives in PostgreSQL (pipeline_runs, maintenance_job_runs), not in a result backend.
        result_backend=None,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        # At-least-once delivery: a task is acknowledged only after it ran, and a task whose
        # worker died is requeued. Stages are idempotent, so a redelivery applies nothing twice.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_queues=tuple(Queue(name, Exchange(name, type="direct"), routing_key=name) for name in QUEUES),
        task_default_queue="maintenance",
        task_routes={f"{name}.*": {"queue": name, "routing_key": name} for name in QUEUES},
        task_create_missing_queues=False,
        # Flower shows tasks from these events. Not the "sent" one: a chain's worker would send
        # it for every next stage (a broker round trip per task), and Flower learns of a task
        # when a worker receives it anyway.
        worker_send_task_events=True,
        task_send_sent_event=False,
        worker_hijack_root_logger=False,
        beat_schedule=build_beat_schedule(settings),
        timezone="UTC",
        enable_utc=True,
    )
    register_pipeline_tasks(app)
    register_reprocess_tasks(app)
    register_maintenance_tasks(app)
    install_task_metrics()
    return app


app = create_celery_app(get_settings())
