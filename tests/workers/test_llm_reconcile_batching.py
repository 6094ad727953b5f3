"""Batched reconciliation end to end: real API, worker, PostgreSQL, Redis, and the real ``openai``
client against the local OpenAI-compatible stub.

The stub model states one scripted fact per message (most of them on a single-valued slot, so
the next value of the slot must be reconciled with the last) and decides like a careful model:
UPDATE the existing fact holding the same slot, NOOP an identical one, ADD otherwise.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from memory_core.cognition.llm import build_llm_write_skills
from memory_core.cognition.llm.batch_reconciliation import BATCH_RECONCILE_SKILL
from memory_core.settings import Settings
from memory_core.write.context import WriteContext, build_write_context
from memory_core.write.pipeline import run_stage_chunk
from tests.support.openai_stub import OpenAIStub, StubReply
from tests.workers.conftest import WritePath, start_write_path
from tests.workers.test_llm_batching import provider_for

# message -> (fact the model states, its attribute key)
SCRIPT: dict[str, tuple[str, str | None]] = {
    "I live in Lisbon": ("Rafael lives in Lisbon", "location.residence"),
    "I grew up in Braga": ("Rafael grew up in Braga", "location.hometown"),
    "I work at Acme": ("Rafael works at Acme", "work.employer"),
    "I am a nurse": ("Rafael is a nurse", "work.occupation"),
    "My partner is Ana": ("Rafael's partner is Ana", "relationship.partner"),
    "I am 30 years old": ("Rafael is 30 years old", "personal.age"),
    "My birthday is on 3 March": ("Rafael's birthday is on 3 March", "personal.birthday"),
    "I play volleyball every Thursday": ("Rafael plays volleyball every Thursday", None),
    # The next values of the same slots.
    "I moved to Porto": ("Rafael lives in Porto", "location.residence"),
    "Actually I grew up in Guimaraes": ("Rafael grew up in Guimaraes", "location.hometown"),
    "I joined Globex": ("Rafael works at Globex", "work.employer"),
    "I became a doctor": ("Rafael is a doctor", "work.occupation"),
    "My partner is Bea now": ("Rafael's partner is Bea", "relationship.partner"),
    "I turned 31": ("Rafael is 31 years old", "personal.age"),
    "My birthday is on 4 March in fact": ("Rafael's birthday is on 4 March", "personal.birthday"),
    "Like I said, I play volleyball every Thursday": ("Rafael plays volleyball every Thursday", None),
    # Two values of one slot in one chunk: the later one wins.
    "I moved to Coimbra": ("Rafael lives in Coimbra", "location.residence"),
    "Then I moved to Faro": ("Rafael lives in Faro", "location.residence"),
}
# Facts in no single-valued slot, for the speaker's profile (apart from the chunks below).
TASTES: dict[str, tuple[str, str | None]] = {
    "I love pizza": ("Rafael loves pizza", None),
    "I go to the opera with my sister": ("Rafael goes to the opera with his sister", None),
    "Honestly I could eat lasagna every single day": ("Rafael loves lasagna", None),
}
FIRST = list(SCRIPT)[:8]
SECOND = list(SCRIPT)[8:16]
THIRD = list(SCRIPT)[16:]

_BLOCK = re.compile(r"<message>\n(.*?)\n</message>", re.DOTALL)
_FACT_SECTION = re.compile(r"^### Fact (\d+)$", re.MULTILINE)
_KNOWN_FACT = re.compile(r"^  #(\d+) .*? \(([\w.]+)\)$", re.MULTILINE)
_KNOWN_TEXT = re.compile(r"^  #\d+ (.*?)( \([\w.]+\))?$", re.MULTILINE)
_NEW = re.compile(r"^NEW fact \(since [^)]*\): (?P<text>.+?)(?: \[(?P<key>[\w.]+)\])?$", re.MULTILINE)
_EXISTING = re.compile(
    r"^- id (?P<id>\S+) \| since [^|]+ \| similarity [\d.]+ \| (?P<text>.+?)(?: \[(?P<key>[\w.]+)\])?$", re.MULTILINE
)


def decide(section: str) -> dict[str, Any]:
    """A careful model's decision on one rendered new fact and its existing facts."""
    new = _NEW.search(section)
    assert new, section
    for existing in _EXISTING.finditer(section):
        if existing.group("text") == new.group("text"):
            return {"action": "NOOP", "target_fact_id": existing.group("id"), "reason": "same"}
    for existing in _EXISTING.finditer(section):
        if new.group("key") and existing.group("key") == new.group("key"):
            return {"action": "UPDATE", "target_fact_id": existing.group("id"), "reason": "new value"}
    return {"action": "ADD", "target_fact_id": None, "reason": "new"}


