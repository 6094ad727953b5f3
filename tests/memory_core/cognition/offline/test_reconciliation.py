"""Offline reconciliation: slot, duplicate and retraction rules, independent of input order."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

from memory_core.cognition.models import ExistingFact, ReconcileInput, ReconcileOutput
from memory_core.cognition.offline.reconciliation import OfflineReconcileSkill

_WHEN = datetime(2025, 6, 15, tzinfo=UTC)


def _fact(fact_id: str, text: str, key: str | None = None, similarity: float = 0.6) -> ExistingFact:
    return ExistingFact(fact_id=fact_id, text=text, attribute_key=key, valid_from=_WHEN, similarity=similarity)


def _decide(text: str, key: str | None, existing: list[ExistingFact]) -> ReconcileOutput:
    outcome = OfflineReconcileSkill().run(
        ReconcileInput(
            entity_key="person:rafael",
            entity_name="Rafael",
            new_text=text,
            new_attribute_key=key,
            new_valid_from=_WHEN,
            existing=existing,
        )
    )
    assert outcome.usage.is_zero
    assert outcome.output.reason
    return outcome.output


def test_residence_change_updates_the_old_residence() -> None:
    existing = [
        _fact("f1", "Rafael mora em São Paulo.", "location.residence", 0.72),
        _fact("f2", "Rafael gosta de jazz.", "preference.like", 0.3),
    ]
    decision = _decide("Rafael se mudou para o Rio de Janeiro.", "location.residence", existing)
    assert (decision.action, decision.target_fact_id) == ("UPDATE", "f1")


def test_exact_duplicate_is_a_noop() -> None:
    existing = [_fact("f1", "Rafael mora em São Paulo.", "location.residence", 0.99)]
    decision = _decide("rafael mora em sao paulo", "location.residence", existing)
    assert (decision.action, decision.target_fact_id) == ("NOOP", "f1")


def test_near_duplicate_is_a_noop() -> None:
    existing = [_fact("f1", "Rafael loves jazz music.", "preference.like", 0.95)]
    decision = _decide("Rafael really loves jazz music.", "preference.like", existing)
    assert (decision.action, decision.target_fact_id) == ("NOOP", "f1")


def test_unrelated_fact_is_added() -> None:
    existing = [_fact("f1", "Rafael mora em São Paulo.", "location.residence", 0.55)]
    decision = _decide("Rafael fala francês.", None, existing)
    assert decision.action == "ADD"
    assert decision.target_fact_id is None


def test_multi_valued_keys_do_not_replace_each_other() -> None:
    existing = [_fact("f1", "Rafael gosta de jazz.", "preference.like", 0.7)]
    assert _decide("Rafael gosta de futebol.", "preference.like", existing).action == "ADD"


def test_retraction_updates_the_same_slot() -> None:
    existing = [
        _fact("f1", "Rafael gosta de jazz.", "preference.like", 0.93),
        _fact("f2", "Rafael gosta de rock.", "preference.like", 0.6),
    ]
    decision = _decide("Rafael não gosta mais de jazz.", "preference.like", existing)
    assert (decision.action, decision.target_fact_id) == ("UPDATE", "f1")
    english = _decide("Rafael no longer likes jazz.", "preference.like", existing)
    assert english.action == "UPDATE"


def test_a_retraction_does_not_end_a_different_like() -> None:
    existing = [_fact("f1", "Rafael likes rock.", "preference.like", 0.52)]
    assert _decide("Rafael no longer likes jazz.", "preference.like", existing).action == "ADD"


def test_a_statement_and_the_retraction_of_it_are_paired_whichever_comes_first() -> None:
    # The hashing embedder drops "não" and "mais": the two read as identical, yet are opposites.
    existing = [_fact("f1", "Rafael não gosta mais de café.", "preference.like", 1.0)]
    decision = _decide("Rafael gosta de café.", "preference.like", existing)
    assert (decision.action, decision.target_fact_id) == ("UPDATE", "f1")
    retraction = [_fact("f2", "Rafael gosta de café.", "preference.like", 1.0)]
    decision = _decide("Rafael não gosta mais de café.", "preference.like", retraction)
    assert (decision.action, decision.target_fact_id) == ("UPDATE", "f2")


def test_a_retraction_is_never_a_near_duplicate_of_what_it_ends() -> None:
    existing = [_fact("f1", "Rafael gosta de café.", None, 0.99)]
    assert _decide("Rafael não gosta mais de café.", None, existing).action == "ADD"


def test_order_of_existing_does_not_change_the_decision() -> None:
    existing = [
        _fact("f3", "Rafael works at Acme.", "work.employer", 0.7),
        _fact("f1", "Rafael works at Initech.", "work.employer", 0.7),
        _fact("f2", "Rafael lives in Berlin.", "location.residence", 0.5),
    ]
    decisions = {
        (decision.action, decision.target_fact_id)
        for permutation in itertools.permutations(existing)
        for decision in [_decide("Rafael works at Globex.", "work.employer", list(permutation))]
    }
    assert decisions == {("UPDATE", "f1")}


def test_no_existing_facts_means_add() -> None:
    assert _decide("Rafael mora em Lisboa.", "location.residence", []).action == "ADD"
