"""Stage 5 of retrieval: the token-budgeted context string (seeds R10), pure functions.

Layout (seeds/000 "Formato de Output")::

    Known facts:
    - Lives in Sao Paulo
    ...

    Observed patterns:
    - Prefers working late at night

    Relevant conversations:
    - (2026-03-28) Rafael: Had a great meeting with the product team about the roadmap...
      - reply: Ana: Great! What did they decide about the launch?

Facts are plain: no timestamps, no entity prefix, no speaker, no qualifiers. Entity profiles are
never injected. Empty sections are left out.

Budget: ``context_max_tokens`` x ``chars_per_token`` characters, shared proportionally:

* hot tier (``hot_tier_ratio``, 0.50): the best facts, full text;
* warm tier (``warm_tier_ratio``, 0.30): the next facts, summarised (cut to one short line);
* cold tier (the rest, 0.20): observed patterns and relevant conversations (events up to 300
  characters, with their date and speaker; a reply retrieval added as context goes indented under
  the message it answers, and only with it). A fact said in a message the context shows is not
  listed among the facts too: the message says it, with who said it and when (the seeds show no
  speaker: their memory is one user's; a conversation's "I" needs its name).

Stale facts (``context_stale_threshold_days``, 90 by default, seeds' ``stale_threshold_days``):
a fact that became valid longer ago than that is listed after every fresher fact
(:func:`fresh_first`), so the hot tier's full lines go to what is current and what may be outdated
takes the warm tier's short lines or is left out. When every fact is stale (a memory of old
conversations) the order is the ranking's.

It is a proportional target, not a hard cap (seeds): the best fact is always included whatever
its length, and budget a tier does not use flows to the others (cold first lends its spare share
to the facts; whatever the facts leave goes to the cold tier). Broad queries ("tell me
everything") are laid out cluster-first: each cluster's summary, then its facts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo

from memory_core.config import MemoryConfig

__all__ = [
    "ClusterInfo",
    "CompressedContext",
    "ContextEvent",
    "ContextFact",
    "ContextPattern",
    "compress_broad_context",
    "compress_context",
    "estimate_tokens",
    "fresh_first",
]

# Warm-tier facts are summarised to this many characters.
WARM_FACT_MAX_CHARS = 160
# Observed patterns are cut to this many characters.
PATTERN_MAX_CHARS = 300
_ELLIPSIS = "..."


@dataclass(frozen=True, slots=True)
class ContextFact:
    """A ranked fact as the context shows it."""

    text: str
    score: float
    cluster_id: str | None = None
    # The message the fact was said in: left out of the facts when that message is shown.
    source_event_id: str | None = None
    # When the fact became valid: older than context_stale_threshold_days, it is stale.
    valid_from: datetime | None = None


@dataclass(frozen=True, slots=True)
class ContextEvent:
    """A past message for "Relevant conversations"."""

    text: str
    occurred_at: datetime
    # The reply to the event listed before it (retrieval's reply context): shown under it.
    reply: bool = False
    event_id: str | None = None
    # Who said it: in a conversation of several people, "I went there" means nothing without it.
    speaker: str | None = None


@dataclass(frozen=True, slots=True)
class ContextPattern:
    """A meta-observation for "Observed patterns"."""

    text: str


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """A fact cluster: its label and summary, for cluster-first (broad) context."""

    cluster_id: str
    label: str
    summary_text: str | None = None


@dataclass
class CompressedContext:
    """The context string and how it was filled."""

    context_text: str
    hot_count: int = 0
    warm_count: int = 0
    cold_count: int = 0
    total_tokens: int = 0
    omitted_facts: int = 0
    sections: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        """JSON-friendly form for the trace."""
        return {
            "hot_count": self.hot_count,
            "warm_count": self.warm_count,
            "cold_count": self.cold_count,
            "omitted_facts": self.omitted_facts,
            "total_tokens": self.total_tokens,
            "sections": list(self.sections),
        }


def estimate_tokens(text: str, chars_per_token: int = 4) -> int:
    """Rough token count: characters / 4, rounded up."""
    return math.ceil(len(text) / max(1, chars_per_token))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cut(text: str, limit: int) -> str:
    flat = _one_line(text)
    if limit <= 0 or len(flat) <= limit:
        return flat
    return flat[: max(0, limit - len(_ELLIPSIS))].rstrip() + _ELLIPSIS


# A reply's line starts with this: indented under its parent, whose date it shares in practice.
_REPLY_PREFIX = "  - reply: "


def _event_line(event: ContextEvent, max_chars: int, zone: tzinfo) -> str:
    said = _cut(event.text, max_chars)
    speaker = _one_line(event.speaker or "")
    if speaker:
        said = f"{speaker}: {said}"
    if event.reply:
        return f"{_REPLY_PREFIX}{said}"
    moment = event.occurred_at if event.occurred_at.tzinfo else event.occurred_at.replace(tzinfo=UTC)
    return f"- ({moment.astimezone(zone).date().isoformat()}) {said}"


@dataclass
class _Budget:
    hot: int
    warm: int
    cold: int


def _budget(config: MemoryConfig, cold_demand: int) -> _Budget:
    total = config.context_max_tokens * config.chars_per_token
    hot = int(total * config.hot_tier_ratio)
    warm = int(total * config.warm_tier_ratio)
    cold = max(0, total - hot - warm)
    spare_cold = max(0, cold - cold_demand)
    return _Budget(hot=hot + spare_cold, warm=warm, cold=cold - spare_cold)


def _fill_cold(lines: Sequence[str], budget: int) -> list[bool]:
    """Which ``lines`` fit in ``budget``, in order; a reply line only fits after its parent did."""
    kept: list[bool] = []
    used = 0
    parent_kept = False
    for line in lines:
        cost = len(line) + 1
        is_reply = line.startswith(_REPLY_PREFIX)
        fits = used + cost <= budget and (parent_kept or not is_reply)
        if not is_reply:
            parent_kept = fits
        kept.append(fits)
        if fits:
            used += cost
    return kept


def _assemble(fact_lines: list[str], pattern_lines: list[str], event_lines: list[str]) -> tuple[str, list[str]]:
    blocks: list[str] = []
    sections: list[str] = []
    for title, lines in (
        ("Known facts:", fact_lines),
        ("Observed patterns:", pattern_lines),
        ("Relevant conversations:", event_lines),
    ):
        if lines:
            blocks.append("\n".join([title, *lines]))
            sections.append(title)
    return "\n\n".join(blocks), sections


def _cold_lines(
    patterns: Sequence[ContextPattern], events: Sequence[ContextEvent], config: MemoryConfig
) -> tuple[list[str], list[str], list[str | None]]:
    """The patterns' and events' lines, and the event id of each event line."""
    pattern_lines = [f"- {_cut(p.text, PATTERN_MAX_CHARS)}" for p in patterns if p.text.strip()]
    event_lines: list[str] = []
    event_ids: list[str | None] = []
    shown_parent = False
    for event in events:
        if event.reply:
            # A reply whose parent is not shown would read as a message of its own: it goes with it.
            if not shown_parent or not event.text.strip():
                continue
        else:
            shown_parent = bool(event.text.strip())
            if not shown_parent:
                continue
        event_lines.append(_event_line(event, config.context_event_max_chars, config.tz))
        event_ids.append(event.event_id)
    return pattern_lines, event_lines, event_ids


def _split_cold(
    pattern_lines: list[str], event_lines: list[str], budget: int, event_ids: Sequence[str | None] = ()
) -> tuple[list[str], list[str], set[str]]:
    """The pattern and event lines that fit ``budget``, and the ids of the events kept."""
    kept = _fill_cold([*pattern_lines, *event_lines], budget)
    count = len(pattern_lines)
    shown = {event_id for event_id, fits in zip(event_ids, kept[count:], strict=False) if fits and event_id}
    return (
        [line for line, fits in zip(pattern_lines, kept[:count], strict=True) if fits],
        [line for line, fits in zip(event_lines, kept[count:], strict=True) if fits],
        shown,
    )


def _finish(
    fact_lines: list[str],
    pattern_lines: list[str],
    event_lines: list[str],
    *,
    hot: int,
    warm: int,
    omitted: int,
    config: MemoryConfig,
) -> CompressedContext:
    text, sections = _assemble(fact_lines, pattern_lines, event_lines)
    return CompressedContext(
        context_text=text,
        hot_count=hot,
        warm_count=warm,
        cold_count=len(pattern_lines) + len(event_lines),
        total_tokens=estimate_tokens(text, config.chars_per_token),
        omitted_facts=omitted,
        sections=sections,
    )


def fresh_first(facts: Sequence[ContextFact], now: datetime, stale_after_days: int) -> list[ContextFact]:
    """``facts`` (best first) with the stale ones moved after the others, each group in its order.

    Stale: valid since more than ``stale_after_days`` days before ``now``; a fact without a date
    is fresh.
    """
    cutoff = now - timedelta(days=stale_after_days)
    fresh: list[ContextFact] = []
    stale: list[ContextFact] = []
    for fact in facts:
        moment = fact.valid_from
        if moment is not None and moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        (stale if moment is not None and moment < cutoff else fresh).append(fact)
    return [*fresh, *stale] if fresh and stale else list(facts)


def compress_context(
    facts: Sequence[ContextFact],
    events: Sequence[ContextEvent],
    config: MemoryConfig,
    *,
    patterns: Sequence[ContextPattern] = (),
) -> CompressedContext:
    """The tiered context of ranked ``facts`` (best first), ``patterns`` and ``events``.

    A fact said in a message the context shows under "Relevant conversations" is not listed
    among the facts too: the message says it, with its speaker and date, and the room goes to
    the next facts.
    """
    context, shown = _compress_once(facts, events, config, patterns)
    repeated = [fact for fact in facts if fact.source_event_id is not None and fact.source_event_id in shown]
    if not repeated:
        return context
    said_elsewhere = [fact for fact in facts if fact.source_event_id is None or fact.source_event_id not in shown]
    context, _ = _compress_once(said_elsewhere, events, config, patterns)
    return context


def _compress_once(
    facts: Sequence[ContextFact],
    events: Sequence[ContextEvent],
    config: MemoryConfig,
    patterns: Sequence[ContextPattern],
) -> tuple[CompressedContext, set[str]]:
    """:func:`compress_context` without leaving out repeated facts; also the ids of the events shown."""
    pattern_lines, event_lines, event_ids = _cold_lines(patterns, events, config)
    cold_demand = sum(len(line) + 1 for line in [*pattern_lines, *event_lines])
    budget = _budget(config, cold_demand)

    fact_lines: list[str] = []
    hot_used = warm_used = 0
    hot_count = warm_count = 0
    in_warm = False
    for fact in facts:
        if not fact.text.strip():
            continue
        if not in_warm:
            line = f"- {_one_line(fact.text)}"
            # The best fact always goes in: the seeds guarantee a minimum context for facts.
            if not fact_lines or hot_used + len(line) + 1 <= budget.hot:
                fact_lines.append(line)
                hot_used += len(line) + 1
                hot_count += 1
                continue
            in_warm = True
        line = f"- {_cut(fact.text, WARM_FACT_MAX_CHARS)}"
        if warm_used + len(line) + 1 > budget.warm + max(0, budget.hot - hot_used):
            break
        fact_lines.append(line)
        warm_used += len(line) + 1
        warm_count += 1

    spare = max(0, budget.hot + budget.warm - hot_used - warm_used)
    pattern_lines, event_lines, shown = _split_cold(pattern_lines, event_lines, budget.cold + spare, event_ids)
    omitted = sum(1 for fact in facts if fact.text.strip()) - hot_count - warm_count
    context = _finish(
        fact_lines,
        pattern_lines,
        event_lines,
        hot=hot_count,
        warm=warm_count,
        omitted=omitted,
        config=config,
    )
    return context, shown


def compress_broad_context(
    facts: Sequence[ContextFact],
    clusters: Sequence[ClusterInfo],
    events: Sequence[ContextEvent],
    config: MemoryConfig,
    *,
    patterns: Sequence[ContextPattern] = (),
) -> CompressedContext:
    """Cluster-first context for broad queries: each cluster's summary, then its facts, then the rest.

    Clusters come in the order of their best fact; facts without a known cluster follow. Without
    any cluster this is exactly :func:`compress_context`.
    """
    known = {cluster.cluster_id: cluster for cluster in clusters}
    grouped: dict[str, list[ContextFact]] = {}
    loose: list[ContextFact] = []
    for fact in facts:
        if fact.cluster_id is not None and fact.cluster_id in known:
            grouped.setdefault(fact.cluster_id, []).append(fact)
        else:
            loose.append(fact)
    if not grouped:
        return compress_context(facts, events, config, patterns=patterns)

    pattern_lines, event_lines, _ = _cold_lines(patterns, events, config)
    cold_demand = sum(len(line) + 1 for line in [*pattern_lines, *event_lines])
    budget = _budget(config, cold_demand)
    fact_budget = budget.hot + budget.warm

    # Each item is (line, is_fact): a cluster's head line is context for its facts, not a fact.
    items: list[tuple[str, bool]] = []
    for cluster_id, members in grouped.items():
        cluster = known[cluster_id]
        head = cluster.label if not cluster.summary_text else f"{cluster.label}: {_one_line(cluster.summary_text)}"
        items.append((f"- {head}", False))
        items.extend((f"  - {_one_line(member.text)}", True) for member in members if member.text.strip())
    items.extend((f"- {_one_line(fact.text)}", True) for fact in loose if fact.text.strip())

    fact_lines: list[str] = []
    used = 0
    hot_count = warm_count = 0
    for line, is_fact in items:
        cost = len(line) + 1
        # The first cluster and its best fact always go in (minimum context for facts).
        if used + cost > fact_budget and hot_count > 0:
            break
        fact_lines.append(line)
        used += cost
        if is_fact:
            if used <= budget.hot or hot_count == 0:
                hot_count += 1
            else:
                warm_count += 1
    spare = max(0, fact_budget - used)
    pattern_lines, event_lines, _ = _split_cold(pattern_lines, event_lines, budget.cold + spare)
    total_facts = sum(1 for fact in facts if fact.text.strip())
    return _finish(
        fact_lines,
        pattern_lines,
        event_lines,
        hot=hot_count,
        warm=warm_count,
        omitted=max(0, total_facts - hot_count - warm_count),
        config=config,
    )