@dataclass
class ReconcilingModel:
    """A ``chat_handler`` answering extraction (single or batched) from :data:`SCRIPT` and deciding facts.

    ``bad_target`` names words of new facts whose part of a batched decision targets no listed fact.
    """

    bad_target: set[str] = field(default_factory=set)
    # Answer extraction as a strict-mode model does: each fact says which numbered known fact it replaces.
    names_replaced: bool = False
    # Write the speaker's profile as extraction does: the facts it was shown and the new ones.
    profiles: bool = False
    # The first batched decision call answers this way instead (not JSON, a rate limit...).
    first_batch_reply: StubReply | None = None
    calls: Counter[str] = field(default_factory=Counter)
    batch_sizes: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # message -> an event its extraction's answer waits for (the model is slow on that message).
    held: dict[str, threading.Event] = field(default_factory=dict)
    # messages whose extraction call has arrived.
    asked: set[str] = field(default_factory=set)

    def __call__(self, body: dict[str, Any]) -> StubReply:
        messages = body.get("messages") or []
        system = next((str(m["content"]) for m in messages if m.get("role") == "system"), "")
        user = next((str(m["content"]) for m in messages if m.get("role") == "user"), "")
        answer: dict[str, Any]
        if system.startswith("You turn several consecutive"):
            kind = "extract_batch"
            pieces = re.split(r"^### Message (\d+)$", user, flags=re.MULTILINE)[1:]
            answer = {
                "messages": [
                    {"index": int(number), **self._extraction(part)}
                    for number, part in zip(pieces[::2], pieces[1::2], strict=True)
                ]
            }
        elif system.startswith("You turn one chat message"):
            kind = "extract"
            block = _BLOCK.search(user)
            said = block.group(1).strip() if block else ""
            with self.lock:
                self.asked.add(said)
            hold = self.held.get(said)
            if hold is not None:
                assert hold.wait(60), f"never released: {said}"
            answer = self._extraction(user)
            if self.profiles:
                known = [text for text, _ in _KNOWN_TEXT.findall(user)]
                sentences = [*known, *(fact["text"] for fact in answer["facts"])]
                answer["updated_profiles"] = {"Rafael": " ".join(f"{sentence}." for sentence in sentences)}
            if self.names_replaced:
                for fact in answer["facts"]:
                    del fact["action"]
                    same_slot = [n for n, key in _KNOWN_FACT.findall(user) if key == fact["attribute_key"]]
                    fact["replaces"] = int(same_slot[-1]) if same_slot else None
        elif system.startswith("You keep an agent's memory"):
            kind = "reconcile_batch"
            with self.lock:
                special, self.first_batch_reply = self.first_batch_reply, None
                if special is not None:
                    self.calls[kind] += 1
                    return special
            pieces = _FACT_SECTION.split(user)[1:]
            decisions = []
            for number, section in zip(pieces[::2], pieces[1::2], strict=True):
                decision = {"index": int(number), **decide(section)}
                if any(word in section.split("EXISTING")[0] for word in self.bad_target):
                    decision.update(action="UPDATE", target_fact_id="not-a-listed-fact")
                decisions.append(decision)
            with self.lock:
                self.batch_sizes.append(len(decisions))
            answer = {"decisions": decisions}
        elif system.startswith("You keep one entity's memory"):
            kind = "reconcile"
            answer = decide(user)
        else:
            kind = "other"
            answer = {"match": None, "reason": "not the same", "emotion": "neutral", "intensity": 0.1}
        with self.lock:
            self.calls[kind] += 1
        return StubReply.text(json.dumps(answer))

    @staticmethod
    def _extraction(user: str) -> dict[str, Any]:
        block = _BLOCK.search(user)
        assert block, user
        said = block.group(1).strip()
        fact, key = SCRIPT[said] if said in SCRIPT else TASTES[said]
        return {
            "entities": [{"name": "Rafael", "type": "person"}],
            "facts": [{"subject": "Rafael", "text": fact, "attribute_key": key, "action": "NEW"}],
            "relations": [],
            "updated_profiles": {},
            "emotion": {"emotion": "neutral", "intensity": 0.1, "energy": "medium"},
        }


