"""Offline emotion tagging from a small English/Portuguese lexicon."""

from __future__ import annotations

import pytest

from memory_core.cognition.models import EmotionInput, EmotionOutput
from memory_core.cognition.offline.emotion import OfflineEmotionSkill


def _tag(text: str) -> EmotionOutput:
    outcome = OfflineEmotionSkill().run(EmotionInput(text=text))
    assert outcome.usage.is_zero
    return outcome.output


def test_intense_joy_with_exclamation() -> None:
    output = _tag("Estou muito feliz hoje!")
    assert output.emotion == "joy"
    assert output.intensity > 0.5
    assert output.energy == "high"


@pytest.mark.parametrize("text", ["The meeting is at 3pm.", "Moro em Lisboa.", ""])
def test_neutral(text: str) -> None:
    assert _tag(text) == EmotionOutput(emotion="neutral", intensity=0.0, energy="medium")


@pytest.mark.parametrize(
    ("text", "emotion", "energy"),
    [
        ("I'm so sad today", "sadness", "low"),
        ("Que saudade da minha mãe", "sadness", "low"),
        ("Estou com muita raiva!!", "anger", "high"),
        ("I'm really worried about the exam", "fear", "medium"),
        ("Estou ansioso com a entrevista", "fear", "medium"),
        ("Wow, I'm so surprised!", "surprise", "high"),
        ("I'm exhausted", "tiredness", "low"),
        ("Estou cansada", "tiredness", "low"),
    ],
)
def test_lexicon(text: str, emotion: str, energy: str) -> None:
    output = _tag(text)
    assert (output.emotion, output.energy) == (emotion, energy)
    assert 0.0 < output.intensity <= 1.0


def test_intensifiers_and_exclamations_raise_intensity() -> None:
    plain = _tag("I am happy")
    stronger = _tag("I am very happy!!!")
    assert stronger.intensity > plain.intensity


def test_negated_joy_is_not_joy() -> None:
    assert _tag("I'm not happy with this").emotion == "sadness"
    assert _tag("Não estou preocupado").emotion == "neutral"
