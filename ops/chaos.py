"""Outages under load: ``ops/chaos`` breaks a running stack and checks that nothing is lost or applied twice.

The stack is the whole of ``./ops/dev`` (API, three worker pools, Beat, Flower) on embedded
PostgreSQL and Redis in a temporary home (:class:`ops.bench.common.BenchStack`). Each scenario
first sends its messages to an undisturbed run (agents ``ctl-*``), then the same messages to
agents ``flt-*`` while the fault hits, and compares the two:

* ``redis``: Redis stopped for ``redis_down_s`` under a stream of POSTs, then started again.
* ``postgres``: PostgreSQL stopped (fast shutdown) for ``postgres_down_s`` under the stream, then
  started again; the API answers 503 with Retry-After meanwhile.
* ``kill+429``: the extraction model (a local OpenAI-compatible stub answering like a model that
  understands the generated chat) answers every third call 429 with ``Retry-After: 1``, and the
  ingest and apply workers are SIGKILLed twice during a batch import; the supervisor of
  ``./ops/dev`` (:meth:`ops.devstack.DevStack.restart_exited_children`) starts them again.

The client is a well-behaved one: on 503 it waits Retry-After and sends the same message (same
``message_id``) again. Per scenario it prints messages sent, accepted (answered 202, or 200 for
a message already stored), done, lost (accepted but not done), duplicated (facts stored more
times than in the undisturbed run, plus events stored twice for one message id), the answers by
status, the time to recover (from the end of the fault until every accepted message is done),
the peak memory of the stack, and whether the memory (active fact texts and entity keys per
agent) equals the undisturbed run's.

The sweeper runs every 2 s and re-enqueues runs idle for 10 s (``pipeline_sweep_interval_s``,
``pipeline_stale_after_s``; the defaults are 30 s and 600 s): recovery times depend on both.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg

from ops.bench.common import (
    BenchStack,
    MemorySampler,
    append_results,
    install_stop_signals,
    libpq_url,
    machine_info,
    markdown_table,
    mib,
    text_table,
    verdict,
)
from ops.bench.ingest import ChatGenerator, ChatLine, StubModel

CHAOS_ENV = {
    "ARANDU_PIPELINE_SWEEP_INTERVAL_S": "2",
    "ARANDU_PIPELINE_STALE_AFTER_S": "10",
    # Runs re-enqueued while they wait behind a backlog are not stuck: never fail them for it.
    "ARANDU_PIPELINE_MAX_SWEEPS": "10000",
}
LLM_ENV = {
    "ARANDU_LLM_PROVIDER": "openai",
    "ARANDU_LLM_API_KEY": "chaos",
    "ARANDU_LLM_MODEL": "stub-model",
    "ARANDU_EMBEDDING_PROVIDER": "hashing",
    "ARANDU_EMBEDDING_DIMENSIONS": "384",
}
SEND_THREADS = 4
# A message the API would not take within this long counts as not accepted.
SEND_DEADLINE_S = 180.0
BATCH_SIZE = 50


@dataclass(frozen=True)
class Sizes:
    """How much each scenario sends and how long each fault lasts."""

    agents: int
    per_agent: int
    llm_agents: int
    llm_per_agent: int
    redis_down_s: float
    postgres_down_s: float
    timeout_s: float


FULL = Sizes(
    agents=20, per_agent=30, llm_agents=20, llm_per_agent=50, redis_down_s=10, postgres_down_s=10, timeout_s=600
)
QUICK = Sizes(agents=5, per_agent=20, llm_agents=4, llm_per_agent=25, redis_down_s=4, postgres_down_s=4, timeout_s=120)


@dataclass
class Outcome:
    """What one scenario measured."""

    scenario: str
    sent: int = 0
    accepted: int = 0
    done: int = 0
    failed: int = 0
    lost: int = 0
    duplicated: int = 0
    answers: Counter[str] = field(default_factory=Counter)
    recover_s: float | None = None
    peak_rss: int = 0
    restarts: int = 0
    memory_equal: bool = False
    # Facts equal and entities equal by name, whatever type the offline skills gave them: two
    # undisturbed runs can type one name differently (the "baseline" scenario shows it).
    memory_equal_untyped: bool = False
    differences: list[str] = field(default_factory=list)
    # The stack's CPU per accepted message over the scenario (workers killed by it take theirs along).
    cpu_cell: str = ""

    @property
    def held(self) -> bool:
        """Every accepted message done, none lost or twice, no 500, memory as undisturbed."""
        return (
            self.accepted == self.sent == self.done
            and self.lost == 0
            and self.duplicated == 0
            and not any(code.startswith("5") and code != "503" for code in self.answers)
            and self.memory_equal_untyped
        )


@dataclass
class Sent:
    """The answers to one run of messages."""

    event_ids: dict[str, str] = field(default_factory=dict)  # message_id -> event_id
    answers: Counter[str] = field(default_factory=Counter)
    retry_after_missing: int = 0
    refused: list[str] = field(default_factory=list)


def workload(generator: ChatGenerator, agents: int, per_agent: int) -> dict[str, list[ChatLine]]:
    """The generated conversations, by logical agent name (the same in every run)."""
    return {f"a{index:02d}": generator.conversation(f"a{index:02d}", per_agent) for index in range(agents)}


def _body(line: ChatLine, index: int, prefix: str) -> dict[str, Any]:
    body = line.body()
    body["message_id"] = f"{prefix}-{line.message_id}"
    # One clock per agent: updates apply in the order they were said, whatever the delivery order.
    body["occurred_at"] = (datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=index)).isoformat()
    return body


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _send_until_accepted(
    client: httpx.Client, url: str, payload: dict[str, Any], sent: Sent, lock: threading.Lock
) -> dict[str, Any] | None:
    """POST until 200/202; wait Retry-After on 503; give up on any other answer or past the deadline."""
    deadline = time.monotonic() + SEND_DEADLINE_S
    while time.monotonic() < deadline:
        try:
            response = client.post(url, json=payload)
        except httpx.HTTPError as error:
            with lock:
                sent.answers[type(error).__name__] += 1
            time.sleep(1.0)
            continue
        with lock:
            sent.answers[str(response.status_code)] += 1
        if response.status_code in (200, 202):
            answer: dict[str, Any] = response.json()
            return answer
        if response.status_code == 503:
            wait = _retry_after(response)
            if wait is None:
                with lock:
                    sent.retry_after_missing += 1
            time.sleep(min(wait or 1.0, 10.0))
            continue
        return None
    return None


def send_singles(
    stack: BenchStack, conversations: dict[str, list[ChatLine]], prefix: str, progress: Callable[[int], None]
) -> Sent:
    """Each message alone (``POST .../messages``), agents interleaved, from a few client threads."""
    sent = Sent()
    lock = threading.Lock()
    order = [
        (agent, index, line)
        for index in range(max(len(lines) for lines in conversations.values()))
        for agent, lines in conversations.items()
        if index < len(lines)
        for line in [lines[index]]
    ]
    count = [0]

    def one(item: tuple[str, int, ChatLine]) -> None:
        agent, index, line = item
        payload = _body(line, index, prefix)
        url = f"/v1/agents/{prefix}-{agent}/messages"
        answer = _send_until_accepted(client, url, payload, sent, lock)
        with lock:
            if answer is None:
                sent.refused.append(payload["message_id"])
            else:
                sent.event_ids[payload["message_id"]] = str(answer["event_id"])
            count[0] += 1
            done = count[0]
        progress(done)

    with (
        httpx.Client(base_url=stack.api_url, headers=stack.json_headers, timeout=30) as client,
        ThreadPoolExecutor(SEND_THREADS) as pool,
    ):
        list(pool.map(one, order))
    return sent


def send_batches(stack: BenchStack, conversations: dict[str, list[ChatLine]], prefix: str) -> Sent:
    """Each agent's conversation as an import of batches (``POST .../messages/batch``)."""
    sent = Sent()
    lock = threading.Lock()
    with httpx.Client(base_url=stack.api_url, headers=stack.json_headers, timeout=60) as client:
        for agent, lines in conversations.items():
            for offset in range(0, len(lines), BATCH_SIZE):
                chunk = lines[offset : offset + BATCH_SIZE]
                payload = {"messages": [_body(line, offset + i, prefix) for i, line in enumerate(chunk)]}
                url = f"/v1/agents/{prefix}-{agent}/messages/batch"
                answer = _send_until_accepted(client, url, payload, sent, lock)
                ids = [str(event_id) for event_id in answer["event_ids"]] if answer else []
                for line, event_id in zip(chunk, ids, strict=False):
                    sent.event_ids[f"{prefix}-{line.message_id}"] = event_id
                if not answer:
                    sent.refused.extend(f"{prefix}-{line.message_id}" for line in chunk)
    return sent


