"""Build the configured providers from :class:`~memory_core.settings.Settings`.

Importing the provider modules is cheap: each loads its SDK or model library only
when a provider is constructed.
"""

from __future__ import annotations

import os

from memory_core.providers.anthropic_llm import AnthropicChatProvider
from memory_core.providers.errors import ProviderRequestError
from memory_core.providers.hashing_embedder import HashingEmbedder
from memory_core.providers.local_embedder import (
    LOCAL_MODEL_DIMENSIONS,
    LOCAL_MODEL_NAME,
    LocalSentenceTransformerEmbedder,
)
from memory_core.providers.openai_embeddings import OpenAIEmbeddingProvider
from memory_core.providers.openai_llm import OpenAIChatProvider
from memory_core.providers.protocols import EmbeddingProvider, LLMProvider
from memory_core.settings import (
    DEFAULT_EMBEDDING_MODELS,
    DEFAULT_LLM_MODELS,
    EmbeddingProviderName,
    LLMProviderName,
    Settings,
)

__all__ = ["build_embedding_provider", "build_llm_provider"]


def build_llm_provider(settings: Settings) -> LLMProvider | None:
    """The LLM behind the cognition skills, or ``None`` when ``ARANDU_LLM_PROVIDER`` is offline."""
    provider = settings.llm
    model = settings.llm_model or DEFAULT_LLM_MODELS[provider]
    if provider is LLMProviderName.OFFLINE:
        return None
    if provider is LLMProviderName.OPENAI:
        return OpenAIChatProvider(
            api_key=settings.resolved_llm_api_key,
            model=model,
            base_url=settings.llm_base_url,
            timeout_s=settings.llm_timeout_s,
        )
    api_key = settings.resolved_llm_api_key
    if api_key is None:
        raise ProviderRequestError("ARANDU_LLM_PROVIDER=anthropic needs ARANDU_LLM_API_KEY", provider="anthropic")
    return AnthropicChatProvider(
        api_key=api_key,
        model=model,
        base_url=settings.llm_base_url,
        timeout_s=settings.llm_timeout_s,
    )


def build_embedding_provider(settings: Settings) -> EmbeddingProvider:
    """The embedder of ``ARANDU_EMBEDDING_PROVIDER``, checked against ``ARANDU_EMBEDDING_DIMENSIONS``.

    The OpenAI embedder shares the LLM's key and base URL only when the LLM is
    OpenAI too (an Anthropic key or endpoint cannot serve embeddings); otherwise it
    needs ``OPENAI_API_KEY`` or ``ARANDU_EMBEDDING_BASE_URL``.
    """
    embedder = settings.embedder
    model = settings.embedding_model or DEFAULT_EMBEDDING_MODELS[embedder]
    if embedder is EmbeddingProviderName.OPENAI:
        shares_llm = settings.llm is LLMProviderName.OPENAI
        api_key = settings.resolved_llm_api_key if shares_llm else os.environ.get("OPENAI_API_KEY", "").strip() or None
        base_url = settings.embedding_base_url or (settings.llm_base_url if shares_llm else None)
        if api_key is None and base_url is None:
            raise ProviderRequestError(
                "ARANDU_EMBEDDING_PROVIDER=openai needs OPENAI_API_KEY (or ARANDU_EMBEDDING_BASE_URL "
                "for a self-hosted OpenAI-compatible server)",
                provider="openai",
            )
        return OpenAIEmbeddingProvider(
            api_key=api_key,
            model=model,
            dimensions=settings.dimensions,
            base_url=base_url,
            timeout_s=settings.llm_timeout_s,
        )
    if embedder is EmbeddingProviderName.HASHING:
        built: EmbeddingProvider = HashingEmbedder(dimensions=settings.dimensions)
    else:
        # Any other ARANDU_EMBEDDING_MODEL is a local model folder: nothing is downloaded.
        model_path = None if model == LOCAL_MODEL_NAME else model
        # Fail before loading the model when the packaged one cannot fit the column.
        if model_path is None and settings.dimensions != LOCAL_MODEL_DIMENSIONS:
            raise _dimension_mismatch(embedder, LOCAL_MODEL_DIMENSIONS, settings.dimensions)
        built = LocalSentenceTransformerEmbedder(model_path)
    if built.dimensions != settings.dimensions:
        raise _dimension_mismatch(embedder, built.dimensions, settings.dimensions)
    return built


def _dimension_mismatch(embedder: EmbeddingProviderName, actual: int, configured: int) -> ProviderRequestError:
    return ProviderRequestError(
        f"the {embedder.value} embedder produces {actual}-dimensional vectors but "
        f"ARANDU_EMBEDDING_DIMENSIONS={configured}; set ARANDU_EMBEDDING_DIMENSIONS={actual}",
        provider=embedder.value,
    )
