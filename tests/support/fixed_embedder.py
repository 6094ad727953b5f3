"""An embedder that gives every text the one vector a test chose (vector search tests steer the query)."""

from __future__ import annotations


class FixedEmbedder:
    """Every text embeds to ``vector``; its dimensions are the vector's length."""

    def __init__(self, vector: list[float]) -> None:
        self.vector = vector

    @property
    def dimensions(self) -> int:
        return len(self.vector)

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.vector for _ in texts]

    def embed_one(self, text: str) -> list[float] | None:
        return self.vector


class MappedEmbedder:
    """Chosen texts embed to chosen vectors (a test steers similarities); any other text is hashed."""

    def __init__(self, vectors: dict[str, list[float]], dimensions: int = 384) -> None:
        from memory_core.providers.hashing_embedder import HashingEmbedder

        self.vectors = vectors
        self.fallback = HashingEmbedder(dimensions)

    @property
    def dimensions(self) -> int:
        return self.fallback.dimensions

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.vectors.get(text) or self.fallback.embed([text])[0] for text in texts]

    def embed_one(self, text: str) -> list[float] | None:
        return self.embed([text])[0]


def unit_vector(dimensions: int, *weights: tuple[int, float]) -> list[float]:
    """A vector of ``dimensions`` with the given ``(axis, weight)`` entries, scaled to length 1."""
    vector = [0.0] * dimensions
    for axis, weight in weights:
        vector[axis] = weight
    norm = sum(value * value for value in vector) ** 0.5
    return [value / norm for value in vector]
