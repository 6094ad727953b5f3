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