class Memory:
    """Reads of the stack's database for one run (agents ``<prefix>-*``); reconnects after an outage."""

    def __init__(self, stack: BenchStack) -> None:
        self.url = libpq_url(stack.database_url)

    def _rows(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url, connect_timeout=5) as conn:
            return list(conn.execute(query, params).fetchall())

    def statuses(self, event_ids: Sequence[str]) -> Counter[str]:
        """Run statuses of ``event_ids`` (absent ones as ``missing``); empty while the database is down."""
        try:
            rows = self._rows(
                "SELECT status, count(*) FROM pipeline_runs WHERE event_id = ANY(%s::uuid[]) GROUP BY status",
                [list(event_ids)],
            )
        except psycopg.Error:
            return Counter()
        found = Counter({str(status): int(count) for status, count in rows})
        found["missing"] = len(event_ids) - sum(found.values())
        return +found

    def snapshot(self, prefix: str) -> dict[str, dict[str, Any]]:
        """Per logical agent: active fact texts, entity keys, every fact text ever stored (counted)."""
        like = f"{prefix}-%"
        cut = len(prefix) + 1
        memory: dict[str, dict[str, Any]] = {}

        def agent(name: str) -> dict[str, Any]:
            return memory.setdefault(name[cut:], {"active": Counter(), "entities": set(), "all": Counter()})

        for agent_id, text, active in self._rows(
            "SELECT agent_id, fact_text, valid_to IS NULL FROM memory_facts WHERE agent_id LIKE %s", [like]
        ):
            agent(agent_id)["all"][text] += 1
            if active:
                agent(agent_id)["active"][text] += 1
        for agent_id, key in self._rows(
            "SELECT agent_id, canonical_key FROM memory_entities WHERE agent_id LIKE %s", [like]
        ):
            agent(agent_id)["entities"].add(key)
        return memory

    def events_per_message(self, prefix: str) -> int:
        """Events stored beyond one per message id (a message accepted twice)."""
        rows = self._rows(
            "SELECT count(*) - count(DISTINCT message_id) FROM memory_events WHERE agent_id LIKE %s",
            [f"{prefix}-%"],
        )
        return int(rows[0][0] or 0)


