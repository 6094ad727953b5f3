"""The local sentence-transformers embedder (optional ``local`` extra)."""

from __future__ import annotations

import math
import os
import sys

import pytest

from memory_core.providers import EmbeddingProvider, LocalSentenceTransformerEmbedder, ProviderRequestError


def test_missing_extra_explains_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    # A None entry makes the import fail as if the package were absent.
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)

    with pytest.raises(ProviderRequestError) as caught:
        LocalSentenceTransformerEmbedder()

    assert "pip install torch==2.13.0" in str(caught.value)
    assert "pip install -e '.[local]'" in str(caught.value)


@pytest.mark.local_model
def test_real_model_embeds_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    embedder = LocalSentenceTransformerEmbedder()
    anchor, paraphrase, unrelated = embedder.embed(
        [
            "I moved to Rio de Janeiro last year",
            "Last year I relocated to Rio de Janeiro",
            "The quarterly budget meeting was postponed",
        ]
    )

    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert isinstance(embedder, EmbeddingProvider)
    assert embedder.dimensions == 384
    assert len(anchor) == 384
    assert math.sqrt(sum(value * value for value in anchor)) == pytest.approx(1.0, abs=1e-5)

    def cosine(left: list[float], right: list[float]) -> float:
        return sum(a * b for a, b in zip(left, right, strict=True))

    assert cosine(anchor, paraphrase) > cosine(anchor, unrelated) + 0.3
    assert embedder.embed_one("   ") is None
    assert embedder.embed(["", "x"])[0] == [0.0] * 384
