"""The dependency-free hashing embedder: stable, normalised, and closer for paraphrases."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memory_core.providers import EmbeddingProvider, HashingEmbedder, ProviderRequestError

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def cosine(left: list[float], right: list[float]) -> float:
    return sum(a * b for a, b in zip(left, right, strict=True))


def norm(vector: list[float]) -> float:
    return math.sqrt(sum(value * value for value in vector))


def embed(embedder: HashingEmbedder, text: str) -> list[float]:
    vector = embedder.embed_one(text)
    assert vector is not None
    return vector


def test_is_an_embedding_provider() -> None:
    assert isinstance(HashingEmbedder(), EmbeddingProvider)
    assert HashingEmbedder().dimensions == 384


def test_same_text_same_vector_in_this_process() -> None:
    text = "Maria's daughter starts school in São Paulo in February"

    first = embed(HashingEmbedder(), text)
    again = HashingEmbedder().embed([text])[0]

    assert first == again


def test_same_vector_in_a_fresh_process_with_another_hash_seed() -> None:
    text = "Maria's daughter starts school in São Paulo in February"
    script = (
        "import json; from memory_core.providers.hashing_embedder import HashingEmbedder;"
        f"print(json.dumps(HashingEmbedder(128).embed_one({text!r})))"
    )
    # A different PYTHONHASHSEED proves the buckets do not come from the salted hash().
    env = {**os.environ, "PYTHONHASHSEED": "4242", "PYTHONPATH": str(PROJECT_ROOT)}
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env, cwd=PROJECT_ROOT
    )

    assert json.loads(completed.stdout) == embed(HashingEmbedder(128), text)


@pytest.mark.parametrize("dimensions", [8, 64, 384, 1536])
def test_vectors_have_the_requested_dimension_and_unit_norm(dimensions: int) -> None:
    embedder = HashingEmbedder(dimensions)
    texts = [
        "I moved to Rio de Janeiro last year",
        "ok",
        "Eu adoro café com pão de queijo de manhã",
        "the the the",
        "A" * 5000,
    ]

    for vector in embedder.embed(texts):
        assert len(vector) == dimensions
        assert norm(vector) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize(
    ("anchor", "paraphrase", "unrelated"),
    [
        (
            "I moved to Rio de Janeiro last year",
            "Last year I relocated to Rio de Janeiro",
            "The quarterly budget meeting was postponed",
        ),
        (
            "My favourite food is sushi",
            "I love eating sushi, it is my favourite food",
            "The car needs new tires before the trip",
        ),
        (
            "Eu me mudei para o Rio de Janeiro no ano passado",
            "No ano passado, mudei-me para o Rio de Janeiro",
            "A reunião de orçamento trimestral foi adiada",
        ),
        (
            "Minha filha começa a escola em fevereiro",
            "Em fevereiro a minha filha começará na escola",
            "O servidor de banco de dados caiu durante a noite",
        ),
    ],
)
def test_paraphrase_is_closer_than_unrelated(anchor: str, paraphrase: str, unrelated: str) -> None:
    embedder = HashingEmbedder()
    base = embed(embedder, anchor)

    close = cosine(base, embed(embedder, paraphrase))
    far = cosine(base, embed(embedder, unrelated))

    assert close > far + 0.3
    assert close > 0.4


def test_case_and_accents_do_not_matter() -> None:
    embedder = HashingEmbedder()

    assert cosine(embed(embedder, "Moro em SÃO PAULO"), embed(embedder, "moro em sao paulo")) == pytest.approx(1.0)


def test_inflections_share_pieces() -> None:
    embedder = HashingEmbedder()
    base = embed(embedder, "relocating")

    assert cosine(base, embed(embedder, "relocated")) > cosine(base, embed(embedder, "budget")) + 0.2


@pytest.mark.parametrize("text", ["", "   ", "\n\t", "?!...", "--"])
def test_text_without_words_has_no_vector(text: str) -> None:
    embedder = HashingEmbedder(64)

    assert embedder.embed_one(text) is None
    # In a batch the slot is kept, as a zero vector, so outputs stay aligned with inputs.
    blank, word = embedder.embed([text, "hello"])
    assert blank == [0.0] * 64
    assert norm(word) == pytest.approx(1.0, abs=1e-6)


def test_a_question_made_of_stop_words_still_gets_a_vector() -> None:
    vector = HashingEmbedder().embed_one("Who am I?")

    assert vector is not None
    assert norm(vector) == pytest.approx(1.0, abs=1e-6)


def test_too_few_dimensions_is_a_configuration_error() -> None:
    with pytest.raises(ProviderRequestError, match="ARANDU_EMBEDDING_DIMENSIONS"):
        HashingEmbedder(4)


def test_fast_enough_for_every_message() -> None:
    embedder = HashingEmbedder()
    texts = [
        f"Message {index}: on day {index % 31} the user {index * 7919 % 10007} talked about trip plan "
        f"{index * 31 % 97} to city {index % 53} with friend {index % 89} and budget {index * 13}"
        for index in range(500)
    ]

    started = time.perf_counter()
    embedder.embed(texts)
    elapsed = time.perf_counter() - started

    # About 0.1 ms a message here; the bound only catches an accidental slowdown by orders of magnitude.
    assert elapsed < 2.0
