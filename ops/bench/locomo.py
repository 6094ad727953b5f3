"""LoCoMo retrieval recall: ``python -m ops.bench locomo [--embedder both|hashing|local]`` (or ``./ops/bench/locomo``).

The recipe of ``../shared/data/locomo/README.md`` on the 5-conversation sample, through the real
write pipeline and the real ``retrieve()``, with no LLM (offline skills, no reranker):

1. Each conversation gets its own agent. Every turn is accepted as the API accepts a message
   (:func:`~memory_core.write.intake.accept_messages`: ``speaker_name`` = the turn's speaker,
   ``occurred_at`` = its session's date, ``message_id`` = its ``dia_id``, the image caption
   appended as `` [image: <caption>]``) and run through the four stages in this process, one
   turn after the other in session order (the stage functions the workers call).
2. Every question with evidence (malformed ids such as ``D8:6; D9:17``, ``D:11:26`` or
   ``D30:05`` normalised; ids that name no turn dropped) is asked with :data:`OVERRIDES`. The
   ranked list is the returned facts (each as the ``message_id`` of the event it came from) and
   "relevant conversations" events merged by ``score`` (retrieval scores both with one formula),
   without repeats. A diagnosis pass asks again with the seeds' fact ranking (:data:`WHAT_IF_OVERRIDES`:
   plain keyword fraction, no entity-specificity weighting) for the before/after in one run.
3. recall@k = |evidence ∩ top-k ids| / |evidence|, averaged over the questions, overall and per
   category, for k = 5, 10, 25; and the context tokens (characters / 4) the items behind the
   top 10 ids cost.

It runs twice: with the hashing embedder and with the local MiniLM one (``all-MiniLM-L6-v2``,
the ``local`` extra), each in a fresh database of one embedded PostgreSQL in a temporary home.
The service's processes are not needed: they are stopped once the stack is up, and the memory
figures count the embedded servers plus this process, where the pipeline runs.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ops.bench.common import (
    IN_PROCESS_ROLE,
    BenchStack,
    MachineInfo,
    MemorySampler,
    append_results,
    machine_info,
    markdown_table,
    mib,
    ms,
    percentile,
    secs,
    shielded,
    text_table,
    verdict,
)
from ops.bench.ingest import LOCOMO_PATH, PhaseReport, Row, locomo_imports

# Enough results to measure recall@25: up to 50 facts and 25 events, no score floor, and every
# turn of a conversation (the longest has 680) within reach of the "relevant conversations" scan.
OVERRIDES: dict[str, Any] = {"topk_facts": 50, "topk_events": 25, "min_score": 0.0, "event_max_scan": 1000}
# Diagnosis: the same questions with the graph signal and spreading activation turned (almost) off.
WHAT_IF_OVERRIDES: dict[str, Any] = {**OVERRIDES, "keyword_idf": False, "entity_specificity": False}
KS = (5, 10, 25)
TOKENS_AT = 10
CHARS_PER_TOKEN = 4
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
# LoCoMo paper (Maharana et al., ACL 2024), Table 3, retrieval over dialog turns, all 10 conversations.
PUBLISHED: dict[str, dict[int, float]] = {"DRAGON": {5: 56.7, 10: 66.2, 25: 76.7}, "BM25": {5: 49.0, 10: 56.4}}
TARGET_MODEL = "local"
EMBEDDERS: dict[str, tuple[str, dict[str, str]]] = {
    "hashing": ("hashing (384)", {"ARANDU_EMBEDDING_PROVIDER": "hashing", "ARANDU_EMBEDDING_DIMENSIONS": "384"}),
    "local": (
        "MiniLM (all-MiniLM-L6-v2, 384)",
        {"ARANDU_EMBEDDING_PROVIDER": "local", "ARANDU_EMBEDDING_DIMENSIONS": "384"},
    ),
}
# The memory-quality targets (recall in %, judged on LoCoMo conversations outside this sample; here
# they are indicative): overall recall@k and category recall@10 per embedder, facts alone within
# FACTS_ONLY_MAX_GAP points of facts and messages merged at @10, and no more context tokens behind
# the top 10 than TOKENS_BEFORE (the mean before those targets were set).
RECALL_TARGETS: dict[str, dict[int, float]] = {"local": {5: 64.0, 10: 72.0, 25: 82.0}, "hashing": {10: 64.0}}
CATEGORY_TARGETS_AT_10: dict[str, dict[int, float]] = {"local": {1: 55.0, 3: 50.0}}
FACTS_ONLY_MAX_GAP = 5.0
TOKENS_BEFORE = 473.0
QUICK_SESSIONS = 2
PROGRESS_EVERY_S = 15.0

_EVIDENCE_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


def normalise_evidence(raw: Iterable[Any]) -> list[str]:
    """The ``dia_id``s of an evidence list, normalised.

    ``"D8:6; D9:17"`` -> both ids, ``"D:11:26"`` -> ``D11:26``, ``"D30:05"`` -> ``D30:5``; repeats removed.
    """
    ids: list[str] = []
    for item in raw:
        for match in _EVIDENCE_ID.finditer(str(item)):
            value = f"D{int(match.group(1))}:{int(match.group(2))}"
            if value not in ids:
                ids.append(value)
    return ids


@dataclass(frozen=True)
class Question:
    """One QA item with its normalised evidence."""

    agent_id: str
    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass
class Conversations:
    """The sample as the benchmark uses it: messages per agent, questions, and what was fixed or skipped."""

    messages: dict[str, list[dict[str, Any]]]
    questions: list[Question]
    skipped_empty: int = 0
    fixed_ids: int = 0
    unknown_ids: int = 0
    skipped_turns: int = 0
    mean_turn_chars: float = 0.0


def load_conversations(path: Path, *, quick: bool) -> Conversations:
    """Turns per agent (the ingest benchmark's import builder) and every question with usable evidence."""
    messages, skipped_turns = locomo_imports(path)
    if quick:
        keep = {f"session_{number}" for number in range(1, QUICK_SESSIONS + 1)}
        messages = {agent: [m for m in turns if m["session_id"] in keep] for agent, turns in messages.items()}
    data = json.loads(path.read_text())
    result = Conversations(messages=messages, questions=[], skipped_turns=skipped_turns)
    lengths = [len(m["message"]) for turns in messages.values() for m in turns]
    result.mean_turn_chars = sum(lengths) / len(lengths) if lengths else 0.0
    for index, sample in enumerate(data):
        agent = f"locomo-{sample.get('sample_id', index)}"
        known = {m["message_id"] for m in messages.get(agent, [])}
        for qa in sample.get("qa", []):
            raw = [str(item) for item in qa.get("evidence") or []]
            ids = normalise_evidence(raw)
            result.fixed_ids += sum(1 for item in raw if item not in ids)
            usable = tuple(item for item in ids if item in known)
            result.unknown_ids += len(ids) - len(usable)
            if not usable:
                result.skipped_empty += 1
                continue
            result.questions.append(
                Question(agent_id=agent, text=str(qa["question"]), category=int(qa["category"]), evidence=usable)
            )
    return result


class PipelineStack(BenchStack):
    """The benchmarks' stack with the service's processes stopped: the pipeline runs in this process.

    Memory samples count the embedded servers and this process (models, pipeline, pools); so does
    the CPU per unit of work.
    """

    own_role = IN_PROCESS_ROLE

    def start(self) -> float:
        """Start everything as the other benchmarks do, then stop the service's processes."""
        elapsed = super().start()
        self._stop_processes()
        return elapsed

    def memory_bytes(self) -> int:
        """PSS of the embedded servers plus this process."""
        from ops.rss import stack_memory_bytes

        if self.devstack is None:
            return 0
        return stack_memory_bytes([os.getpid()], self.data_dirs())

    def use_database(self, database: str, env: Mapping[str, str]) -> Any:
        """A fresh migrated ``database`` on the embedded server with ``env``; the settings for it."""
        from memory_core.db.migrate import upgrade
        from memory_core.settings import load_settings

        stack = self._require()
        if stack.embedded is None:
            raise RuntimeError("the LoCoMo benchmark needs the embedded PostgreSQL")
        changes = {**dict(env), "ARANDU_DATABASE_URL": stack.embedded.postgres.ensure_database(database)}
        os.environ.update(changes)
        stack.env.update(changes)
        self.database = database
        settings = load_settings()
        upgrade(settings)
        return settings


# =====================================================================================
# One embedder
# =====================================================================================


@dataclass
class Scores:
    """recall@k of the questions, overall and per category, and the token cost of the top items."""

    recall: dict[int, list[float]] = field(default_factory=lambda: {k: [] for k in KS})
    by_category: dict[int, dict[int, list[float]]] = field(default_factory=dict)
    tokens: list[float] = field(default_factory=list)
    variants: dict[str, dict[int, list[float]]] = field(default_factory=dict)

    def add(self, question: Question, ranked: Sequence[tuple[str, int]], variants: Mapping[str, Sequence[str]]) -> None:
        """Score one question: ``ranked`` = (message id, cumulative characters up to it), distinct ids in order."""
        evidence = set(question.evidence)
        ids = [item for item, _ in ranked]
        category = self.by_category.setdefault(question.category, {k: [] for k in KS})
        for k in KS:
            value = len(evidence & set(ids[:k])) / len(evidence)
            self.recall[k].append(value)
            category[k].append(value)
        if ranked:
            self.tokens.append(ranked[:TOKENS_AT][-1][1] / CHARS_PER_TOKEN)
        else:
            self.tokens.append(0.0)
        for name, order in variants.items():
            bucket = self.variants.setdefault(name, {k: [] for k in KS})
            for k in KS:
                bucket[k].append(len(evidence & set(order[:k])) / len(evidence))


def mean_pct(values: Sequence[float]) -> float:
    """Mean of 0-1 values as a percentage."""
    return 100.0 * sum(values) / len(values) if values else math.nan


def _distinct(ids: Iterable[str | None]) -> list[str]:
    out: list[str] = []
    for item in ids:
        if item and item not in out:
            out.append(item)
    return out


def ranked_ids(answer: Any, event_ids: Mapping[str, str]) -> tuple[list[tuple[str, int]], dict[str, list[str]]]:
    """Distinct message ids in rank order with the characters spent to reach each; other orderings.

    The rank order is facts and relevant-conversation events merged by ``score`` (retrieval puts
    both on one scale, and the context budget is spent in that order; facts first on ties). A
    fact said in one of the returned messages costs nothing: the context string leaves it out
    (the message says it; memory_core.read.compress).
    """
    scored: list[tuple[float, int, str | None, str]] = []
    fact_ids: list[str | None] = []
    shown = {str(event.event_id) for event in answer.events}
    for fact in answer.facts:
        message_id = fact.message_id or event_ids.get(str(fact.source_event_id or ""))
        body = "" if str(fact.source_event_id or "") in shown else fact.fact_text
        scored.append((fact.score, 0, message_id, body))
        fact_ids.append(message_id)
    event_only: list[str | None] = []
    for event in answer.events:
        # As the context shows it: "Speaker: text".
        scored.append((event.score, 1, event.message_id, f"{event.speaker}: {event.text}"))
        event_only.append(event.message_id)
    # A stable sort: within one kind the service's own order is kept.
    items = sorted(scored, key=lambda item: (-item[0], item[1]))
    ranked: list[tuple[str, int]] = []
    seen: set[str] = set()
    spent = 0
    for _, _, message_id, body in items:
        spent += len(body)
        if message_id and message_id not in seen:
            seen.add(message_id)
            ranked.append((message_id, spent))
    variants = {
        "facts only": _distinct(fact_ids),
        "events only": _distinct(event_only),
        "facts, then events": _distinct([*fact_ids, *event_only]),
    }
    return ranked, variants


@dataclass
class EmbedderRun:
    """Everything measured for one embedder."""

    name: str
    label: str
    turns: int = 0
    conversations: int = 0
    ingest_s: float = math.nan
    failed: list[str] = field(default_factory=list)
    stage_ms: dict[str, list[float]] = field(default_factory=dict)
    active_facts: int = 0
    events: int = 0
    questions: int = 0
    scores: Scores = field(default_factory=Scores)
    latencies: list[float] = field(default_factory=list)
    warnings: Counter[str] = field(default_factory=Counter)
    peak_ingest: int = 0
    peak_retrieve: int = 0
    model_load_s: float = 0.0
    # CPU of the embedded servers and this process (where the pipeline runs) per turn ingested / per question.
    ingest_cpu_ms: float = math.nan
    retrieve_cpu_ms: float = math.nan
    skipped: str = ""
    what_if: Scores = field(default_factory=Scores)
    # retrieve() seconds of the diagnosis pass, interleaved per question with the main settings
    # asked again, so host drift falls on both sides of the latency A/B alike.
    ab_latencies: dict[str, list[float]] = field(default_factory=lambda: {"main": [], "what-if": []})
    model_only: dict[str, dict[int, list[float]]] = field(default_factory=dict)


def ingest(wctx: Any, conversations: Conversations, run: EmbedderRun) -> None:
    """Accept every turn and run it through extract, resolve, reconcile and upsert, one at a time, in order."""
    from memory_core.write.intake import IncomingMessage, accept_messages
    from memory_core.write.pipeline import run_extract, run_reconcile, run_resolve, run_upsert

    stages = (("extract", run_extract), ("resolve", run_resolve), ("reconcile", run_reconcile), ("upsert", run_upsert))
    total = sum(len(turns) for turns in conversations.messages.values())
    started = last = time.monotonic()
    done = 0
    for agent, turns in conversations.messages.items():
        incoming = [
            IncomingMessage(
                message=turn["message"],
                speaker_name=turn["speaker_name"],
                session_id=turn["session_id"],
                occurred_at=datetime.fromisoformat(turn["occurred_at"]),
                message_id=turn["message_id"],
                source="import",
            )
            for turn in turns
        ]
        with wctx.sessions.begin() as session:
            accepted = accept_messages(session, agent, incoming)
        for item, turn in zip(accepted, turns, strict=True):
            try:
                for name, stage in stages:
                    moment = time.perf_counter()
                    outcome = stage(wctx, item.event_id)
                    run.stage_ms.setdefault(name, []).append((time.perf_counter() - moment) * 1000.0)
                    if outcome != "completed":
                        raise RuntimeError(f"{name} was {outcome}")
            except Exception as error:  # one bad turn must not end the run; it is counted and reported
                run.failed.append(f"{agent} {turn['message_id']}: {type(error).__name__}: {error}")
            done += 1
            now = time.monotonic()
            if now - last >= PROGRESS_EVERY_S:
                print(f"  {run.name}: {done:,}/{total:,} turns, {now - started:.0f} s", flush=True)
                last = now
    run.turns = total
    run.conversations = len(conversations.messages)
    run.ingest_s = time.monotonic() - started


def evaluate(
    rctx: Any,
    conversations: Conversations,
    run: EmbedderRun,
    *,
    overrides: Mapping[str, Any] = OVERRIDES,
    scores: Scores | None = None,
) -> None:
    """Ask every question with ``overrides`` and score the ranked message ids against the evidence."""
    from sqlalchemy import text

    from memory_core.read import retrieve

    agents = sorted(conversations.messages)
    with rctx.sessions() as session:
        rows = session.execute(
            text("SELECT CAST(id AS text), message_id FROM memory_events WHERE agent_id = ANY(:agents)"),
            {"agents": agents},
        ).all()
        run.events = len(rows)
        run.active_facts = int(
            session.execute(
                text("SELECT count(*) FROM memory_facts WHERE agent_id = ANY(:agents) AND valid_to IS NULL"),
                {"agents": agents},
            ).scalar_one()
        )
    event_ids = {str(row[0]): str(row[1]) for row in rows if row[1]}
    started = last = time.monotonic()
    main = scores is None
    target = run.scores if scores is None else scores
    for index, question in enumerate(conversations.questions, start=1):
        if not main and index % 2:
            _timed_retrieve(retrieve, rctx, question, OVERRIDES, run.ab_latencies["main"])
        moment = time.perf_counter()
        answer = retrieve(rctx, agent_id=question.agent_id, query=question.text, config_overrides=dict(overrides))
        (run.latencies if main else run.ab_latencies["what-if"]).append(time.perf_counter() - moment)
        if main:
            for warning in answer.warnings:
                run.warnings[warning[:120]] += 1
        elif index % 2 == 0:
            _timed_retrieve(retrieve, rctx, question, OVERRIDES, run.ab_latencies["main"])
        ranked, variants = ranked_ids(answer, event_ids)
        target.add(question, ranked, variants)
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY_S:
            print(
                f"  {run.name}: {index:,}/{len(conversations.questions):,} questions, {now - started:.0f} s", flush=True
            )
            last = now
    run.questions = len(conversations.questions)


def _timed_retrieve(
    retrieve: Any, rctx: Any, question: Question, overrides: Mapping[str, Any], into: list[float]
) -> None:
    """Ask ``question`` with ``overrides`` only for the time it takes (the latency A/B's other side)."""
    moment = time.perf_counter()
    retrieve(rctx, agent_id=question.agent_id, query=question.text, config_overrides=dict(overrides))
    into.append(time.perf_counter() - moment)


def _dot(left: Sequence[float], right: Sequence[float]) -> float:
    return sum(a * b for a, b in zip(left, right, strict=True))


def model_only(embedder: Any, conversations: Conversations) -> dict[str, dict[int, list[float]]]:
    """recall@k of the embedding model alone: cosine between each question and every raw turn (no service).

    Two turn texts: as ingested, and prefixed with the speaker's name (``"Caroline: ..."``), since
    the questions name the speakers and the turns do not.
    """
    forms = {
        "turn text": lambda turn: str(turn["message"]),
        "'speaker: turn text'": lambda turn: f"{turn['speaker_name']}: {turn['message']}",
    }
    questions = conversations.questions
    query_vectors = embedder.embed([question.text for question in questions])
    results: dict[str, dict[int, list[float]]] = {}
    for name, render in forms.items():
        turns = {
            agent: list(zip((t["message_id"] for t in items), embedder.embed([render(t) for t in items]), strict=True))
            for agent, items in conversations.messages.items()
        }
        bucket = results.setdefault(name, {k: [] for k in KS})
        for question, vector in zip(questions, query_vectors, strict=True):
            scored = sorted((-_dot(turn, vector), message_id) for message_id, turn in turns[question.agent_id])
            ids = [message_id for _, message_id in scored[: max(KS)]]
            evidence = set(question.evidence)
            for k in KS:
                bucket[k].append(len(evidence & set(ids[:k])) / len(evidence))
    return results


def _without_sampler(per_item_ms: float, sampler: MemorySampler, before_s: float, items: int) -> float:
    """``per_item_ms`` less the memory sampler's thread (it runs in this process, which the figure counts)."""
    if items <= 0:
        return per_item_ms
    return max(per_item_ms - (sampler.own_cpu_s - before_s) / items * 1000.0, 0.0)


def run_embedder(
    stack: PipelineStack,
    sampler: MemorySampler,
    conversations: Conversations,
    name: str,
    what_if: Mapping[str, Any] = WHAT_IF_OVERRIDES,
) -> EmbedderRun:
    """Fresh database, ingest, evaluate, for one embedder."""
    from memory_core.providers.errors import ProviderError
    from memory_core.read import build_read_context
    from memory_core.write.context import build_write_context

    label, env = EMBEDDERS[name]
    run = EmbedderRun(name=name, label=label)
    settings = stack.use_database(f"arandu_locomo_{name}", env)
    moment = time.monotonic()
    try:
        wctx = build_write_context(settings)
    except ProviderError as error:
        run.skipped = str(error)
        return run
    run.model_load_s = time.monotonic() - moment
    rctx = build_read_context(settings, embedder=wctx.embedder, llm=None)
    try:
        print(f"{name}: ingesting {sum(len(t) for t in conversations.messages.values()):,} turns...", flush=True)
        started, cpu, sampling = time.monotonic(), stack.cpu_snapshot(), sampler.own_cpu_s
        ingest(wctx, conversations, run)
        run.ingest_cpu_ms = _without_sampler(
            stack.cpu_snapshot().stack_ms_per(cpu, run.turns), sampler, sampling, run.turns
        )
        run.peak_ingest = sampler.peak(started, time.monotonic())
        print(
            f"{name}: ingested in {run.ingest_s:.0f} s ({len(run.failed)} failed); "
            f"{len(conversations.questions):,} questions...",
            flush=True,
        )
        started, cpu, sampling = time.monotonic(), stack.cpu_snapshot(), sampler.own_cpu_s
        evaluate(rctx, conversations, run)
        run.retrieve_cpu_ms = _without_sampler(
            stack.cpu_snapshot().stack_ms_per(cpu, run.questions), sampler, sampling, run.questions
        )
        run.peak_retrieve = sampler.peak(started, time.monotonic())
        print(f"{name}: diagnosis: the questions again with {dict(what_if)}; the model alone...", flush=True)
        evaluate(rctx, conversations, run, overrides=what_if, scores=run.what_if)
        run.model_only = model_only(wctx.embedder, conversations)
    finally:
        rctx.close()
        wctx.close()
    return run


# =====================================================================================
# Report
# =====================================================================================


def _triple(values: Mapping[int, Sequence[float]]) -> str:
    return " / ".join(f"{mean_pct(values[k]):.1f}" for k in KS)


def _published() -> str:
    parts = []
    for name, figures in PUBLISHED.items():
        parts.append(f"{name} " + " / ".join(f"{figures[k]:.1f}" if k in figures else "n/a" for k in KS))
    return "; ".join(parts)


def what_if_label(what_if: Mapping[str, Any]) -> str:
    """How the diagnosis pass is named in the table: what it changes against :data:`OVERRIDES`."""
    if dict(what_if) == WHAT_IF_OVERRIDES:
        return "keyword_idf and entity_specificity off (the seeds' fact ranking)"
    changed = {key: value for key, value in what_if.items() if OVERRIDES.get(key, object()) != value}
    return "the same questions with " + json.dumps(changed)


def embedder_report(
    run: EmbedderRun, conversations: Conversations, what_if: Mapping[str, Any] = WHAT_IF_OVERRIDES
) -> PhaseReport:
    """Rows and notes of one embedder."""
    report = PhaseReport()
    rows = report.rows
    label = run.label
    if run.skipped:
        rows.append(Row(label, "skipped", run.skipped.splitlines()[0][:300]))
        if run.name == TARGET_MODEL:
            report.targets[f"{label} beats DRAGON @5 and @10"] = False
        return report
    rate = run.turns / run.ingest_s if run.ingest_s > 0 else math.nan
    rows.append(
        Row(
            label,
            "ingest, in process, one turn at a time",
            f"{run.turns:,} turns of {run.conversations} conversations in {secs(run.ingest_s)} ({rate:,.1f} turns/s); "
            f"{len(run.failed)} failed; {run.active_facts:,} active facts, {run.events:,} events",
            "0 failed",
        )
    )
    stages = ", ".join(
        f"{name} {percentile(values, 50):.0f}/{percentile(values, 95):.0f}" for name, values in run.stage_ms.items()
    )
    rows.append(
        Row(
            label,
            "time in stages p50/p95 (ms)",
            stages + (f"; model load {secs(run.model_load_s)}" if run.model_load_s > 1 else ""),
        )
    )
    beats = all(mean_pct(run.scores.recall[k]) > PUBLISHED["DRAGON"][k] for k in (5, 10))
    target = f"published: {_published()}"
    if run.name == TARGET_MODEL:
        report.targets[f"{label} beats DRAGON @5 and @10"] = beats
        target += f"; beat DRAGON @5 and @10: {verdict(beats)}"
    wanted = RECALL_TARGETS.get(run.name, {})
    if wanted:
        held = all(mean_pct(run.scores.recall[k]) >= value for k, value in wanted.items())
        report.targets[f"{label} recall " + ", ".join(f"@{k} >= {v:.0f}" for k, v in wanted.items())] = held
        target += "; target " + ", ".join(f"@{k} >= {v:.0f}" for k, v in wanted.items()) + f": {verdict(held)}"
    rows.append(
        Row(
            label,
            f"recall@5 / @10 / @25, all {run.questions:,} questions (%)",
            _triple(run.scores.recall),
            target,
        )
    )
    category_targets = CATEGORY_TARGETS_AT_10.get(run.name, {})
    for category in sorted(run.scores.by_category):
        values = run.scores.by_category[category]
        name = CATEGORIES.get(category, "?")
        goal = ""
        if category in category_targets:
            held = mean_pct(values[10]) >= category_targets[category]
            report.targets[f"{label} {name} @10 >= {category_targets[category]:.0f}"] = held
            goal = f"@10 >= {category_targets[category]:.0f}: {verdict(held)}"
        rows.append(
            Row(label, f"recall@5 / @10 / @25, category {category} {name} ({len(values[5])} q.)", _triple(values), goal)
        )
    facts_only = run.scores.variants.get("facts only")
    if facts_only:
        gap = mean_pct(run.scores.recall[10]) - mean_pct(facts_only[10])
        held = gap <= FACTS_ONLY_MAX_GAP
        report.targets[f"{label} facts only within {FACTS_ONLY_MAX_GAP:.0f} points @10"] = held
        rows.append(
            Row(
                label,
                "facts alone (ordered by score), recall@5 / @10 / @25",
                _triple(facts_only),
                f"within {FACTS_ONLY_MAX_GAP:.0f} points of the merged @10 ({gap:.1f}): {verdict(held)}",
            )
        )
    tokens = run.scores.tokens
    reference = TOKENS_AT * conversations.mean_turn_chars / CHARS_PER_TOKEN
    mean_tokens = sum(tokens) / max(len(tokens), 1)
    held = mean_tokens <= TOKENS_BEFORE
    if run.name == TARGET_MODEL:
        report.targets[f"{label} context tokens <= {TOKENS_BEFORE:.0f}"] = held
    rows.append(
        Row(
            label,
            f"context tokens of the items behind the top {TOKENS_AT} ids (chars / {CHARS_PER_TOKEN}), mean / p50 / p95",
            f"{mean_tokens:,.0f} / {percentile(tokens, 50):,.0f} / {percentile(tokens, 95):,.0f}",
            f"10 raw turns: ~{reference:,.0f}"
            + (f"; mean <= {TOKENS_BEFORE:.0f}: {verdict(held)}" if run.name == TARGET_MODEL else ""),
        )
    )
    rows.append(
        Row(
            label,
            "retrieve() p50 / p95 (in process)",
            f"{ms(percentile(run.latencies, 50))} / {ms(percentile(run.latencies, 95))}",
        )
    )
    rows.append(
        Row(
            label,
            "CPU per turn ingested / per question answered (embedded servers + this process)",
            f"{run.ingest_cpu_ms:,.1f} ms / {run.retrieve_cpu_ms:,.1f} ms",
        )
    )
    rows.append(Row(label, "peak memory: ingest / questions", f"{mib(run.peak_ingest)} / {mib(run.peak_retrieve)}"))
    for name, values in run.model_only.items():
        rows.append(
            Row(
                label,
                f"diagnosis: the model alone, cosine over the raw turns ({name}), recall@5 / @10 / @25",
                _triple(values),
            )
        )
    if run.what_if.recall[5]:
        rows.append(
            Row(
                label,
                f"diagnosis: {what_if_label(what_if)}, recall@5 / @10 / @25",
                _triple(run.what_if.recall)
                + "; @10 by category: "
                + ", ".join(
                    f"{CATEGORIES.get(category, '?')} {mean_pct(values[10]):.1f}"
                    for category, values in sorted(run.what_if.by_category.items())
                ),
            )
        )
    variants = "; ".join(f"{name} {_triple(values)}" for name, values in run.scores.variants.items())
    report.notes.append(f"{label}: recall@5 / @10 / @25 of other orderings of the same answers: {variants}.")
    if run.what_if.recall[5]:
        variants = "; ".join(f"{name} {_triple(values)}" for name, values in run.what_if.variants.items())
        report.notes.append(f"{label}: the same with {what_if_label(what_if)}: {variants}.")
        rows.append(_latency_ab_row(run, what_if))
    if run.failed:
        report.notes.append(f"{label}: {len(run.failed)} turns failed, e.g. {run.failed[0]}")
    if run.warnings:
        common = "; ".join(f"{count} x {warning}" for warning, count in run.warnings.most_common(2))
        report.notes.append(f"{label}: retrieval warnings: {common}")
    return report


def _latency_ab_row(run: EmbedderRun, what_if: Mapping[str, Any]) -> Row:
    """retrieve() p50 / p95 of the main settings against the diagnosis pass's, asked alternately per question."""
    main, other = run.ab_latencies["main"], run.ab_latencies["what-if"]
    ratio = percentile(other, 95) / percentile(main, 95) if main and percentile(main, 95) > 0 else math.nan
    return Row(
        run.label,
        "diagnosis: retrieve() p50 / p95, main settings against the diagnosis pass, alternated per question",
        f"main {ms(percentile(main, 50))} / {ms(percentile(main, 95))}; "
        f"{what_if_label(what_if)} {ms(percentile(other, 50))} / {ms(percentile(other, 95))}; "
        f"p95 ratio {ratio:.2f}",
    )


def _command(argv: Sequence[str]) -> str:
    args = " ".join(argv)
    if os.environ.get("OPS_BENCH_WRAPPER"):
        return f"./ops/bench/locomo {args}".strip()
    return f"python -m ops.bench locomo {args}".strip()


def _section(
    machine: MachineInfo,
    *,
    command: str,
    quick: bool,
    load: str,
    setup: str,
    rows: Sequence[Row],
    notes: Sequence[str],
    embedders: Sequence[str] = ("hashing", "local"),
) -> str:
    # A run of one embedder has a section of its own: it must not replace the run of both.
    only = f", {embedders[0]} only" if len(embedders) == 1 else ""
    title = f"## LoCoMo retrieval recall{only} — {machine.date:%Y-%m-%d %H:%M} UTC" + (
        " — quick (2 sessions)" if quick else ""
    )
    table = markdown_table(
        ("run", "measure", "result", "reference / target"), [(r.phase, r.measure, r.result, r.target) for r in rows]
    )
    bullets = "\n".join(f"- {note}" for note in notes)
    return (
        f"{title}\n\n- command: `{command}`\n- machine: {machine.describe()}; {load}\n- setup: {setup}\n\n"
        f"{table}\n\n{bullets}\n"
    )


def run_locomo_benchmark(
    *,
    embedders: Sequence[str],
    quick: bool,
    keep_home: bool,
    record: bool,
    argv: Sequence[str],
    what_if: str | None = None,
) -> int:
    """Run the recipe for each embedder, print the table and append it to RESULTS.md.

    ``what_if``: JSON config_overrides of the diagnosis pass, on top of :data:`OVERRIDES`
    (default :data:`WHAT_IF_OVERRIDES`): an A/B of one setting on the same ingested data.
    """
    machine = machine_info()
    command = _command(argv)
    load = "load average at start {:.2f} / {:.2f} / {:.2f} (1 / 5 / 15 min)".format(*os.getloadavg())
    if not LOCOMO_PATH.exists():
        print(f"error: {LOCOMO_PATH} not found", file=sys.stderr)
        return 2
    try:
        diagnosis = WHAT_IF_OVERRIDES if what_if is None else {**OVERRIDES, **dict(json.loads(what_if))}
    except (ValueError, TypeError) as error:
        print(f"error: --what-if must be a JSON object: {error}", file=sys.stderr)
        return 2
    conversations = load_conversations(LOCOMO_PATH, quick=quick)
    rows: list[Row] = []
    notes: list[str] = []
    targets: dict[str, bool] = {}
    overall = time.monotonic()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    stack = PipelineStack(keep_home=keep_home, label="locomo")
    sampler = MemorySampler(stack)
    code = 0
    try:
        print(f"LoCoMo benchmark{' (quick)' if quick else ''} on {machine.describe()}; {load}", flush=True)
        ready_s = stack.start()
        print(f"embedded servers ready in {ready_s:.1f} s under {stack.home}", flush=True)
        sampler.start()
        for name in embedders:
            report = embedder_report(
                run_embedder(stack, sampler, conversations, name, diagnosis), conversations, diagnosis
            )
            rows.extend(report.rows)
            notes.extend(report.notes)
            targets.update(report.targets)
        rows.append(
            Row(
                "whole run",
                "peak memory (PSS: embedded servers + this process) / wall time",
                f"{mib(sampler.peak())} / {secs(time.monotonic() - overall)}",
            )
        )
        notes.insert(
            0,
            f"Data: {LOCOMO_PATH.name}, {len(conversations.messages)} conversations, one agent each; "
            f"{len(conversations.questions):,} questions scored, {conversations.skipped_empty} skipped (no evidence "
            f"naming a turn after normalisation), {conversations.fixed_ids} malformed evidence entries normalised or "
            "dropped, "
            f"{conversations.unknown_ids} evidence ids naming no turn dropped"
            + (f", {conversations.skipped_turns} empty turns skipped" if conversations.skipped_turns else "")
            + ". The published figures are on all 10 LoCoMo conversations; these are on 5.",
        )
        notes.insert(
            1,
            f"Retrieval: `retrieve()` with config_overrides {json.dumps(OVERRIDES)} (no LLM: formula ranking, no "
            "reranker). Ranked ids: the message_id of each returned fact's source event and of each "
            "relevant-conversation event, facts and events merged by score (one formula scores both), repeats "
            "removed. "
            f"Tokens: characters of every item read until the {TOKENS_AT}th distinct id, / {CHARS_PER_TOKEN}; a "
            "fact said in one of the returned messages counts nothing (the context string leaves it out).",
        )
        missed = [name for name, held in targets.items() if not held]
        notes.append("Targets missed: " + ", ".join(missed) + "." if missed else "Every target was met.")
    except KeyboardInterrupt:
        print("\ninterrupted: stopping...", file=sys.stderr, flush=True)
        code = 130
    except Exception as error:
        print(f"\nbenchmark failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        traceback.print_exc()
        code = 1
    finally:
        with shielded():
            sampler.stop()
            stack.stop()
    table = [(r.phase, r.measure, r.result, r.target) for r in rows]
    headers = ("run", "measure", "result", "reference / target")
    if code != 0:
        if rows:
            print("\npartial figures (not recorded):\n" + text_table(headers, table))
        return code
    print("\n" + text_table(headers, table))
    print("\n" + "\n".join(f"- {note}" for note in notes))
    if record:
        setup = (
            "write pipeline in process (offline skills, one turn at a time), embedded PostgreSQL 18 + pgvector in a "
            "temporary home, a fresh database per embedder"
        )
        append_results(
            _section(
                machine,
                command=command,
                quick=quick,
                load=load,
                setup=setup,
                rows=rows,
                notes=notes,
                embedders=embedders,
            )
        )
        print(f"\nappended to {Path('ops/bench/RESULTS.md')}")
    return 0
