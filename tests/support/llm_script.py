"""An OpenAI-compatible stub whose behaviour a test switches: answers, errors, garbage, silence, throttling."""

from __future__ import annotations

import json
import threading
from typing import Any

from tests.support.openai_stub import StubReply

GOOD_EXTRACTION = {
    "entities": [{"name": "Rafael", "type": "person"}, {"name": "Lisboa", "type": "place"}],
    "facts": [
        {
            "subject": "Rafael",
            "text": "Rafael mora em Lisboa",
            "attribute_key": "location.residence",
            "action": "NEW",
            "importance_category": "relationship_change",
            "confidence_level": "explicit_statement",
        }
    ],
    "relations": [{"source": "Rafael", "target": "Lisboa", "type": "lives_in"}],
    "updated_profiles": {"Rafael": "Rafael lives in Lisbon."},
    "emotion": {"emotion": "calm", "intensity": 0.2, "energy": "low"},
}


class LLMBehaviour:
    """``chat_handler`` for :class:`OpenAIStub`: ``mode`` is one of ok, error, invalid_json, timeout, rate_limit.

    ``refuse_next`` answers that many calls 429 with ``Retry-After: 0`` first, whatever the mode.
    """

    def __init__(self, mode: str = "ok", *, timeout_delay_s: float = 3.0) -> None:
        self.mode = mode
        self.timeout_delay_s = timeout_delay_s
        self.refuse_next = 0
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> StubReply:
        system = next((m.get("content", "") for m in body.get("messages", []) if m.get("role") == "system"), "")
        skill = self._skill(system)
        with self._lock:
            self.calls[skill] = self.calls.get(skill, 0) + 1
            refuse = self.refuse_next > 0
            self.refuse_next -= int(refuse)
        if refuse:
            return StubReply.error(429, "slow down", headers={"Retry-After": "0"})
        if self.mode == "error":
            return StubReply.error(500, "the model server fell over")
        if self.mode == "rate_limit":
            return StubReply.error(429, "slow down", headers={"Retry-After": "0"})
        if self.mode == "invalid_json":
            return StubReply.text("Sure! Here are the facts you asked for: Rafael lives somewhere.")
        if self.mode == "timeout":
            return StubReply.slow(self.timeout_delay_s, "{}")
        return StubReply.text(json.dumps(self._answer(skill)))

    @staticmethod
    def _skill(system: str) -> str:
        lowered = system.lower()
        if lowered.startswith("you turn one chat message"):
            return "informed"
        if lowered.startswith("you tag the emotional tone"):
            return "emotion"
        if lowered.startswith("you list the entities"):
            return "scan"
        if "relation" in lowered and "facts" not in lowered.split("relation", 1)[0][-40:]:
            return "blind_other"
        return "other"

    @staticmethod
    def _answer(skill: str) -> dict[str, Any]:
        if skill == "emotion":
            return {"emotion": "joy", "intensity": 0.4, "energy": "medium"}
        if skill == "informed":
            return GOOD_EXTRACTION
        if skill == "scan":
            return {"entities": GOOD_EXTRACTION["entities"]}
        return {"facts": [], "relations": [], "action": "ADD", "match": None}
