"""Embeddings through the ``openai`` SDK (OpenAI or any compatible ``/embeddings`` endpoint)."""

from __future__ import annotations

import base64
import binascii
import struct
from typing import Any, Literal

import orjson

from memory_core.providers.errors import ProviderRequestError, ProviderResponseError
from memory_core.providers.openai_llm import make_openai_client, translate_openai_error

__all__ = ["DEFAULT_BATCH_SIZE", "OpenAIEmbeddingProvider", "decode_embeddings"]

DEFAULT_BATCH_SIZE = 256


class OpenAIEmbeddingProvider:
    """:class:`~memory_core.providers.protocols.EmbeddingProvider` over ``POST /embeddings``.

    Inputs go out ``batch_size`` at a time. ``dimensions`` is requested from the
    ``text-embedding-3*`` models (which can shorten their vectors) and checked on
    every returned vector for all models, so a misconfigured dimension fails loudly
    instead of reaching the vector column.

    ``encoding_format`` defaults to base64 for api.openai.com (fewer bytes than a JSON
    list of floats) and to "float" for a custom ``base_url``, because not every
    compatible server implements base64. Either way the answer is read here from the
    raw JSON (:func:`decode_embeddings`), not through the SDK's models, which built
    each float of a JSON list through its type machinery: 2.5-3 ms of CPU per
    384-dimension vector, half of an embedding call's cost (docs/performance.md, "Peers").
    """

    def __init__(
        self,
        api_key: str | None,
        model: str,
        dimensions: int,
        base_url: str | None = None,
        timeout_s: float = 30,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        encoding_format: Literal["float", "base64"] | None = None,
    ) -> None:
        import openai  # deferred like in openai_llm

        if dimensions < 1:
            raise ProviderRequestError(f"embedding dimensions must be positive, got {dimensions}", provider="openai")
        if batch_size < 1:
            raise ProviderRequestError(f"embedding batch size must be positive, got {batch_size}", provider="openai")
        self.model = model
        self.base_url = base_url
        self.batch_size = batch_size
        self.encoding_format = encoding_format or ("float" if base_url else "base64")
        self._dimensions = dimensions
        self._client = make_openai_client(api_key, base_url, timeout_s)
        self._sdk_error: type[Exception] = openai.OpenAIError

    @property
    def dimensions(self) -> int:
        """Length of every returned vector."""
        return self._dimensions

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text in input order; blank texts get a zero vector without a request."""
        vectors: list[list[float]] = [[0.0] * self._dimensions for _ in texts]
        # The API rejects empty strings, and they carry nothing to embed anyway.
        pending = [index for index, text in enumerate(texts) if text.strip()]
        for start in range(0, len(pending), self.batch_size):
            chunk = pending[start : start + self.batch_size]
            for index, vector in zip(chunk, self._request([texts[i] for i in chunk]), strict=True):
                vectors[index] = vector
        return vectors

    def embed_one(self, text: str) -> list[float] | None:
        """The vector of ``text``, or ``None`` for blank text."""
        if not text.strip():
            return None
        return self._request([text])[0]

    def _request(self, batch: list[str]) -> list[list[float]]:
        options: dict[str, Any] = {"encoding_format": self.encoding_format}
        if self.model.startswith("text-embedding-3"):
            options["dimensions"] = self._dimensions
        try:
            raw = self._client.embeddings.with_raw_response.create(model=self.model, input=batch, **options)
            content = raw.http_response.content
        except self._sdk_error as error:
            raise translate_openai_error(error) from error
        vectors = decode_embeddings(content, len(batch), model=self.model)
        for vector in vectors:
            if len(vector) != self._dimensions:
                raise ProviderResponseError(
                    f"embedding model {self.model} returned a vector of dimension {len(vector)}, "
                    f"expected {self._dimensions} (ARANDU_EMBEDDING_DIMENSIONS)",
                    provider="openai",
                )
        return vectors


def decode_embeddings(content: bytes, expected: int, *, model: str) -> list[list[float]]:
    """The vectors of an ``/embeddings`` answer, in input order: JSON floats or base64 float32, either accepted.

    Raises :class:`ProviderResponseError` when the answer is not such a list of ``expected`` vectors.
    """
    try:
        # orjson: a batch of JSON float vectors read by the standard library was an eighth of an
        # ingest worker's CPU (64 vectors of 384 floats: 11.7 ms against 1.4).
        payload = orjson.loads(content)
        items = sorted(payload["data"], key=lambda item: int(item["index"]))
        vectors = [_vector(item["embedding"]) for item in items]
    except (ValueError, TypeError, KeyError, binascii.Error) as error:
        raise ProviderResponseError(
            f"embedding model {model} answered something that is not a list of embeddings: {error}",
            provider="openai",
        ) from None
    if len(items) != expected or [int(item["index"]) for item in items] != list(range(expected)):
        raise ProviderResponseError(
            f"embedding model {model} returned {len(items)} vectors for {expected} inputs",
            provider="openai",
        )
    return vectors


def _vector(value: Any) -> list[float]:
    if isinstance(value, str):  # base64 of little-endian float32, as OpenAI sends it
        data = base64.b64decode(value, validate=True)
        if len(data) % 4:
            raise ValueError(f"a base64 vector of {len(data)} bytes is not float32")
        return list(struct.unpack(f"<{len(data) // 4}f", data))
    if not isinstance(value, list):
        raise TypeError(f"an embedding must be a list of numbers or base64, not {type(value).__name__}")
    return [float(number) for number in value]