@dataclass
class ReconcilePath:
    """The write path over the stub, with the model's call counts."""

    path: WritePath
    model: ReconcilingModel
    stub: OpenAIStub
    sent: int = 0

    def send(self, texts: list[str], overrides: dict[str, Any] | None = None) -> list[str]:
        """POST ``texts`` in one batch request (one chunk), each a minute after the last; wait until done."""
        when = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
        body = [
            {
                "message": message,
                "speaker_name": "Rafael",
                "occurred_at": (when + timedelta(minutes=self.sent + i)).isoformat(),
                "message_id": f"m-{uuid.uuid4().hex[:8]}",
                "session_id": "s1",
                **({"config_overrides": overrides} if overrides else {}),
            }
            for i, message in enumerate(texts)
        ]
        self.sent += len(texts)
        response = self.path.client.post(f"/v1/agents/{self.path.agent_id}/messages/batch", json={"messages": body})
        assert response.status_code == 202, response.text
        ids = [str(event_id) for event_id in response.json()["event_ids"]]
        assert self.path.wait(ids) == dict.fromkeys(ids, "done")
        return ids

    def active_facts(self) -> set[tuple[str, str | None]]:
        """The agent's active facts: (text, attribute key)."""
        rows = self.path.memory.rows(
            "SELECT fact_text, attribute_key FROM memory_facts WHERE agent_id = :a AND valid_to IS NULL",
            a=self.path.agent_id,
        )
        return {(row["fact_text"], row["attribute_key"]) for row in rows}

    def superseded(self) -> set[tuple[str, str]]:
        """(old text, new text) for every fact another one replaced."""
        rows = self.path.memory.rows(
            "SELECT o.fact_text AS old, n.fact_text AS new FROM memory_facts n "
            "JOIN memory_facts o ON o.id = n.supersedes_fact_id WHERE n.agent_id = :a",
            a=self.path.agent_id,
        )
        return {(row["old"], row["new"]) for row in rows}

    def entities(self) -> int:
        """How many entities the agent has."""
        rows = self.path.memory.rows(
            "SELECT count(*) AS n FROM memory_entities WHERE agent_id = :a", a=self.path.agent_id
        )
        return int(rows[0]["n"])


def reconcile_path(settings: Settings, *, batching: bool) -> Iterator[ReconcilePath]:
    """A write path with batching on or off over a fresh stub."""
    model = ReconcilingModel()
    own = settings.model_copy(
        update={"pipeline_max_attempts": 4, "pipeline_intake_wait_ms": 100, "pipeline_llm_batching": batching}
    )
    with OpenAIStub(chat_handler=model) as stub:

        def context(chosen: Settings) -> WriteContext:
            return build_write_context(chosen, skills=build_llm_write_skills(provider_for(stub)))

        for path in start_write_path(own, context):
            yield ReconcilePath(path=path, model=model, stub=stub)


@pytest.fixture
def batched(write_settings: Settings) -> Iterator[ReconcilePath]:
    yield from reconcile_path(write_settings, batching=True)


EXPECTED_AFTER_SECOND = {
    ("Rafael lives in Porto", "location.residence"),
    ("Rafael grew up in Guimaraes", "location.hometown"),
    ("Rafael works at Globex", "work.employer"),
    ("Rafael is a doctor", "work.occupation"),
    ("Rafael's partner is Bea", "relationship.partner"),
    ("Rafael is 31 years old", "personal.age"),
    ("Rafael's birthday is on 4 March", "personal.birthday"),
    ("Rafael plays volleyball every Thursday", None),
}


