"""Offline disambiguation: name rules pick a candidate or declare a new entity."""

from __future__ import annotations

import pytest

from memory_core.cognition.models import DisambiguationInput, EntityCandidate
from memory_core.cognition.offline.disambiguation import OfflineDisambiguationSkill


def _candidate(key: str, name: str, similarity: float, entity_type: str = "person") -> EntityCandidate:
    return EntityCandidate(canonical_key=key, display_name=name, entity_type=entity_type, similarity=similarity)


def _choose(mention: str, candidates: list[EntityCandidate], mention_type: str = "person") -> str | None:
    outcome = OfflineDisambiguationSkill().run(
        DisambiguationInput(mention=mention, mention_type=mention_type, message="...", candidates=candidates)
    )
    assert outcome.usage.is_zero
    assert outcome.output.reason
    return outcome.output.match


def test_diminutive_picks_the_full_name() -> None:
    candidates = [
        _candidate("person:marcos", "Marcos", 0.7),
        _candidate("person:carolina_souza", "Carolina Souza", 0.6),
    ]
    assert _choose("Carol", candidates) == "person:carolina_souza"


def test_unrelated_mention_is_a_new_entity() -> None:
    candidates = [
        _candidate("person:marcos", "Marcos", 0.7),
        _candidate("person:carolina_souza", "Carolina Souza", 0.6),
    ]
    assert _choose("Pedro", candidates) is None


@pytest.mark.parametrize(
    ("mention", "name"),
    [
        ("Guili", "Guilherme Maturana"),
        ("Souza", "Carolina Souza"),
        ("Rafa", "Rafael Lima"),
        ("joao", "João"),
        ("JULIA MENDES", "Júlia Mendes"),
    ],
)
def test_rules_that_match(mention: str, name: str) -> None:
    assert _choose(mention, [_candidate("person:x", name, 0.55)]) == "person:x"


def test_a_short_shared_prefix_is_not_enough() -> None:
    assert _choose("Marta", [_candidate("person:marcos", "Marcos", 0.8)]) is None
    assert _choose("Jo", [_candidate("person:joao", "João", 0.8)]) is None


def test_highest_similarity_wins_among_qualifying_candidates() -> None:
    candidates = [
        _candidate("person:carolina_souza", "Carolina Souza", 0.6),
        _candidate("person:carol_lima", "Carol Lima", 0.8),
    ]
    assert _choose("Carol", candidates) == "person:carol_lima"
    assert _choose("Carol", list(reversed(candidates))) == "person:carol_lima"


def test_types_must_agree() -> None:
    assert _choose("Orion", [_candidate("organization:orion_tech", "Orion Tech", 0.7, "organization")]) is None
    assert (
        _choose("Orion", [_candidate("organization:orion_tech", "Orion Tech", 0.7, "organization")], "organization")
        == "organization:orion_tech"
    )


def test_prefixes_only_for_people() -> None:
    candidate = _candidate("organization:vertical", "Vertical Labs", 0.7, "organization")
    assert _choose("Vertix", [candidate], "organization") is None
