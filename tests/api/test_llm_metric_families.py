"""The LLM families of /metrics built from one reading: invalid outputs from the ledger, usage from llm_usage."""

from __future__ import annotations

from api.metrics import ServiceReading, _ledger_families, _llm_usage_families
from memory_core.usage import UsageCounts
from workers.metrics_ledger import LedgerSnapshot


def _samples(families: list[object]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in families
        for sample in family.samples  # type: ignore[attr-defined]
    }


def test_invalid_outputs_count_unusable_llm_answers_by_skill_whatever_the_fallback() -> None:
    ledger = LedgerSnapshot(
        skill_calls={
            ("extract_informed", "llm", "ok"): 7,
            ("extract_informed", "llm", "invalid_output"): 2,
            ("summarize_entity", "llm", "fallback"): 3,
            ("summarize_entity", "offline", "ok"): 4,
            ("reconcile", "llm", "error"): 5,
        }
    )
    samples = _samples(list(_ledger_families(ServiceReading(ledger=ledger))))
    assert samples[("arandu_llm_invalid_outputs_total", (("skill", "extract_informed"),))] == 2
    assert samples[("arandu_llm_invalid_outputs_total", (("skill", "summarize_entity"),))] == 3
    assert ("arandu_llm_invalid_outputs_total", (("skill", "reconcile"),)) not in samples


def test_usage_families_have_one_series_per_skill_and_no_agent_label() -> None:
    reading = ServiceReading(llm_usage={"rerank": UsageCounts(calls=4, input_tokens=900, cached_input_tokens=512)})
    samples = _samples(list(_llm_usage_families(reading)))
    assert samples[("arandu_llm_calls_total", (("skill", "rerank"),))] == 4
    assert samples[("arandu_llm_input_tokens_total", (("skill", "rerank"),))] == 900
    assert samples[("arandu_llm_cached_input_tokens_total", (("skill", "rerank"),))] == 512
    assert {labels for _, labels in samples} == {(("skill", "rerank"),)}