def test_eight_decisions_of_one_chunk_are_made_in_one_call_and_land_on_the_right_facts(
    batched: ReconcilePath,
) -> None:
    batched.send(FIRST)
    assert batched.model.calls["reconcile_batch"] == 0  # nothing to compare with yet: the fast path
    batched.send(SECOND)
    assert batched.model.calls["reconcile_batch"] == 1
    assert batched.model.batch_sizes == [8]
    assert batched.model.calls["reconcile"] == 0
    assert batched.active_facts() == EXPECTED_AFTER_SECOND
    assert batched.superseded() >= {
        ("Rafael lives in Lisbon", "Rafael lives in Porto"),
        ("Rafael works at Acme", "Rafael works at Globex"),
        ("Rafael is 30 years old", "Rafael is 31 years old"),
        ("Rafael's partner is Ana", "Rafael's partner is Bea"),
    }
    outputs = batched.path.memory.rows(
        "SELECT o.output->'tokens' AS tokens, o.output->'trace'->0->'data'->>'batched' AS batched "
        "FROM pipeline_stage_outputs o JOIN memory_events e ON e.id = o.event_id "
        "WHERE o.stage = 'reconcile' AND e.agent_id = :a AND e.text = ANY(:texts)",
        a=batched.path.agent_id,
        texts=SECOND,
    )
    assert len(outputs) == 8
    assert all(row["batched"] == "1" for row in outputs)
    assert all(row["tokens"]["total_tokens"] > 0 for row in outputs)
    # The usage accounting counts the batch as the one call it was, with all of its tokens.
    usage = batched.path.memory.rows(
        "SELECT sum(calls) AS calls, sum(input_tokens + output_tokens) AS tokens FROM llm_usage "
        "WHERE agent_id = :a AND skill = :skill",
        a=batched.path.agent_id,
        skill=BATCH_RECONCILE_SKILL,
    )
    assert usage[0]["calls"] == 1
    assert usage[0]["tokens"] == sum(row["tokens"]["total_tokens"] for row in outputs)


def test_an_unusable_decision_is_made_alone_and_its_batch_mates_are_kept(batched: ReconcilePath) -> None:
    batched.model.bad_target.add("Globex")
    batched.send(FIRST)
    batched.send(SECOND)
    assert batched.model.calls["reconcile_batch"] == 1
    assert batched.model.calls["reconcile"] == 1  # the Globex fact alone
    assert batched.active_facts() == EXPECTED_AFTER_SECOND
    assert ("Rafael works at Acme", "Rafael works at Globex") in batched.superseded()


def test_an_answer_unusable_as_a_whole_is_asked_again_in_halves(batched: ReconcilePath) -> None:
    batched.model.first_batch_reply = StubReply.text("Let me think about these facts first.")
    batched.send(FIRST)
    batched.send(SECOND)
    assert batched.model.calls["reconcile_batch"] == 3
    assert batched.model.batch_sizes == [4, 4]
    assert batched.model.calls["reconcile"] == 0
    assert batched.active_facts() == EXPECTED_AFTER_SECOND


def test_a_rate_limited_batch_is_retried_after_its_wait(batched: ReconcilePath) -> None:
    batched.model.first_batch_reply = StubReply.error(429, "slow down", headers={"Retry-After": "1"})
    batched.send(FIRST)
    ids = batched.send(SECOND)
    assert batched.model.calls["reconcile_batch"] == 2
    assert batched.model.calls["reconcile"] == 0
    assert batched.active_facts() == EXPECTED_AFTER_SECOND
    # A rate limit with Retry-After is a throttled retry, not a failed attempt.
    retries = batched.path.memory.rows(
        "SELECT attempts, throttled_retries FROM pipeline_runs WHERE event_id::text = ANY(:ids)", ids=ids
    )
    assert sorted(row["attempts"] for row in retries) == [0] * 8
    assert sorted(row["throttled_retries"] for row in retries) == [1] * 8


def test_a_redelivered_reconcile_stage_asks_the_model_nothing(batched: ReconcilePath) -> None:
    batched.send(FIRST)
    ids = batched.send(SECOND)
    assert batched.model.calls["reconcile_batch"] == 1
    before = batched.stub.call_count
    # As a redelivery after a crash between the batch's decisions and the stage's completion.
    with batched.path.memory.engine.begin() as connection:
        connection.execute(
            text("UPDATE pipeline_runs SET status = 'resolved' WHERE event_id::text = ANY(:ids)"), {"ids": ids}
        )
    ctx = build_write_context(batched.path.settings, skills=build_llm_write_skills(provider_for(batched.stub)))
    try:
        outcomes = run_stage_chunk(ctx, "reconcile", [uuid.UUID(event_id) for event_id in ids])
    finally:
        ctx.close()
    assert set(outcomes.values()) == {"completed"}
    assert batched.stub.call_count == before


