"""Outages under load, at the suite's size (``ops/chaos --quick``): a stack of its own, real faults.

The stack (API, worker pools, Beat, Flower) runs on embedded PostgreSQL and Redis in a home of
its own (:class:`ops.bench.common.BenchStack`), never on the session's servers, which the other
tests share: those are the ones stopped and restarted here.
"""

from __future__ import annotations

import pytest

from ops.chaos import QUICK, Outcome, run_scenarios


@pytest.fixture(scope="module")
def outcomes() -> dict[str, Outcome]:
    return {outcome.scenario: outcome for outcome in run_scenarios(QUICK)}


def _no_500(outcome: Outcome) -> None:
    errors = {code: count for code, count in outcome.answers.items() if code.startswith("5") and code != "503"}
    assert not errors, f"{outcome.scenario}: server errors {errors}"


@pytest.mark.parametrize("scenario", ["redis", "postgres", "kill+429"])
def test_every_accepted_message_is_processed_once_and_memory_is_as_undisturbed(
    outcomes: dict[str, Outcome], scenario: str
) -> None:
    outcome = outcomes[scenario]
    _no_500(outcome)
    assert outcome.accepted == outcome.sent, outcome
    assert (outcome.done, outcome.lost, outcome.failed, outcome.duplicated) == (outcome.accepted, 0, 0, 0), outcome
    # Entities by name: two undisturbed runs of the offline skills may type a name differently
    # (organization:shopify / person:shopify; ops/chaos's "baseline" scenario), faults or not.
    assert outcome.memory_equal_untyped, outcome.differences[:5]


def test_postgres_down_answers_503_with_retry_after(outcomes: dict[str, Outcome]) -> None:
    answers = outcomes["postgres"].answers
    assert answers["503"] > 0, answers
    assert "503 without Retry-After" not in answers, answers


def test_no_process_died_on_broker_or_database_loss(outcomes: dict[str, Outcome]) -> None:
    assert outcomes["redis"].restarts == 0
    assert outcomes["postgres"].restarts == 0