def _untyped(keys: set[str]) -> set[str]:
    return {key.split(":", 1)[-1] for key in keys}


def untyped_equal(control: dict[str, dict[str, Any]], faulty: dict[str, dict[str, Any]]) -> bool:
    """Active facts equal and entity names equal per agent, ignoring the type part of entity keys."""
    empty: dict[str, Any] = {"active": Counter(), "entities": set()}
    return all(
        control.get(name, empty)["active"] == faulty.get(name, empty)["active"]
        and _untyped(control.get(name, empty)["entities"]) == _untyped(faulty.get(name, empty)["entities"])
        for name in set(control) | set(faulty)
    )


def compare(control: dict[str, dict[str, Any]], faulty: dict[str, dict[str, Any]]) -> tuple[bool, int, list[str]]:
    """Whether the memories match (active facts and entities per agent); facts stored extra; differences."""
    differences: list[str] = []
    extra = 0
    for name in sorted(set(control) | set(faulty)):
        want = control.get(name, {"active": Counter(), "entities": set(), "all": Counter()})
        got = faulty.get(name, {"active": Counter(), "entities": set(), "all": Counter()})
        if want["active"] != got["active"]:
            missing = sorted((want["active"] - got["active"]).elements())[:3]
            more = sorted((got["active"] - want["active"]).elements())[:3]
            differences.append(f"{name}: active facts differ (missing {missing}, extra {more})")
        if want["entities"] != got["entities"]:
            differences.append(f"{name}: entities differ ({sorted(want['entities'] ^ got['entities'])[:5]})")
        extra += sum((got["all"] - want["all"]).values())
    return not differences, extra, differences


