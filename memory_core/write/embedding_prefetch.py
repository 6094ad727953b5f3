"""A chunk's embeddings asked for together: one request for its messages, one for its facts.

Each message needs two embeddings (its text, and its facts' texts). Asked message by message that
is two requests per message; with an embeddings endpoint over HTTP each request costs a round
trip and a few milliseconds of client CPU, more than the vectors themselves
(docs/performance.md, "Peers"). The chunk knows its messages before extraction and, with batched
extraction, its facts before any message is finished, so it asks for them at once and the
per-message code reads the answers from a memo. Whatever the memo does not hold is asked for as
before, so a prefetch that misses or fails changes nothing but the request count.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from memory_core.cognition.models import ExtractionOutput
from memory_core.providers.protocols import EmbeddingProvider
from memory_core.write.context import WriteContext
from memory_core.write.normalize import group_aliases, mirror_facts

logger = logging.getLogger(__name__)


class PrefetchedEmbedder:
    """An :class:`EmbeddingProvider` answering from vectors asked for ahead, and from ``inner`` otherwise.

    Safe to share between the threads of one chunk: the memo only grows, and texts asked for by
    two threads at once are at worst embedded twice.
    """

    def __init__(self, inner: EmbeddingProvider) -> None:
        self.inner = inner
        self._memo: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    @property
    def dimensions(self) -> int:
        """Length of every vector (the inner provider's)."""
        return self.inner.dimensions

    def prefetch(self, texts: Iterable[str]) -> None:
        """Embed every new non-blank text of ``texts`` in one go; a failure is left to the later calls."""
        missing = self._missing(texts)
        if not missing:
            return
        try:
            vectors = self.inner.embed(missing)
        except Exception:  # the per-message calls ask again, and fail (or retry) as they always did
            logger.debug("embedding prefetch of %d texts failed; asking per message", len(missing), exc_info=True)
            return
        self._remember(missing, vectors)

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text in input order: remembered ones from the memo, the rest in one request."""
        missing = self._missing(texts)
        if missing:
            self._remember(missing, self.inner.embed(missing))
        zero = [0.0] * self.dimensions
        with self._lock:
            return [list(self._memo[text]) if text.strip() else list(zero) for text in texts]

    def embed_one(self, text: str) -> list[float] | None:
        """The vector of ``text``, or ``None`` for blank text."""
        if not text.strip():
            return None
        return self.embed([text])[0]

    def _missing(self, texts: Iterable[str]) -> list[str]:
        with self._lock:
            return list(dict.fromkeys(text for text in texts if text.strip() and text not in self._memo))

    def _remember(self, texts: list[str], vectors: list[list[float]]) -> None:
        with self._lock:
            self._memo.update(zip(texts, vectors, strict=True))


def with_chunk_embeddings(ctx: WriteContext, messages: Iterable[str]) -> WriteContext:
    """``ctx`` for one chunk's extraction, its messages embedded in one request.

    The in-process hashing embedder costs nothing per call, so it is left as it is.
    """
    if ctx.embedder_in_process:
        return ctx
    embedder = PrefetchedEmbedder(ctx.embedder)
    embedder.prefetch(messages)
    return dataclasses.replace(ctx, embedder=embedder)


def prefetch_embeddings(ctx: WriteContext, texts: Iterable[str]) -> None:
    """Embed ``texts`` ahead in one request when ``ctx`` is a chunk's (see :func:`with_chunk_embeddings`)."""
    if isinstance(ctx.embedder, PrefetchedEmbedder):
        ctx.embedder.prefetch(texts)


def answered_fact_texts(stored: dict[str, Any] | None, speaker: str) -> list[str]:
    """The texts a message's stored extraction answer will have embedded: its facts and their mirrors."""
    if stored is None:
        return []
    try:
        output = group_aliases(ExtractionOutput.model_validate(stored.get("output")), speaker)
    except ValidationError:
        return []  # finishing the message handles a broken answer; nothing to embed ahead
    return [fact.text for fact in output.facts] + [mirror.text for mirror in mirror_facts(output)]
