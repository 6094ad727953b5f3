"""Context compression (R10): sections, proportional budget, tiers, broad layout. Pure."""

from __future__ import annotations

from datetime import UTC, datetime

from memory_core.config import MemoryConfig
from memory_core.read.compress import (
    ClusterInfo,
    ContextEvent,
    ContextFact,
    ContextPattern,
    compress_broad_context,
    compress_context,
    estimate_tokens,
    fresh_first,
)

CONFIG = MemoryConfig()
DAY = datetime(2026, 3, 28, 15, 30, tzinfo=UTC)


def _facts(*texts: str) -> list[ContextFact]:
    return [ContextFact(text=text, score=1.0 - i / 100) for i, text in enumerate(texts)]


def test_the_seed_layout() -> None:
    compressed = compress_context(
        _facts("Lives in Sao Paulo", "Works at Acme Corp as a backend engineer", "Wife's name is Ana"),
        [
            ContextEvent(
                text="Had a great meeting with the product team about the roadmap", occurred_at=DAY, speaker="Rafael"
            )
        ],
        CONFIG,
        patterns=[ContextPattern(text="Prefers working late at night")],
    )
    assert compressed.context_text == (
        "Known facts:\n"
        "- Lives in Sao Paulo\n"
        "- Works at Acme Corp as a backend engineer\n"
        "- Wife's name is Ana\n"
        "\n"
        "Observed patterns:\n"
        "- Prefers working late at night\n"
        "\n"
        "Relevant conversations:\n"
        "- (2026-03-28) Rafael: Had a great meeting with the product team about the roadmap"
    )
    assert compressed.sections == ["Known facts:", "Observed patterns:", "Relevant conversations:"]
    assert (compressed.hot_count, compressed.warm_count, compressed.cold_count) == (3, 0, 2)
    assert compressed.total_tokens == estimate_tokens(compressed.context_text)


def test_empty_sections_are_left_out_and_nothing_gives_an_empty_context() -> None:
    assert compress_context([], [], CONFIG).context_text == ""
    only_facts = compress_context(_facts("A fact"), [], CONFIG)
    assert only_facts.context_text == "Known facts:\n- A fact"


def test_events_are_cut_to_300_characters_with_their_date_in_the_configured_zone() -> None:
    event = ContextEvent(text="word " * 200, occurred_at=datetime(2026, 3, 28, 23, 30, tzinfo=UTC))
    compressed = compress_context([], [event], CONFIG.model_copy(update={"timezone": "Asia/Tokyo"}))
    line = compressed.context_text.splitlines()[1]
    assert line.startswith("- (2026-03-29) word word")
    assert line.endswith("...")
    assert len(line) == len("- (2026-03-29) ") + 300


def test_budget_is_proportional_with_hot_warm_and_cold_tiers() -> None:
    config = CONFIG.model_copy(update={"context_max_tokens": 100})  # 400 characters
    facts = _facts(*(f"fact number {i} " + "x" * 60 for i in range(20)))
    events = [ContextEvent(text=f"event {i} " + "y" * 30, occurred_at=DAY) for i in range(5)]
    compressed = compress_context(facts, events, config)
    text = compressed.context_text
    assert compressed.hot_count >= 1
    assert compressed.warm_count >= 1
    assert compressed.hot_count + compressed.warm_count < 20
    assert compressed.omitted_facts == 20 - compressed.hot_count - compressed.warm_count
    assert 0 < compressed.cold_count < 5
    # A target, not a hard cap, but close to it.
    assert len(text) <= 400 * 1.2
    assert text.index("- fact number 0 ") < text.index("- fact number 1 ")


def test_warm_facts_are_summarised() -> None:
    config = CONFIG.model_copy(update={"context_max_tokens": 100, "hot_tier_ratio": 0.1, "warm_tier_ratio": 0.8})
    long_text = "a long fact " * 30
    compressed = compress_context(_facts(long_text, long_text + "again"), [], config)
    lines = compressed.context_text.splitlines()
    assert lines[1] == "- " + long_text.strip()  # the best fact is always whole
    assert lines[2].endswith("...")
    assert len(lines[2]) <= 2 + 160


def test_the_best_fact_is_kept_whatever_its_length() -> None:
    config = CONFIG.model_copy(update={"context_max_tokens": 5})
    compressed = compress_context(_facts("z" * 1000), [], config)
    assert compressed.hot_count == 1
    assert "z" * 1000 in compressed.context_text


def test_unused_fact_budget_goes_to_conversations() -> None:
    config = CONFIG.model_copy(update={"context_max_tokens": 200})  # cold share alone: 160 chars
    events = [ContextEvent(text=f"event {i} " + "y" * 90, occurred_at=DAY) for i in range(6)]
    compressed = compress_context(_facts("short"), events, config)
    assert compressed.cold_count == 6