def wait_done(
    stack: BenchStack, memory: Memory, event_ids: Sequence[str], timeout_s: float, outcome: Outcome
) -> Counter[str]:
    """Poll until every run is done or failed (restarting exited processes, as ./ops/dev does)."""
    deadline = time.monotonic() + timeout_s
    statuses: Counter[str] = Counter()
    while time.monotonic() < deadline:
        outcome.restarts += len(stack._require().restart_exited_children())
        statuses = memory.statuses(event_ids)
        if statuses and statuses["done"] + statuses["failed"] == len(event_ids):
            break
        time.sleep(0.25)
    return statuses


def _settle(outcome: Outcome, sent: Sent, statuses: Counter[str], total: int) -> None:
    outcome.sent = total
    outcome.accepted = len(sent.event_ids)
    outcome.done = statuses["done"]
    outcome.failed = statuses["failed"]
    outcome.lost = outcome.accepted - outcome.done
    outcome.answers = sent.answers
    if sent.retry_after_missing:
        outcome.answers["503 without Retry-After"] = sent.retry_after_missing


def control_run(stack: BenchStack, memory: Memory, conversations: dict[str, list[ChatLine]], *, batches: bool) -> Any:
    """The undisturbed run (agents ``ctl-*``); its memory snapshot."""
    if batches:
        sent = send_batches(stack, conversations, "ctl")
    else:
        sent = send_singles(stack, conversations, "ctl", _no_progress)
    statuses = wait_done(stack, memory, list(sent.event_ids.values()), 600, Outcome("control"))
    if statuses["done"] != len(sent.event_ids):
        raise RuntimeError(f"the undisturbed run did not finish: {dict(statuses)}")
    return memory.snapshot("ctl")


def _no_fault() -> None:
    return


def _no_progress(_: int) -> None:
    return


def outage_scenario(
    stack: BenchStack,
    sampler: MemorySampler,
    conversations: dict[str, list[ChatLine]],
    control: dict[str, dict[str, Any]],
    *,
    name: str,
    prefix: str,
    stop: Callable[[], None],
    start: Callable[[], None],
    down_s: float,
    timeout_s: float,
) -> Outcome:
    """Send the conversations as single messages; a third of the way in, ``stop`` for ``down_s``, then ``start``."""
    outcome = Outcome(name)
    memory = Memory(stack)
    total = sum(len(lines) for lines in conversations.values())
    trigger = threading.Event()
    fault_over: list[float] = []
    began, cpu = time.monotonic(), stack.cpu_snapshot()

    def progress(done: int) -> None:
        if done >= total // 3:
            trigger.set()

    def fault() -> None:
        trigger.wait()
        stop()
        time.sleep(down_s)
        start()
        fault_over.append(time.monotonic())

    breaker = threading.Thread(target=fault, name=f"fault-{name}", daemon=True)
    breaker.start()
    sent = send_singles(stack, conversations, prefix, progress)
    trigger.set()
    breaker.join()
    statuses = wait_done(stack, memory, list(sent.event_ids.values()), timeout_s, outcome)
    finished = time.monotonic()
    _settle(outcome, sent, statuses, total)
    outcome.cpu_cell = stack.cpu_snapshot().stack_cpu_cell(cpu, outcome.accepted, "message")
    if outcome.done == outcome.accepted:
        outcome.recover_s = finished - fault_over[0]
    outcome.peak_rss = sampler.peak(since=began)
    snapshot = memory.snapshot(prefix)
    outcome.memory_equal, extra, outcome.differences = compare(control, snapshot)
    outcome.memory_equal_untyped = untyped_equal(control, snapshot)
    outcome.duplicated = extra + memory.events_per_message(prefix)
    return outcome


class Throttling:
    """The stub's chat handler: every ``every``-th call answers 429 with ``Retry-After``; the rest, the model."""

    def __init__(self, model: StubModel, every: int = 3, retry_after_s: int = 1) -> None:
        self.model = model
        self.every = every
        self.retry_after_s = retry_after_s
        self.enabled = False
        self.calls = 0
        self.refused = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Any:
        from tests.support.openai_stub import StubReply

        with self._lock:
            self.calls += 1
            refuse = self.enabled and self.calls % self.every == 0
            self.refused += int(refuse)
        if refuse:
            return StubReply.error(429, "rate limited", headers={"Retry-After": str(self.retry_after_s)})
        return self.model(body)


