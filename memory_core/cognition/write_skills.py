"""The bundle of skills the write pipeline calls, built for the configured LLM or offline."""

from __future__ import annotations

from dataclasses import dataclass

from memory_core.cognition.directive_models import (
    ContradictionInput,
    ContradictionOutput,
    DirectiveDetectionInput,
    DirectiveDetectionOutput,
)
from memory_core.cognition.models import (
    BatchExtractionInput,
    BatchExtractionOutput,
    BatchReconcileInput,
    BatchReconcileOutput,
    DisambiguationInput,
    DisambiguationOutput,
    EmotionInput,
    EmotionOutput,
    ExtractionInput,
    ExtractionOutput,
    ReconcileInput,
    ReconcileOutput,
)
from memory_core.cognition.skill import Skill


@dataclass(frozen=True)
class WriteSkills:
    """Every skill of the write path; ``kind`` says which implementation ("llm" or "offline").

    ``extract_batch`` (informed extraction of several messages in one call) exists only where
    batching saves something: the LLM's. Without it every message is extracted on its own.
    Likewise ``reconcile_batch`` decides several new facts of one agent in one call.

    Procedural memory: ``detect_directives`` finds the behavioural instructions of a message
    where the extraction does not (offline; an LLM answers them inside the extraction call), and
    ``judge_directive`` decides whether a new directive contradicts a close existing one. Left
    ``None`` (scripted bundles of tests), the offline rule twins stand in.
    """

    kind: str
    extract_informed: Skill[ExtractionInput, ExtractionOutput]
    extract_blind: Skill[ExtractionInput, ExtractionOutput]
    disambiguate: Skill[DisambiguationInput, DisambiguationOutput]
    reconcile: Skill[ReconcileInput, ReconcileOutput]
    tag_emotion: Skill[EmotionInput, EmotionOutput]
    extract_batch: Skill[BatchExtractionInput, BatchExtractionOutput] | None = None
    reconcile_batch: Skill[BatchReconcileInput, BatchReconcileOutput] | None = None
    detect_directives: Skill[DirectiveDetectionInput, DirectiveDetectionOutput] | None = None
    judge_directive: Skill[ContradictionInput, ContradictionOutput] | None = None
