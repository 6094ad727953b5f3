"""The offline WriteSkills bundle: every skill present, typed, named like its LLM twin, free."""

from __future__ import annotations

from memory_core.cognition.offline import build_offline_write_skills
from memory_core.cognition.skill import Skill


def test_bundle() -> None:
    skills = build_offline_write_skills()
    assert skills.kind == "offline"
    names = {
        skills.extract_informed.name,
        skills.extract_blind.name,
        skills.disambiguate.name,
        skills.reconcile.name,
        skills.tag_emotion.name,
    }
    assert names == {"extract_informed", "extract_blind", "disambiguate", "reconcile", "tag_emotion"}
    for skill in (
        skills.extract_informed,
        skills.extract_blind,
        skills.disambiguate,
        skills.reconcile,
        skills.tag_emotion,
    ):
        assert isinstance(skill, Skill)
        assert "LLM" not in type(skill).__name__


def test_docstrings_say_they_are_rules() -> None:
    from memory_core.cognition import offline
    from memory_core.cognition.offline import disambiguation, emotion, extraction, reconciliation

    for module in (offline, extraction, disambiguation, reconciliation, emotion):
        assert module.__doc__ is not None
        assert "not an LLM" in module.__doc__ or "not a language model" in module.__doc__