def kill_and_throttle_scenario(
    stack: BenchStack,
    sampler: MemorySampler,
    conversations: dict[str, list[ChatLine]],
    control: dict[str, dict[str, Any]],
    *,
    throttling: Throttling,
    timeout_s: float,
) -> Outcome:
    """An import while a third of model calls are refused and the workers are SIGKILLed twice."""
    outcome = Outcome("kill+429")
    memory = Memory(stack)
    total = sum(len(lines) for lines in conversations.values())
    began, cpu = time.monotonic(), stack.cpu_snapshot()
    throttling.enabled = True
    try:
        sent = send_batches(stack, conversations, "flt")
        ids = list(sent.event_ids.values())
        last_kill = began
        for share in (0.2, 0.5):
            deadline = time.monotonic() + timeout_s
            while memory.statuses(ids)["done"] < share * len(ids) and time.monotonic() < deadline:
                # As ./ops/dev does: the workers killed last time come back.
                outcome.restarts += len(stack._require().restart_exited_children())
                time.sleep(0.1)
            for child in stack._require().children:
                if child.name.startswith(("worker-ingest", "worker-apply")):
                    child.signal_group(signal.SIGKILL)
            last_kill = time.monotonic()
        statuses = wait_done(stack, memory, ids, timeout_s, outcome)
        finished = time.monotonic()
    finally:
        throttling.enabled = False
    _settle(outcome, sent, statuses, total)
    outcome.cpu_cell = stack.cpu_snapshot().stack_cpu_cell(cpu, outcome.accepted, "message")
    if outcome.done == outcome.accepted:
        outcome.recover_s = finished - last_kill
    outcome.peak_rss = sampler.peak(since=began)
    snapshot = memory.snapshot("flt")
    outcome.memory_equal, extra, outcome.differences = compare(control, snapshot)
    outcome.memory_equal_untyped = untyped_equal(control, snapshot)
    outcome.duplicated = extra + memory.events_per_message("flt")
    return outcome


def run_scenarios(sizes: Sizes, scenarios: Sequence[str] = ("redis", "postgres", "kill+429")) -> list[Outcome]:
    """Start a stack, run the chosen scenarios at ``sizes``, stop it; the outcomes."""
    from tests.support.openai_stub import OpenAIStub

    generator = ChatGenerator(seed=40)
    outcomes: list[Outcome] = []
    with BenchStack(env=CHAOS_ENV, label="chaos") as stack, MemorySampler(stack) as sampler:
        stack.start()
        embedded = stack._require().embedded
        if embedded is None:
            raise RuntimeError("ops/chaos needs the embedded servers (unset ARANDU_DATABASE_URL / ARANDU_BROKER_URL)")
        offline = workload(generator, sizes.agents, sizes.per_agent)
        if {"baseline", "redis", "postgres"} & set(scenarios):
            control = control_run(stack, Memory(stack), offline, batches=False)
            faults = {
                # No fault: how far two undisturbed runs of the same messages agree.
                "baseline": (_no_fault, _no_fault, 0.0),
                "redis": (embedded.redis.stop, embedded.redis.start, sizes.redis_down_s),
                "postgres": (embedded.postgres.stop, embedded.postgres.start, sizes.postgres_down_s),
            }
            for number, name in enumerate(name for name in scenarios if name in faults):
                stop, start, down_s = faults[name]
                outcome = outage_scenario(
                    stack,
                    sampler,
                    offline,
                    control,
                    name=name,
                    prefix=f"flt{number}",
                    stop=stop,
                    start=start,
                    down_s=down_s,
                    timeout_s=sizes.timeout_s,
                )
                outcomes.append(outcome)
                print(summary_line(outcome), flush=True)
        if "kill+429" in scenarios:
            throttling = Throttling(StubModel(generator))
            with OpenAIStub(chat_handler=throttling, default_dimensions=384) as stub:
                stack.restart(database="arandu_llm", env={**LLM_ENV, "ARANDU_LLM_BASE_URL": stub.base_url})
                imported = workload(generator, sizes.llm_agents, sizes.llm_per_agent)
                control = control_run(stack, Memory(stack), imported, batches=True)
                outcome = kill_and_throttle_scenario(
                    stack, sampler, imported, control, throttling=throttling, timeout_s=sizes.timeout_s
                )
                outcome.answers["model calls refused (429)"] = throttling.refused
                outcomes.append(outcome)
                print(summary_line(outcome), flush=True)
    return outcomes


