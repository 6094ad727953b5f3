"""The chunk's embedding memo: answers aligned with their texts, and a failed prefetch changes nothing."""

from __future__ import annotations

from memory_core.providers.hashing_embedder import HashingEmbedder
from memory_core.write.embedding_prefetch import PrefetchedEmbedder


class CountingEmbedder:
    """The hashing embedder behind a request counter, failing the first ``failures`` requests."""

    def __init__(self, failures: int = 0) -> None:
        self.inner = HashingEmbedder(64)
        self.requests: list[list[str]] = []
        self.failures = failures

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.requests.append(list(texts))
        if self.failures:
            self.failures -= 1
            raise ConnectionError("embeddings endpoint unreachable")
        return self.inner.embed(texts)

    def embed_one(self, text: str) -> list[float] | None:
        return self.embed([text])[0] if text.strip() else None


def test_prefetched_texts_cost_no_request_and_every_answer_is_its_own_texts_vector() -> None:
    inner = CountingEmbedder()
    embedder = PrefetchedEmbedder(inner)
    embedder.prefetch(["I live in Porto", "I play the cello", "I live in Porto", "  "])
    assert inner.requests == [["I live in Porto", "I play the cello"]]

    assert embedder.embed_one("I play the cello") == inner.inner.embed_one("I play the cello")
    mixed = embedder.embed(["I live in Porto", "", "My sister is Ana"])
    assert mixed == [inner.inner.embed_one("I live in Porto"), [0.0] * 64, inner.inner.embed_one("My sister is Ana")]
    # Only the text it had not seen went out.
    assert inner.requests[1:] == [["My sister is Ana"]]
    assert embedder.embed_one(" ") is None


def test_a_failed_prefetch_leaves_each_text_to_be_asked_for_as_before() -> None:
    inner = CountingEmbedder(failures=1)
    embedder = PrefetchedEmbedder(inner)
    embedder.prefetch(["I live in Porto", "I play the cello"])
    assert embedder.embed_one("I live in Porto") == inner.inner.embed_one("I live in Porto")
    assert inner.requests[1:] == [["I live in Porto"]]
