"""LLM and embedding providers behind two small synchronous protocols.

Importing this package loads no SDK: ``openai``, ``anthropic`` and
sentence-transformers are imported when a provider using them is constructed.
"""

from memory_core.providers.anthropic_llm import AnthropicChatProvider
from memory_core.providers.errors import (
    ProviderError,
    ProviderRequestError,
    ProviderResponseError,
    RetryableProviderError,
    parse_retry_after,
)
from memory_core.providers.factory import build_embedding_provider, build_llm_provider
from memory_core.providers.hashing_embedder import HASHING_MODEL_NAME, HashingEmbedder
from memory_core.providers.local_embedder import LocalSentenceTransformerEmbedder
from memory_core.providers.openai_embeddings import OpenAIEmbeddingProvider
from memory_core.providers.openai_llm import OpenAIChatProvider
from memory_core.providers.protocols import (
    EmbeddingProvider,
    LLMProvider,
    LLMResult,
    TokenUsage,
    strip_code_fences,
)

__all__ = [
    "HASHING_MODEL_NAME",
    "AnthropicChatProvider",
    "EmbeddingProvider",
    "HashingEmbedder",
    "LLMProvider",
    "LLMResult",
    "LocalSentenceTransformerEmbedder",
    "OpenAIChatProvider",
    "OpenAIEmbeddingProvider",
    "ProviderError",
    "ProviderRequestError",
    "ProviderResponseError",
    "RetryableProviderError",
    "TokenUsage",
    "build_embedding_provider",
    "build_llm_provider",
    "parse_retry_after",
    "strip_code_fences",
]