HEADERS = [
    "scenario",
    "sent",
    "accepted",
    "done",
    "lost",
    "duplicated",
    "failed",
    "time to recover",
    "peak RSS",
    "process restarts",
    "memory = undisturbed",
    "answers",
    "CPU per message (whole stack)",
    "target: all done, none lost or twice, no 500, memory as undisturbed",
]


def row(outcome: Outcome) -> list[str]:
    """One table row."""
    recover = f"{outcome.recover_s:.1f} s" if outcome.recover_s is not None else "never"
    answers = ", ".join(f"{code}: {count}" for code, count in sorted(outcome.answers.items()))
    return [
        outcome.scenario,
        str(outcome.sent),
        str(outcome.accepted),
        str(outcome.done),
        str(outcome.lost),
        str(outcome.duplicated),
        str(outcome.failed),
        recover,
        mib(outcome.peak_rss),
        str(outcome.restarts),
        "yes" if outcome.memory_equal else ("names equal, types differ" if outcome.memory_equal_untyped else "NO"),
        answers,
        outcome.cpu_cell or "n/a",
        verdict(outcome.held),
    ]


def summary_line(outcome: Outcome) -> str:
    """One line per scenario, as it finishes."""
    return f"{outcome.scenario}: " + ", ".join(f"{h} {v}" for h, v in zip(HEADERS[1:], row(outcome)[1:], strict=True))


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``ops/chaos``."""
    parser = argparse.ArgumentParser(prog="ops/chaos", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes and short faults (what the test suite runs)")
    parser.add_argument(
        "--only", action="append", choices=["baseline", "redis", "postgres", "kill+429"], help="run only these"
    )
    parser.add_argument("--no-record", action="store_true", help="do not append the table to ops/bench/RESULTS.md")
    args = parser.parse_args(argv)
    install_stop_signals()
    sizes = QUICK if args.quick else FULL
    machine = machine_info()
    started = time.monotonic()
    outcomes = run_scenarios(sizes, args.only or ("redis", "postgres", "kill+429"))
    rows = [row(outcome) for outcome in outcomes]
    print(text_table(HEADERS, rows))
    for outcome in outcomes:
        for difference in outcome.differences[:5]:
            print(f"  {outcome.scenario}: {difference}")
    held = all(outcome.held for outcome in outcomes)
    print(f"{'every scenario held' if held else 'A SCENARIO FAILED'} ({time.monotonic() - started:.0f} s)")
    if not args.no_record:
        faults = (
            f"Redis stopped {sizes.redis_down_s:.0f} s and PostgreSQL stopped {sizes.postgres_down_s:.0f} s under "
            f"{sizes.agents * sizes.per_agent} single POSTs from {sizes.agents} agents; workers SIGKILLed twice and "
            f"every third model call answered 429 (Retry-After: 1) during an import of "
            f"{sizes.llm_agents * sizes.llm_per_agent} messages in batches of {BATCH_SIZE}"
        )
        section = "\n".join(
            [
                f"## Outages (ops/chaos{' --quick' if args.quick else ''}), {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
                "",
                "- command: `" + " ".join(["./ops/chaos", *(sys.argv[1:] if argv is None else argv)]) + "`",
                f"- machine: {machine.describe()}",
                "",
                f"{faults}. Each compared with the same messages on an undisturbed run of the same stack. "
                "Time to recover: from the end of the fault (the server back, the last kill) until every "
                "accepted message is done; the sweeper runs every 2 s for runs idle 10 s. Times as measured "
                'on a shared host whose speed varies about 2x. "Names equal, types differ" is not the '
                'outage: docs/performance.md, "Outages".',
                "",
                markdown_table(HEADERS, rows),
            ]
        )
        append_results(section)
    return 0 if held else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
