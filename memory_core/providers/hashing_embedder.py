"""A dependency-free embedder for running without any model: signed feature hashing.

It is not a semantic model. It puts texts that share words, word pairs and word
pieces close together, which is enough for offline development, tests and
lexical-ish recall; synonyms with no shared letters ("car"/"automobile") stay far
apart.

Features, each hashed with BLAKE2b (stable across processes and machines, unlike
Python's salted ``hash()``) into one signed bucket:

* word unigrams, lower-cased and accent-folded, minus English and Portuguese stop
  words and contraction fragments (weight 1, sublinear in repetitions);
* pairs of consecutive remaining words (weight 0.7), which reward shared phrases
  like "rio janeiro" or "last year";
* character 3- and 4-grams of every remaining word with ``<``/``>`` boundary
  markers, scaled so each word's pieces together weigh as much as the word
  itself, which links inflections ("mudei"/"mudou", "allergic"/"allergy") and
  survives typos.

The vector is L2-normalised, so the dot product is the cosine similarity. Any change
to the features changes every vector: bump :data:`HASHING_MODEL_NAME` with it so
stored vectors are known to need re-embedding.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from functools import lru_cache
from hashlib import blake2b
from itertools import pairwise

from memory_core.providers.errors import ProviderRequestError

__all__ = ["HASHING_MODEL_NAME", "STOP_WORDS", "HashingEmbedder", "content_words"]

HASHING_MODEL_NAME = "hashing-v1"

_UNIGRAM_WEIGHT = 1.0
_BIGRAM_WEIGHT = 0.7
_CHAR_BLOCK_WEIGHT = 1.0
_CHAR_NGRAM_SIZES = (3, 4)

# Already accent-folded and lower-cased, because they are compared after folding.
_ENGLISH_STOP_WORDS = """
a an the and or but if then than so of to in on at by for with from as into onto about over under
up down out off is are was were be been being am do does did done have has had having will would
shall should can could may might must i me my mine myself we us our ours you your yours he him his
she her hers it its they them their theirs this that these those there here what which who whom
whose how when where why all any some each both such just also too very not no nor only own same
s t m d ll re ve
"""
_PORTUGUESE_STOP_WORDS = """
o os a as um uma uns umas de do da dos das em no na nos nas num numa por pelo pela pelos pelas para
pra com sem e ou mas que se eu mim meu minha meus minhas tu te ti teu tua voce voces ele ela eles
elas lhe lhes seu sua seus suas nosso nossa isso isto esse essa este esta estes estas aquele
aquela aquilo ao aos foi era sao ser estar estou estava tem ter tinha ja muito mais menos
tambem como quando onde qual quem nao sim ate entre sobre
"""
STOP_WORDS = frozenset((_ENGLISH_STOP_WORDS + _PORTUGUESE_STOP_WORDS).split())

_WORD = re.compile(r"[^\W_]+")


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(char for char in decomposed if not unicodedata.combining(char)).casefold()


def content_words(text: str) -> list[str]:
    """The folded words of ``text`` that carry meaning (all words if every one is a stop word)."""
    words = _WORD.findall(_fold(text))
    kept = [word for word in words if word not in STOP_WORDS]
    # "who am I?" is still a question worth a vector.
    return kept or words


@lru_cache(maxsize=1 << 17)
def _bucket(feature: str, dimensions: int) -> tuple[int, float]:
    digest = int.from_bytes(blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
    return (digest >> 1) % dimensions, (1.0 if digest & 1 else -1.0)


@lru_cache(maxsize=1 << 16)
def _word_features(word: str, dimensions: int) -> tuple[tuple[int, float], ...]:
    """Signed bucket weights of one word: its unigram plus its character n-grams."""
    weights: dict[int, float] = {}
    index, sign = _bucket("w:" + word, dimensions)
    weights[index] = weights.get(index, 0.0) + sign * _UNIGRAM_WEIGHT
    marked = f"<{word}>"
    grams = [marked[i : i + size] for size in _CHAR_NGRAM_SIZES for i in range(len(marked) - size + 1)]
    if grams:
        gram_weight = _CHAR_BLOCK_WEIGHT / math.sqrt(len(grams))
        for gram in grams:
            index, sign = _bucket("c:" + gram, dimensions)
            weights[index] = weights.get(index, 0.0) + sign * gram_weight
    return tuple(weights.items())


class HashingEmbedder:
    """:class:`~memory_core.providers.protocols.EmbeddingProvider` by feature hashing; see the module docstring.

    Deterministic, pure standard library, and fast enough to run on every message
    and query (per-word bucket lists are cached).
    """

    model = HASHING_MODEL_NAME

    def __init__(self, dimensions: int = 384) -> None:
        if dimensions < 8:
            raise ProviderRequestError(
                f"the hashing embedder needs at least 8 dimensions, got {dimensions} (ARANDU_EMBEDDING_DIMENSIONS)",
                provider="hashing",
            )
        self._dimensions = dimensions

    @property
    def dimensions(self) -> int:
        """Length of every returned vector."""
        return self._dimensions

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One unit vector per text; a text without any word gets the zero vector."""
        return [self._vector(text) or [0.0] * self._dimensions for text in texts]

    def embed_one(self, text: str) -> list[float] | None:
        """The unit vector of ``text``, or ``None`` when it has no word (empty, blank, punctuation)."""
        return self._vector(text)

    def _vector(self, text: str) -> list[float] | None:
        words = content_words(text)
        if not words:
            return None
        dimensions = self._dimensions
        vector = [0.0] * dimensions
        for word, count in Counter(words).items():
            scale = 1.0 + math.log(count)
            for index, weight in _word_features(word, dimensions):
                vector[index] += scale * weight
        for pair, count in Counter(pairwise(words)).items():
            index, sign = _bucket("b:" + " ".join(pair), dimensions)
            vector[index] += sign * _BIGRAM_WEIGHT * (1.0 + math.log(count))
        norm = math.sqrt(math.fsum(value * value for value in vector))
        if norm == 0.0:
            # Every feature cancelled out in colliding buckets: vanishingly rare,
            # but a zero vector must not pass for a unit one.
            return None
        return [value / norm for value in vector]
