"""Task timing into the metrics ledger (real Redis): every attempt of a retried task is counted."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from memory_core.settings import Settings
from tests.support.workers import isolated_app
from workers.metrics_ledger import MetricsLedger
from workers.task_metrics import _on_postrun, _on_prerun


def test_an_attempt_that_starts_before_the_previous_one_is_recorded_is_counted_too(write_settings: Settings) -> None:
    app = isolated_app(write_settings)
    task_id = str(uuid.uuid4())

    def attempt(retries: int) -> SimpleNamespace:
        return SimpleNamespace(app=app, name="ingest.extract", request=SimpleNamespace(retries=retries))

    # A retry with a short countdown, picked up by another thread before the first attempt ended.
    _on_prerun(task_id=task_id, task=attempt(0))
    _on_prerun(task_id=task_id, task=attempt(1))
    _on_postrun(task_id=task_id, task=attempt(0), state="RETRY")
    _on_postrun(task_id=task_id, task=attempt(1), state="SUCCESS")

    ledger = MetricsLedger.for_settings(app.arandu_settings)  # type: ignore[attr-defined]
    assert ledger is not None
    stats = ledger.snapshot().tasks["ingest.extract"]
    assert stats.count == 2
    assert stats.states == {"RETRY": 1, "SUCCESS": 1}
