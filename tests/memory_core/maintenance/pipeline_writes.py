"""Write conversations through the real write pipeline, in process, with the offline skills."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from memory_core.providers.protocols import EmbeddingProvider
from memory_core.settings import Settings
from memory_core.write.context import build_write_context
from memory_core.write.intake import IncomingMessage, accept_messages
from memory_core.write.pipeline import run_extract, run_reconcile, run_resolve, run_upsert


def write_messages(
    settings: Settings,
    embedder: EmbeddingProvider,
    agent_id: str,
    messages: Sequence[str],
    *,
    start: datetime,
    speaker: str = "Rafael",
    step: timedelta = timedelta(hours=1),
) -> list[str]:
    """Run every stage of the write pipeline for ``messages`` (one ``step`` apart); the event ids."""
    write = build_write_context(settings, embedder=embedder, pool_size=2)
    try:
        with write.sessions.begin() as session:
            accepted = accept_messages(
                session,
                agent_id,
                [
                    IncomingMessage(message=message, speaker_name=speaker, occurred_at=start + step * index)
                    for index, message in enumerate(messages)
                ],
            )
        for stage in (run_extract, run_resolve, run_reconcile, run_upsert):
            for item in accepted:
                assert stage(write, item.event_id) == "completed"
    finally:
        write.close()
    return [str(item.event_id) for item in accepted]