def test_broad_context_is_cluster_first() -> None:
    facts = [
        ContextFact(text="Rafael works at Acme", score=0.9, cluster_id="work"),
        ContextFact(text="Rafael lives in Lisbon", score=0.8, cluster_id=None),
        ContextFact(text="Rafael leads the data team", score=0.7, cluster_id="work"),
    ]
    clusters = [ClusterInfo(cluster_id="work", label="Work", summary_text="Rafael is an engineer at Acme.")]
    compressed = compress_broad_context(facts, clusters, [], CONFIG)
    assert compressed.context_text == (
        "Known facts:\n"
        "- Work: Rafael is an engineer at Acme.\n"
        "  - Rafael works at Acme\n"
        "  - Rafael leads the data team\n"
        "- Rafael lives in Lisbon"
    )
    assert compressed.hot_count == 3
    # Without clusters it is the ordinary layout.
    assert (
        compress_broad_context(facts, [], [], CONFIG).context_text == compress_context(facts, [], CONFIG).context_text
    )


def test_a_reply_is_shown_under_its_parent_and_only_with_it() -> None:
    events = [
        ContextEvent(text="What did you research?", occurred_at=DAY),
        ContextEvent(text="Adoption agencies.", occurred_at=DAY, reply=True),
        ContextEvent(text="long " + "x" * 400, occurred_at=DAY),
        ContextEvent(text="A reply to the long one.", occurred_at=DAY, reply=True),
        ContextEvent(text="Anything new?", occurred_at=DAY),
        ContextEvent(text="Not really.", occurred_at=DAY, reply=True),
    ]
    # The cold tier fits the short pairs but not the long message: its reply goes with it.
    config = CONFIG.model_copy(update={"context_max_tokens": 60, "context_event_max_chars": 0})
    compressed = compress_context([], events, config)
    assert compressed.context_text == (
        "Relevant conversations:\n"
        "- (2026-03-28) What did you research?\n"
        "  - reply: Adoption agencies.\n"
        "- (2026-03-28) Anything new?\n"
        "  - reply: Not really."
    )
    assert compressed.cold_count == 4
    # A reply whose parent has no text is not shown on its own.
    blank = [ContextEvent(text="  ", occurred_at=DAY), ContextEvent(text="Orphan.", occurred_at=DAY, reply=True)]
    assert compress_context([], blank, CONFIG).context_text == ""


def test_a_fact_said_in_a_shown_message_is_not_repeated_and_its_room_goes_to_the_next() -> None:
    facts = [
        ContextFact(text="Caroline went to a support group", score=0.9, source_event_id="e1"),
        ContextFact(text="Caroline likes hiking", score=0.8, source_event_id="e2"),
        ContextFact(text="Caroline has a dog", score=0.7),
    ]
    events = [ContextEvent(text="I went to a support group yesterday", occurred_at=DAY, event_id="e1")]

    compressed = compress_context(facts, events, CONFIG)

    assert "Caroline went to a support group" not in compressed.context_text
    assert "- Caroline likes hiking\n- Caroline has a dog" in compressed.context_text
    assert "- (2026-03-28) I went to a support group yesterday" in compressed.context_text
    assert compressed.hot_count == 2


def test_a_fact_whose_message_did_not_fit_the_budget_stays() -> None:
    config = MemoryConfig(context_max_tokens=60)
    facts = [ContextFact(text="Caroline went to a support group", score=0.9, source_event_id="e1")]
    # The message is too long for what the facts leave of the budget: it is cut, so the fact must stay.
    events = [ContextEvent(text="word " * 400, occurred_at=DAY, event_id="e1")]

    compressed = compress_context(facts, events, config)

    assert "Relevant conversations:" not in compressed.context_text
    assert "- Caroline went to a support group" in compressed.context_text


def test_stale_facts_go_after_fresh_ones_by_context_stale_threshold_days() -> None:
    now = datetime(2026, 6, 1, tzinfo=UTC)
    old = ContextFact("Marina lived in Lisbon.", 0.9, valid_from=datetime(2025, 1, 1, tzinfo=UTC))
    recent = ContextFact("Marina lives in Porto.", 0.5, valid_from=datetime(2026, 5, 20, tzinfo=UTC))
    undated = ContextFact("Marina likes jazz.", 0.4)

    # 90 days (the default): the old fact is stale and listed last, the others keep their order.
    config = MemoryConfig()
    ordered = fresh_first([old, recent, undated], now, config.context_stale_threshold_days)
    assert [fact.text for fact in ordered] == [recent.text, undated.text, old.text]
    context = compress_context(ordered, [], config).context_text
    assert context.index("Porto") < context.index("Lisbon")

    # A longer threshold keeps the ranking; so does a memory whose facts are all stale.
    assert fresh_first([old, recent, undated], now, 3650) == [old, recent, undated]
    assert fresh_first([old], now, 90) == [old]