def test_a_conversation_leaves_the_same_memory_batched_as_unbatched(write_settings: Settings) -> None:
    memories = {}
    for batching in (False, True):
        for run in reconcile_path(write_settings, batching=batching):
            for texts in (FIRST, SECOND, THIRD):
                run.send(texts)
            memories[batching] = (run.active_facts(), run.superseded(), run.entities())
            calls = run.model.calls
            if batching:
                # Second chunk: 8 decisions; third: 2 (both against Porto).
                assert (calls["reconcile_batch"], calls["reconcile"]) == (2, 0)
            else:
                assert (calls["reconcile_batch"], calls["reconcile"]) == (0, 10)
    assert memories[True] == memories[False]
    active = memories[True][0]
    assert ("Rafael lives in Faro", "location.residence") in active
    assert not {fact for fact in active if fact[1] == "location.residence"} - {
        ("Rafael lives in Faro", "location.residence")
    }


@pytest.fixture
def unbatched(write_settings: Settings) -> Iterator[ReconcilePath]:
    yield from reconcile_path(write_settings, batching=False)


def test_informed_extraction_decides_what_it_saw_and_reconciliation_asks_only_about_the_rest(
    unbatched: ReconcilePath,
) -> None:
    unbatched.model.names_replaced = True
    unbatched.send(["I live in Lisbon"])
    unbatched.send(["I work at Acme"])
    assert unbatched.model.calls["reconcile"] == 0  # nothing similar yet: the fast path
    # The speaker's facts are shown to extraction (numbered) even though "I" never names them, so it
    # says which one the move replaces: no reconcile call, and the same UPDATE the call would give.
    unbatched.send(["I moved to Porto"])
    assert unbatched.model.calls["extract"] == 3
    assert unbatched.model.calls["reconcile"] == 0
    assert ("Rafael lives in Lisbon", "Rafael lives in Porto") in unbatched.superseded()
    # Extraction shown no facts (informed_extraction_topk 0) judged nothing: the reconcile skill decides.
    unbatched.send(["I joined Globex"], overrides={"informed_extraction_topk": 0})
    assert unbatched.model.calls["reconcile"] == 1
    assert ("Rafael works at Acme", "Rafael works at Globex") in unbatched.superseded()
    assert unbatched.active_facts() == {
        ("Rafael lives in Porto", "location.residence"),
        ("Rafael works at Globex", "work.employer"),
    }


def _post_as_rafael(path: WritePath, message: str, minutes: int) -> str:
    """Post ``message`` by Rafael in session s1, ``minutes`` after 1 May 2024 09:00 UTC; its event id."""
    response = path.client.post(
        f"/v1/agents/{path.agent_id}/messages",
        json={
            "message": message,
            "speaker_name": "Rafael",
            "occurred_at": (datetime(2024, 5, 1, 9, 0, tzinfo=UTC) + timedelta(minutes=minutes)).isoformat(),
            "session_id": "s1",
        },
    )
    assert response.status_code == 202, response.text
    return str(response.json()["event_id"])


def test_facts_written_after_extraction_read_memory_cost_no_reconcile_call(unbatched: ReconcilePath) -> None:
    # A message whose extraction read memory before another message of the agent was applied
    # could not be shown that message's facts. They are no reason for a reconcile call: upsert
    # re-checks them (repeats, single-valued slots, retraction pairs) as it does a chunk's
    # earlier messages, and memory ends as the call would have left it.
    model = unbatched.model
    model.names_replaced = True
    path = unbatched.path
    release = threading.Event()
    model.held["I moved to Porto"] = release

    later = _post_as_rafael(path, "I moved to Porto", 10)
    deadline = datetime.now(UTC) + timedelta(seconds=60)
    while "I moved to Porto" not in model.asked:  # its extraction has read memory (nothing yet)
        assert datetime.now(UTC) < deadline
        threading.Event().wait(0.05)
    earlier = _post_as_rafael(path, "I live in Lisbon", 0)
    assert path.wait([earlier]) == {earlier: "done"}
    release.set()
    assert path.wait([later]) == {later: "done"}

    assert model.calls["extract"] == 2
    assert model.calls["reconcile"] == 0
    assert unbatched.active_facts() == {("Rafael lives in Porto", "location.residence")}
    assert ("Rafael lives in Lisbon", "Rafael lives in Porto") in unbatched.superseded()
    trace = path.memory.rows(
        "SELECT output->'trace'->0->'data'->>'decided_by_extraction' AS decided, "
        "output->'decisions'->0->>'reason' AS reason FROM pipeline_stage_outputs "
        "WHERE stage = 'reconcile' AND event_id = CAST(:id AS uuid)",
        id=later,
    )
    assert trace[0]["decided"] == "1"
    assert "written before it" in trace[0]["reason"]


