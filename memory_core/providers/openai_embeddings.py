"""Embeddings through the ``openai`` SDK (OpenAI or any compatible ``/embeddings`` endpoint)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from memory_core.providers.errors import ProviderRequestError, ProviderResponseError
from memory_core.providers.openai_llm import make_openai_client, translate_openai_error

if TYPE_CHECKING:
    from openai.types import CreateEmbeddingResponse

__all__ = ["DEFAULT_BATCH_SIZE", "OpenAIEmbeddingProvider"]

DEFAULT_BATCH_SIZE = 256


class OpenAIEmbeddingProvider:
    """:class:`~memory_core.providers.protocols.EmbeddingProvider` over ``POST /embeddings``.

    Inputs go out ``batch_size`` at a time. ``dimensions`` is requested from the
    ``text-embedding-3*`` models (which can shorten their vectors) and checked on
    every returned vector for all models, so a misconfigured dimension fails loudly
    instead of reaching the vector column.

    ``encoding_format`` defaults to base64 for api.openai.com (the SDK decodes it in
    one step, while it validates a JSON list of floats number by number, several
    milliseconds per 1536-dimensional vector) and to "float" for a custom
    ``base_url``, because not every compatible server implements base64.
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
        options: dict[str, Any] = {}
        if self.model.startswith("text-embedding-3"):
            options["dimensions"] = self._dimensions
        if self.encoding_format == "float":
            options["encoding_format"] = "float"
        # Leaving base64 to the SDK's default lets it decode the vectors itself,
        # and accept servers that answer floats anyway.
        try:
            response: CreateEmbeddingResponse = self._client.embeddings.create(model=self.model, input=batch, **options)
        except self._sdk_error as error:
            raise translate_openai_error(error) from error
        items = sorted(response.data, key=lambda item: item.index)
        if len(items) != len(batch) or [item.index for item in items] != list(range(len(batch))):
            raise ProviderResponseError(
                f"embedding model {self.model} returned {len(items)} vectors for {len(batch)} inputs",
                provider="openai",
            )
        vectors: list[list[float]] = []
        for item in items:
            vector = [float(value) for value in item.embedding]
            if len(vector) != self._dimensions:
                raise ProviderResponseError(
                    f"embedding model {self.model} returned a vector of dimension {len(vector)}, "
                    f"expected {self._dimensions} (ARANDU_EMBEDDING_DIMENSIONS)",
                    provider="openai",
                )
            vectors.append(vector)
        return vectors
