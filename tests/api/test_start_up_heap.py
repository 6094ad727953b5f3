"""A started API keeps the garbage collector off what it built at start-up (memory_core.process_heap)."""

from __future__ import annotations

import gc
from pathlib import Path

import httpx

from tests.support.api_server import api_settings, serve_api
from tests.support.services import TestServices


def test_a_started_api_has_frozen_its_start_up_objects(
    migrated_database_url: str, services: TestServices, tmp_path: Path
) -> None:
    settings = api_settings(migrated_database_url, services.broker_url, tmp_path / "home")
    gc.unfreeze()  # what other tests of this process froze
    assert gc.get_freeze_count() == 0
    try:
        with serve_api(settings) as base_url:
            assert httpx.get(f"{base_url}/healthz").status_code == 200
            # The app, its pools and everything imported: far more than a few objects.
            assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
