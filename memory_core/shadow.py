"""Hidden agent ids under which a re-process derives an agent's new memory (a "shadow").

A shadow id starts with ``~``, a character no agent id of the API may hold
(``api.schemas.AGENT_ID_PATTERN``), so no request and no API key can ever reach it. The places
that enumerate agents (Beat's maintenance fan-out, the agent search indexes, the explorer's
agent list) leave shadows out with :data:`SHADOW_LIKE`.
"""

from __future__ import annotations

import uuid

__all__ = ["SHADOW_LIKE", "SHADOW_PREFIX", "is_shadow_agent", "shadow_agent_id"]

SHADOW_PREFIX = "~reprocess:"
#: A ``LIKE`` pattern matching every shadow id (``~`` and ``:`` are not LIKE wildcards).
SHADOW_LIKE = SHADOW_PREFIX + "%"


def shadow_agent_id(reprocess_id: uuid.UUID | str) -> str:
    """The hidden agent id of a re-process's new memory."""
    return f"{SHADOW_PREFIX}{uuid.UUID(str(reprocess_id))}"


def is_shadow_agent(agent_id: str) -> bool:
    """Whether ``agent_id`` is a re-process's hidden agent."""
    return agent_id.startswith(SHADOW_PREFIX)