def test_a_fact_committed_after_extraction_read_memory_by_an_older_transaction_costs_no_reconcile_call(
    unbatched: ReconcilePath,
) -> None:
    # An earlier message's apply transaction begins (its rows stamped with that start) before the
    # later message's extraction reads memory, and commits after it, waiting meanwhile for the
    # agent's lock (as behind another chunk's apply). Extraction could not see its fact, though
    # it is older than extraction's read by the clock: no reason for a call either.
    model = unbatched.model
    model.names_replaced = True
    path = unbatched.path
    release = threading.Event()
    model.held["I moved to Porto"] = release

    def waiting_for_the_agent_lock() -> int:
        rows = path.memory.rows("SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        return int(rows[0]["n"])

    def until(done: Callable[[], bool]) -> None:
        deadline = datetime.now(UTC) + timedelta(seconds=60)
        while not done():
            assert datetime.now(UTC) < deadline
            threading.Event().wait(0.05)

    # Another writer of the agent (as another chunk's apply transaction) holds its lock.
    with path.memory.engine.connect() as holder:
        holder.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"), {"key": f"arandu:{path.agent_id}"}
        )
        earlier = _post_as_rafael(path, "I live in Lisbon", 0)
        until(lambda: waiting_for_the_agent_lock() == 1)  # its apply transaction has begun, and waits
        later = _post_as_rafael(path, "I moved to Porto", 10)
        until(lambda: "I moved to Porto" in model.asked)  # its extraction has read memory (nothing yet)
        holder.commit()  # Lisbon is applied and committed now, after the read
    assert path.wait([earlier]) == {earlier: "done"}
    release.set()
    assert path.wait([later]) == {later: "done"}

    # The scenario: by the clock, the Lisbon fact is older than the Porto extraction's read.
    stamps = path.memory.rows(
        "SELECT f.created_at, (o.output->>'known_as_of')::timestamptz AS known_as_of FROM memory_facts f, "
        "pipeline_stage_outputs o WHERE f.agent_id = :a AND f.fact_text = 'Rafael lives in Lisbon' "
        "AND o.stage = 'extract' AND o.event_id = CAST(:id AS uuid)",
        a=path.agent_id,
        id=later,
    )
    assert stamps[0]["created_at"] < stamps[0]["known_as_of"]
    assert model.calls["extract"] == 2
    assert model.calls["reconcile"] == 0
    assert unbatched.active_facts() == {("Rafael lives in Porto", "location.residence")}
    assert ("Rafael lives in Lisbon", "Rafael lives in Porto") in unbatched.superseded()


def test_a_known_fact_far_from_the_message_is_shown_beside_the_profile_and_costs_no_reconcile_call(
    unbatched: ReconcilePath,
) -> None:
    # The paced benchmark's last reconcile calls: the speaker had a profile, and extraction was
    # shown only the facts closest to the message ("I could eat lasagna every day"), not one close
    # to the fact it states ("Rafael loves pizza" for "Rafael loves lasagna"). Reconciliation
    # compares facts with facts, so that one was a candidate extraction had not judged.
    model = unbatched.model
    model.names_replaced = True
    model.profiles = True
    unbatched.send(["I love pizza"])
    unbatched.send(["I go to the opera with my sister"])
    profile = unbatched.path.memory.rows(
        "SELECT profile_text FROM memory_entities WHERE agent_id = :a AND canonical_key = 'person:rafael'",
        a=unbatched.path.agent_id,
    )
    assert "Rafael loves pizza." in profile[0]["profile_text"]
    assert model.calls["reconcile"] == 0

    unbatched.send(["Honestly I could eat lasagna every single day"])
    assert model.calls["extract"] == 3
    assert model.calls["reconcile"] == 0
    assert unbatched.active_facts() == {
        ("Rafael loves pizza", None),
        ("Rafael goes to the opera with his sister", None),
        ("Rafael loves lasagna", None),
    }
    decisions = unbatched.path.memory.rows(
        "SELECT o.output->'decisions'->0->>'reason' AS reason FROM pipeline_stage_outputs o "
        "JOIN memory_events e ON e.id = o.event_id WHERE o.stage = 'reconcile' AND e.agent_id = :a "
        "AND e.text LIKE 'Honestly%'",
        a=unbatched.path.agent_id,
    )
    assert decisions[0]["reason"].startswith("decided by informed extraction")
