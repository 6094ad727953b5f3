"""A scripted reranker: the LLM is the one part the read tests replace."""

from __future__ import annotations

import threading
import time

from memory_core.cognition.skill import SkillOutcome
from memory_core.read.rerank import RerankInput, RerankOutput, RerankScore


class ScriptedReranker:
    """Scores candidates by fact text (``default`` for texts not listed); optionally slow or failing."""

    def __init__(
        self,
        scores: dict[str, float],
        *,
        default: float | None = None,
        delay_s: float = 0.0,
        error: Exception | None = None,
    ) -> None:
        self.scores = scores
        self.default = default
        self.delay_s = delay_s
        self.error = error
        self.calls: list[RerankInput] = []
        self.finished = threading.Event()

    @property
    def name(self) -> str:
        """Skill name."""
        return "rerank"

    def run(self, skill_input: RerankInput, /) -> SkillOutcome[RerankOutput]:
        """Record the input and answer the script."""
        self.calls.append(skill_input)
        try:
            if self.delay_s:
                time.sleep(self.delay_s)
            if self.error is not None:
                raise self.error
            scores = []
            for candidate in skill_input.candidates:
                value = self.scores.get(candidate.text, self.default)
                if value is not None:
                    scores.append(RerankScore(id=candidate.id, score=value))
            return SkillOutcome(output=RerankOutput(scores=scores))
        finally:
            self.finished.set()
