"""What one request may ask of the LLM: per-request overrides bounded to what a single call needs.

:class:`memory_core.config.MemoryConfig` bounds a deployment's own settings (an operator may
give the reranker 120 s, or show it 5,000 candidates, and pays for it). A request's
``config_overrides`` come from any client holding a key, and with an LLM configured each
retrieve and message spends the deployment's provider budget: one client could ask for a 120 s
reranker call over 5,000 candidates per retrieve (issue 46). So an override may ask at most:

* :data:`MAX_RERANKER_TIMEOUT_S` for ``reranker_timeout_sec`` (the default is 5 s), and
  :data:`MAX_LLM_TIMEOUT_S` for any other LLM timeout (``extraction_timeout_sec``...);
* with an LLM configured and the reranker on, :data:`MAX_RERANK_CANDIDATES` candidates in the
  reranker's prompt (``topk_facts x reranker_candidate_multiplier``; the default is 20 x 2);
  without the reranker a request may still ask for up to 500 facts.

The texts a request sends are bounded elsewhere: the query by ``ARANDU_MAX_QUERY_BYTES``
(api.routes.retrieve), recent messages by :data:`MAX_RECENT_MESSAGES_BYTES` together
(api.schemas).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memory_core.config import MemoryConfig

__all__ = [
    "MAX_LLM_TIMEOUT_S",
    "MAX_RECENT_MESSAGES_BYTES",
    "MAX_RERANKER_TIMEOUT_S",
    "MAX_RERANK_CANDIDATES",
    "request_override_problems",
]

MAX_RERANKER_TIMEOUT_S = 15.0
MAX_LLM_TIMEOUT_S = 60.0
MAX_RERANK_CANDIDATES = 100
# A message's recent_messages together (UTF-8): context for its extraction, sent to the LLM.
MAX_RECENT_MESSAGES_BYTES = 16 * 1024

_RERANK_SIZE_KEYS = ("reranker_candidate_multiplier", "topk_facts", "enable_reranker")


def request_override_problems(
    config: MemoryConfig, overrides: Mapping[str, Any], *, llm_configured: bool
) -> list[tuple[str, str]]:
    """(key, message) for every override ``config`` (the request's effective config) takes past a request's bounds.

    Only keys the request overrides are judged: the deployment's own values stand.
    """
    problems: list[tuple[str, str]] = []
    for key in overrides:
        if not key.endswith("_timeout_sec") or key not in MemoryConfig.model_fields:
            continue
        limit = MAX_RERANKER_TIMEOUT_S if key == "reranker_timeout_sec" else MAX_LLM_TIMEOUT_S
        if float(getattr(config, key)) > limit:
            problems.append((key, f"a request may set at most {limit:g} seconds"))
    if llm_configured and config.enable_reranker and any(key in overrides for key in _RERANK_SIZE_KEYS):
        candidates = config.topk_facts * config.reranker_candidate_multiplier
        if candidates > MAX_RERANK_CANDIDATES:
            key = next(key for key in _RERANK_SIZE_KEYS if key in overrides)
            problems.append(
                (
                    key,
                    f"the reranker would see {candidates} candidates (topk_facts x reranker_candidate_multiplier); "
                    f"a request may ask for at most {MAX_RERANK_CANDIDATES}, or set enable_reranker to false",
                )
            )
    return problems
