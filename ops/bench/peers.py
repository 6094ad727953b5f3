"""This service beside its peers, in one run: ``python -m ops.bench peers [--quick]`` (or ``./ops/bench/peers``).

The peers are the reference SDK this service is modelled on (PyPI ``arandu`` 0.14.3, a
single-process asyncio library) and mem0 OSS (``mem0ai`` 2.2.x with its pgvector store). They are
installed from PyPI, at pinned versions, into a virtual environment of their own
(:func:`ensure_peers_venv`, kept between runs), and driven by ``ops/bench/peers_runner.py`` in a
process of that environment; their code is only run, never copied.

The three systems share, in the same run:

* the machine and one embedded PostgreSQL 18 + pgvector (a database each);
* one OpenAI-compatible stub (:mod:`ops.bench.peers_stub`) answering every chat call after the
  same latency (500 ms) with the same extraction rule, and serving the same hashing embeddings
  over HTTP (each system pays for its embedding calls);
* the data: the shared LoCoMo sample, one conversation per agent, the first :attr:`Sizes.turns`
  turns of each; the questions whose evidence lies in those turns.

For each system, one after the other (this service first, its processes stopped before the peers
run): end-to-end messages/s with one writer (one turn after the other, each waited for) and with
the system's natural concurrency (this service: imports handled by its workers; the peers: one
writer per conversation, asyncio tasks or threads), chat calls and tokens per message, retrieve
p50/p95 and retrieves/s with 16 concurrent callers (the LLM reranker off, then the defaults),
evidence recall@5/@10 of the retrieved items, peak memory and CPU per message. The table gives
each figure and this service's ratio to the better peer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import psutil
import psycopg

from ops.bench.common import (
    BENCHMARK_ROLE,
    BenchStack,
    MachineInfo,
    append_results,
    machine_info,
    markdown_table,
    mib,
    percentile,
    shielded,
    text_table,
    verdict,
)
from ops.bench.http_load import send_all
from ops.bench.ingest import LOCOMO_PATH, run_stats, wait_for_runs
from ops.bench.locomo import Question, load_conversations, ranked_ids
from ops.bench.peers_stub import ARANDU, MEM0, OURS, PeerModel, Tally

RUNNER = Path(__file__).resolve().parent / "peers_runner.py"
PEERS: dict[str, str] = {"arandu": ARANDU, "mem0": MEM0}
# Exact versions: a new release of a peer must not change the comparison silently.
PEER_REQUIREMENTS = ("arandu[openai]==0.14.3", "mem0ai==2.2.1", "psycopg[binary,pool]>=3.2")
STUB_LATENCY_S = 0.5
CLIENTS = 16
HASHING_DIMENSIONS = 384
OUR_SETTINGS = {
    "ARANDU_LLM_PROVIDER": "openai",
    "ARANDU_LLM_API_KEY": "bench",
    "ARANDU_EMBEDDING_PROVIDER": "openai",
    "ARANDU_EMBEDDING_DIMENSIONS": str(HASHING_DIMENSIONS),
    # As the ingest benchmark's LLM phases: a worker waiting on a 500 ms model needs threads.
    "ARANDU_INGEST_CONCURRENCY": "64",
    # The peers run at the shell's priority: at the default nice of 10 (and their PostgreSQL
    # backends with them), this service's workers on a host shared with other loads got ~10% of
    # the CPU the peers got (1 msg/s here beside a load average of 30).
    "ARANDU_WORKER_NICE": "0",
}
FORMULA = {"enable_reranker": False}
_FINISHED_SQL = "SELECT count(*) FILTER (WHERE status IN ('done', 'failed')) FROM pipeline_runs WHERE agent_id = %s"
POLL_S = 0.01
SAMPLE_S = 0.5
INSTALL_TIMEOUT_S = 900.0
# Targets, as ratios within the run (issue 39).
TARGET_THROUGHPUT_RATIO = 20.0
TARGET_P95_RATIO = 0.5


@dataclass(frozen=True)
class Sizes:
    """How much of the sample each system ingests."""

    turns: int = 200
    sequential: int = 40
    timeout_s: float = 1500.0

    @classmethod
    def quick(cls) -> Sizes:
        """A tenth: a smoke run."""
        return cls(turns=20, sequential=6, timeout_s=300.0)


# =====================================================================================
# The peers' virtual environment
# =====================================================================================


class PeerUnavailableError(RuntimeError):
    """A peer could not be installed or started here; the reason goes in the table."""


def default_venv_dir() -> Path:
    """``$TMPDIR/arandu-bench-peers/venv-<hash of the requirements and Python version>``."""
    key = hashlib.sha256(("\n".join(PEER_REQUIREMENTS) + f"\npython {sys.version_info[:2]}").encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / "arandu-bench-peers" / f"venv-{key}"


def ensure_peers_venv(folder: Path) -> Path:
    """The Python of the peers' venv at ``folder``, created and installed from PyPI unless already there.

    A stamp file records the requirements of a finished install: a venv with the same
    requirements is reused as it is (no network); another one is rebuilt.
    """
    python = folder / "bin" / "python"
    stamp = folder / ".peers-installed"
    wanted = "\n".join(PEER_REQUIREMENTS)
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    print(f"installing the peers into {folder} ({', '.join(PEER_REQUIREMENTS)}) from PyPI...", flush=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True, capture_output=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *PEER_REQUIREMENTS],
            check=True,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
        )
    except subprocess.CalledProcessError as error:
        tail = " ".join(str(error.stderr or error.stdout or "").split())[-400:]
        raise PeerUnavailableError(f"pip install failed: {tail}") from None
    except subprocess.TimeoutExpired:
        raise PeerUnavailableError(f"pip install took over {INSTALL_TIMEOUT_S:.0f} s") from None
    stamp.write_text(wanted)
    return python


# =====================================================================================
# Data
# =====================================================================================


@dataclass
class Workload:
    """What every system ingests and is asked."""

    sequential_agent: str
    sequential: list[dict[str, Any]]
    conversations: dict[str, list[dict[str, Any]]]
    questions: list[Question]

    @property
    def messages(self) -> int:
        """Turns of the concurrent run."""
        return sum(len(turns) for turns in self.conversations.values())

    def as_json(self) -> dict[str, Any]:
        """The data file the peers' runner reads."""
        return {
            "sequential": {"agent": self.sequential_agent, "turns": self.sequential},
            "concurrent": self.conversations,
            "questions": [
                {"id": str(index), "agent": question.agent_id, "text": question.text}
                for index, question in enumerate(self.questions)
            ],
        }


def build_workload(sizes: Sizes) -> Workload:
    """The first ``sizes.turns`` turns of each conversation and the questions they answer."""
    sample = load_conversations(LOCOMO_PATH, quick=False)
    conversations = {agent: turns[: sizes.turns] for agent, turns in sample.messages.items()}
    kept = {agent: {turn["message_id"] for turn in turns} for agent, turns in conversations.items()}
    questions = [q for q in sample.questions if all(item in kept[q.agent_id] for item in q.evidence)]
    first = next(iter(sample.messages))
    return Workload(
        sequential_agent=f"seq-{first}",
        sequential=sample.messages[first][: sizes.sequential],
        conversations=conversations,
        questions=questions,
    )


# =====================================================================================
# What is measured, per system
# =====================================================================================


@dataclass
class Pass:
    """One pass of the questions with ``CLIENTS`` concurrent callers."""

    latencies: list[float] = field(default_factory=list)
    wall_s: float = math.nan
    ranked: dict[str, list[str]] = field(default_factory=dict)
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    tally: Tally = field(default_factory=Tally)
    # CPU of the system's processes and PostgreSQL during the pass (this service: not its callers).
    cpu_s: float = math.nan
    # Cores used meanwhile by processes of neither the system nor the benchmark (a shared host).
    foreign_cores: float = math.nan
    # CPU of the system's busiest process (PostgreSQL apart) over the pass, in cores: a Python
    # process runs one thread at a time, so a figure near 1 says the process, not the host, is the bound.
    busiest_process_cores: float = math.nan

    @property
    def rate(self) -> float:
        """Retrieves per second."""
        return len(self.latencies) / self.wall_s if self.wall_s > 0 else math.nan

    @property
    def busy_cores(self) -> float:
        """CPU of the system's processes and PostgreSQL over the pass, in cores."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else math.nan

    def recall(self, questions: Sequence[Question], k: int) -> float:
        """Mean share of each question's evidence turns among the first ``k`` ranked ids, in %."""
        values = []
        for index, question in enumerate(questions):
            ids = self.ranked.get(str(index), [])[:k]
            values.append(len(set(question.evidence) & set(ids)) / len(question.evidence))
        return 100.0 * sum(values) / len(values) if values else math.nan


@dataclass
class Ingest:
    """One ingest run: messages, wall time, calls."""

    messages: int = 0
    wall_s: float = math.nan
    latencies: list[float] = field(default_factory=list)
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    tally: Tally = field(default_factory=Tally)
    embedding_requests: int = 0
    cpu_s: float = math.nan
    # Cores used meanwhile by processes of neither the system nor the benchmark (a shared host).
    foreign_cores: float = math.nan

    @property
    def rate(self) -> float:
        """Messages per second, end to end."""
        return self.messages / self.wall_s if self.wall_s > 0 else math.nan

    def per_message(self, value: float) -> float:
        """``value`` / messages."""
        return value / self.messages if self.messages else math.nan


@dataclass
class SystemRun:
    """Everything measured for one system; ``unavailable`` says why it did not run."""

    name: str
    versions: str = ""
    unavailable: str = ""
    sequential: Ingest = field(default_factory=Ingest)
    concurrent: Ingest = field(default_factory=Ingest)
    formula: Pass = field(default_factory=Pass)
    default: Pass = field(default_factory=Pass)
    peak_bytes: int = 0
    postgres_peak_bytes: int = 0
    notes: list[str] = field(default_factory=list)


# =====================================================================================
# Memory and CPU of the current system
# =====================================================================================


class Sampler:
    """Samples the current system's own memory (PSS) and PostgreSQL's every 0.5 s; peaks per system."""

    def __init__(self, postgres_dir: Path) -> None:
        self.postgres_dir = postgres_dir
        self.measure: Callable[[], int] | None = None
        self.run: SystemRun | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="peers-sampler", daemon=True)

    def start(self) -> None:
        """Start sampling in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join(timeout=10)

    def follow(self, run: SystemRun | None, measure: Callable[[], int] | None) -> None:
        """Attribute the next samples to ``run``, measuring its processes with ``measure``."""
        self.run, self.measure = run, measure

    def sample(self) -> None:
        """One sample now."""
        from ops.rss import stack_memory_bytes

        run, measure = self.run, self.measure
        if run is None or measure is None:
            return
        with contextlib.suppress(Exception):  # a process exiting mid-walk: skip this sample
            run.peak_bytes = max(run.peak_bytes, measure())
            run.postgres_peak_bytes = max(run.postgres_peak_bytes, stack_memory_bytes([], [self.postgres_dir]))

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()


def postgres_cpu_s(postgres_dir: Path) -> float:
    """CPU seconds of the embedded PostgreSQL so far, ended backends included (through the postmaster)."""
    from ops.rss import stack_processes

    total = 0.0
    for proc in stack_processes([], [postgres_dir]):
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


@dataclass(frozen=True)
class CpuMark:
    """CPU seconds of a peer's process, PostgreSQL, this process and the whole machine, at a moment."""

    taken_at: float
    runner: float
    postgres: float
    own: float
    machine: float

    @classmethod
    def now(cls, pid: int, postgres_dir: Path) -> CpuMark:
        """Read them all now."""
        from ops.bench.common import machine_busy_seconds

        own = psutil.Process().cpu_times()
        return cls(
            time.monotonic(),
            process_cpu_s(pid),
            postgres_cpu_s(postgres_dir),
            own.user + own.system,
            machine_busy_seconds(),
        )

    def system_since(self, earlier: CpuMark) -> float:
        """CPU seconds of the peer and PostgreSQL since ``earlier``."""
        return (self.runner - earlier.runner) + (self.postgres - earlier.postgres)

    def foreign_since(self, earlier: CpuMark) -> float:
        """Cores used by other processes on the machine since ``earlier``."""
        window = self.taken_at - earlier.taken_at
        if window <= 0:
            return math.nan
        ours = self.system_since(earlier) + (self.own - earlier.own)
        return max(self.machine - earlier.machine - ours, 0.0) / window


def process_cpu_s(pid: int) -> float:
    """CPU seconds of a process and its children."""
    with contextlib.suppress(psutil.Error):
        proc = psutil.Process(pid)
        total = 0.0
        for item in [proc, *proc.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                times = item.cpu_times()
                total += times.user + times.system
        return total
    return 0.0


# =====================================================================================
# This service
# =====================================================================================


def _tally(model: PeerModel, owner: str) -> tuple[Tally, int]:
    tallies, requests, _ = model.take()
    return tallies.get(owner, Tally()), requests


def run_ours(stack: BenchStack, model: PeerModel, workload: Workload, sizes: Sizes, sampler: Sampler) -> SystemRun:
    """This service through its API: one writer, then imports, then the two retrieve passes."""
    from ops.rss import stack_memory_bytes

    run = SystemRun(name=OURS, versions="this checkout")
    redis_dirs = [folder for folder in stack.data_dirs() if folder != sampler.postgres_dir]
    sampler.follow(run, lambda: stack_memory_bytes(stack.process_pids(), redis_dirs))
    headers = stack.json_headers
    url = stack.database_url

    print(f"{OURS}: one writer, {len(workload.sequential)} turns, each waited for...", flush=True)
    model.take()
    started = time.perf_counter()
    with (
        httpx.Client(base_url=stack.api_url, headers=headers, timeout=60) as client,
        psycopg.connect(url, autocommit=True) as conn,
    ):
        for index, turn in enumerate(workload.sequential):
            moment = time.perf_counter()
            response = client.post(f"/v1/agents/{workload.sequential_agent}/messages", json=turn)
            if response.status_code not in (200, 202):
                raise RuntimeError(f"message refused: {response.status_code} {response.text[:300]}")
            while True:
                row = conn.execute(
                    _FINISHED_SQL,
                    (workload.sequential_agent,),
                ).fetchone()
                if row is not None and int(row[0]) > index:
                    break
                if time.perf_counter() - moment > 120:
                    raise RuntimeError(f"turn {turn['message_id']} not processed within 120 s")
                time.sleep(POLL_S)
            run.sequential.latencies.append(time.perf_counter() - moment)
    run.sequential.wall_s = time.perf_counter() - started
    run.sequential.messages = len(workload.sequential)
    run.sequential.tally, run.sequential.embedding_requests = _tally(model, OURS)
    failed = run_stats(url, [workload.sequential_agent], len(workload.sequential))
    run.sequential.failed = failed.failed

    print(f"{OURS}: {workload.messages:,} turns as {len(workload.conversations)} imports (its workers)...", flush=True)
    before = stack.cpu_snapshot()
    agents = list(workload.conversations)

    async def send() -> None:
        async with httpx.AsyncClient(base_url=stack.api_url, headers=headers, timeout=120) as client:
            for agent, turns in workload.conversations.items():
                response = await client.post(f"/v1/agents/{agent}/imports", json={"messages": turns})
                if response.status_code != 202:
                    raise RuntimeError(f"import refused: {response.status_code} {response.text[:300]}")

    asyncio.run(send())
    _, _, _, timed_out = wait_for_runs(
        url, agents, workload.messages, timeout_s=sizes.timeout_s, label=OURS, alive=stack.processes_exited
    )
    after = stack.cpu_snapshot()
    stats = run_stats(url, agents, workload.messages)
    run.concurrent.messages = workload.messages
    run.concurrent.wall_s = stats.span_s
    run.concurrent.latencies = stats.latencies
    run.concurrent.failed = stats.failed + (workload.messages - stats.done - stats.failed)
    run.concurrent.errors = [f"{count} x {error}" for error, count in stats.errors.most_common(3)]
    if timed_out:
        run.concurrent.errors.append(f"timed out after {sizes.timeout_s:.0f} s")
    run.concurrent.tally, run.concurrent.embedding_requests = _tally(model, OURS)
    spent = after.since(before)
    run.concurrent.cpu_s = sum(seconds for role, seconds in spent.items() if role != "benchmark process")
    run.concurrent.foreign_cores = after.foreign_share(before)

    for label, overrides, target in (("formula", FORMULA, run.formula), ("default", None, run.default)):
        print(f"{OURS}: {len(workload.questions):,} questions, {CLIENTS} clients, retrieval {label}...", flush=True)
        if overrides is FORMULA:
            _retrieve_pass(stack, workload, overrides, Pass(), warm_up=True)
        model.take()
        _retrieve_pass(stack, workload, overrides, target)
        target.tally, _ = _tally(model, OURS)
    sampler.sample()
    return run


def _retrieve_pass(
    stack: BenchStack, workload: Workload, overrides: dict[str, Any] | None, into: Pass, *, warm_up: bool = False
) -> None:
    """The questions with ``CLIENTS`` concurrent callers; ``warm_up``: the first few, untimed, as the peers do.

    The callers are the minimal HTTP client (:mod:`ops.bench.http_load`), whose answers are read
    after the pass: the peers' callers cost nothing beyond their library's own work, and httpx's
    ~8 ms of CPU per request (plus parsing each answer) would take the shared cores, and the GIL
    of the process that serves the stub's embeddings, from the system measured.
    """
    questions = workload.questions[:CLIENTS] if warm_up else workload.questions
    requests = []
    for question in questions:
        body: dict[str, Any] = {"query": question.text}
        if overrides:
            body["config_overrides"] = overrides
        requests.append((f"/v1/agents/{question.agent_id}/retrieve", json.dumps(body).encode()))
    before = stack.cpu_snapshot()
    moment = time.perf_counter()
    outcome = asyncio.run(
        send_all(stack.api_url, stack.json_headers, requests, concurrency=CLIENTS, expect=200, keep_bodies=True)
    )
    into.wall_s = time.perf_counter() - moment
    after = stack.cpu_snapshot()
    into.cpu_s = after.stack_seconds_since(before)
    into.foreign_cores = after.foreign_share(before)
    # The roles are the stack's processes (the worker pools idle here); the embedded servers and
    # the benchmark's own process are not the system's Python.
    own_roles = {
        role: seconds
        for role, seconds in after.since(before).items()
        if role not in ("postgres", "redis") and role != BENCHMARK_ROLE
    }
    if into.wall_s > 0:
        into.busiest_process_cores = max(own_roles.values(), default=math.nan) / into.wall_s
    into.errors = outcome.errors[:3]
    for latency, status in zip(outcome.latencies, outcome.statuses, strict=True):
        if status == 200:
            into.latencies.append(latency)
    into.failed = len(questions) - len(into.latencies)
    for index, body in outcome.bodies.items():
        with contextlib.suppress(ValueError):
            answer = json.loads(body)
            into.ranked[str(index)] = [item for item, _ in ranked_ids(_answer(answer), {})[0]]


def _answer(payload: dict[str, Any]) -> SimpleNamespace:
    """The API's retrieve answer as the objects :func:`ops.bench.locomo.ranked_ids` reads."""
    facts = [
        SimpleNamespace(
            message_id=item.get("message_id"),
            source_event_id=item.get("source_event_id"),
            score=float(item.get("score") or 0.0),
            fact_text=item.get("fact_text") or "",
        )
        for item in payload.get("facts", [])
    ]
    events = [
        SimpleNamespace(
            event_id=item.get("event_id"),
            message_id=item.get("message_id"),
            score=float(item.get("score") or 0.0),
            speaker=item.get("speaker") or "",
            text=item.get("text") or "",
        )
        for item in payload.get("events", [])
    ]
    return SimpleNamespace(facts=facts, events=events)


# =====================================================================================
# A peer
# =====================================================================================


def run_peer(
    key: str,
    *,
    python: Path,
    stack: BenchStack,
    model: PeerModel,
    stub_url: str,
    workload: Workload,
    data_file: Path,
    sizes: Sizes,
    sampler: Sampler,
) -> SystemRun:
    """Start the runner for one peer in the peers' venv and follow its phases."""
    run = SystemRun(name=PEERS[key])
    devstack = stack._require()
    assert devstack.embedded is not None
    sqlalchemy_url = devstack.embedded.postgres.ensure_database(f"peer_{key}")
    home = Path(str(stack.home)) / f"peer-{key}"
    home.mkdir(parents=True, exist_ok=True)
    job = {
        "system": key,
        "sqlalchemy_url": sqlalchemy_url,
        "database_url": sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1),
        "base_url": stub_url,
        "data": str(data_file),
        "home": str(home),
        "clients": CLIENTS,
        "dimensions": 1536,
    }
    job_file = home / "job.json"
    job_file.write_text(json.dumps(job))
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("ARANDU_", "OPENAI_", "MEM0_", "PYTHON", "VIRTUAL_ENV"))
    }
    env.update(
        {
            "HOME": str(home),
            "OPENAI_API_KEY": "bench",
            "OPENAI_BASE_URL": stub_url,
            "MEM0_TELEMETRY": "False",
            "MEM0_DIR": str(home / "mem0"),
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    log_path = home / "runner.log"
    print(f"{run.name}: starting its runner (log {log_path})...", flush=True)
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [str(python), str(RUNNER), str(job_file)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            cwd=str(home),
        )
        try:
            _follow(process, run=run, model=model, sampler=sampler, sizes=sizes, workload=workload, log=log)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)
    if run.unavailable:
        tail = log_path.read_text(errors="replace")[-600:] if log_path.exists() else ""
        if tail:
            run.notes.append(f"{run.name} runner log ends: {' '.join(tail.split())[-400:]}")
    return run


def _follow(
    process: subprocess.Popen[str],
    *,
    run: SystemRun,
    model: PeerModel,
    sampler: Sampler,
    sizes: Sizes,
    workload: Workload,
    log: Any,
) -> None:
    from ops.rss import stack_memory_bytes

    assert process.stdout is not None
    assert process.stdin is not None
    sampler.follow(run, lambda: stack_memory_bytes([process.pid]))
    postgres_dir = sampler.postgres_dir
    cpu_mark = CpuMark.now(process.pid, postgres_dir)
    deadline = time.monotonic() + sizes.timeout_s * 2
    for line in process.stdout:
        if time.monotonic() > deadline:
            run.unavailable = "gave up: the runner took too long"
            return
        if not line.startswith("@@peers "):
            log.write(line)
            continue
        message = json.loads(line[len("@@peers ") :])
        event = message.get("event")
        if event == "hello":
            versions = message.get("versions", {})
            run.versions = ", ".join(f"{name} {version}" for name, version in versions.items())
            wanted = "arandu" if run.name == ARANDU else "mem0ai"
            if versions.get(wanted, "missing") == "missing":
                run.unavailable = f"{wanted} is not installed in the peers' venv"
                return
        elif event == "progress":
            print(
                f"  {run.name}: {message.get('done', 0):,} turns written, {message.get('seconds', 0):.0f} s", flush=True
            )
        elif event == "failed":
            run.unavailable = f"the runner failed: {message.get('error')}"
            log.write(str(message.get("traceback", "")))
            return
        elif event == "boundary":
            ended, results, begins = message.get("ended"), message.get("results") or {}, message.get("begins")
            tallies, requests, _ = model.take()
            tally = tallies.get(run.name, Tally())
            cpu_now = CpuMark.now(process.pid, postgres_dir)
            if ended in ("sequential", "concurrent"):
                ingest = run.sequential if ended == "sequential" else run.concurrent
                ingest.messages = int(results.get("messages", 0))
                ingest.wall_s = float(results.get("wall_s", math.nan))
                ingest.latencies = [float(v) for v in results.get("latencies", [])]
                ingest.failed = int(results.get("failed", 0))
                ingest.errors = list(results.get("errors", []))
                ingest.tally, ingest.embedding_requests = tally, requests
                ingest.cpu_s = cpu_now.system_since(cpu_mark)
                ingest.foreign_cores = cpu_now.foreign_since(cpu_mark)
            elif ended in ("retrieve_formula", "retrieve_default"):
                target = run.formula if ended == "retrieve_formula" else run.default
                target.latencies = [float(v) for v in results.get("latencies", [])]
                target.wall_s = float(results.get("wall_s", math.nan))
                target.ranked = {str(k): list(v) for k, v in (results.get("ranked") or {}).items()}
                target.failed = int(results.get("failed", 0))
                target.errors = list(results.get("errors", []))
                target.tally = tally
                if results.get("figures_of") == "retrieve_formula":
                    # The figures of the pass before (mem0: one pass for both rows), its CPU with them.
                    target.cpu_s, target.foreign_cores = run.formula.cpu_s, run.formula.foreign_cores
                    target.busiest_process_cores = run.formula.busiest_process_cores
                else:
                    target.cpu_s = cpu_now.system_since(cpu_mark)
                    target.foreign_cores = cpu_now.foreign_since(cpu_mark)
                    if target.wall_s > 0:
                        target.busiest_process_cores = (cpu_now.runner - cpu_mark.runner) / target.wall_s
                if results.get("note"):
                    run.notes.append(f"{run.name}: {results['note']}.")
            cpu_mark = cpu_now
            if begins:
                label = {
                    "sequential": f"one writer, {len(workload.sequential)} turns",
                    "concurrent": (f"{workload.messages:,} turns, one writer per conversation"),
                    "warm_up": f"the first {CLIENTS} questions, untimed",
                }.get(begins, f"{len(workload.questions):,} questions, {CLIENTS} clients")
                print(f"{run.name}: {begins}: {label}...", flush=True)
            sampler.sample()
            process.stdin.write("go\n")
            process.stdin.flush()
        elif event == "done":
            return
    if process.wait(timeout=60) != 0 and not run.unavailable:
        run.unavailable = f"the runner exited with code {process.returncode}"


# =====================================================================================
# Report
# =====================================================================================

HIGHER, LOWER = "higher", "lower"


def _best_peer(values: Sequence[float], better: str) -> float:
    usable = [value for value in values if not math.isnan(value)]
    if not usable:
        return math.nan
    return max(usable) if better == HIGHER else min(usable)


def _ratio(ours: float, best: float) -> str:
    if math.isnan(ours) or math.isnan(best) or best == 0:
        return "n/a"
    return f"{ours / best:,.2f}x"


@dataclass
class Measure:
    """One row: a figure per system, which way is better, and how it is shown."""

    name: str
    values: dict[str, float]
    better: str
    show: Callable[[float], str]
    texts: dict[str, str] = field(default_factory=dict)
    target: str = ""
    # False where the systems' figures do not measure the same thing: no ratio is shown.
    compare: bool = True


def _fmt(pattern: str) -> Callable[[float], str]:
    return lambda value: "n/a" if math.isnan(value) else pattern.format(value)


def build_rows(runs: Sequence[SystemRun], workload: Workload) -> tuple[list[list[str]], dict[str, bool], list[str]]:
    """The table (one row per measure), the targets, and notes."""
    ours = runs[0]
    peers = runs[1:]
    questions = workload.questions

    def each(getter: Callable[[SystemRun], float]) -> dict[str, float]:
        out: dict[str, float] = {}
        for run in runs:
            try:
                out[run.name] = math.nan if run.unavailable else getter(run)
            except (ZeroDivisionError, ValueError):
                out[run.name] = math.nan
        return out

    def pairs(latencies: Callable[[SystemRun], list[float]], scale: float, pattern: str) -> dict[str, str]:
        return {
            run.name: " / ".join(pattern.format(percentile(latencies(run), pct) * scale) for pct in (50, 95))
            for run in runs
            if not run.unavailable
        }

    measures = [
        Measure(
            "messages/s end to end, one writer (each turn waited for)",
            each(lambda r: r.sequential.rate),
            HIGHER,
            _fmt("{:,.2f}"),
        ),
        Measure(
            "messages/s end to end, natural concurrency",
            each(lambda r: r.concurrent.rate),
            HIGHER,
            _fmt("{:,.2f}"),
            target=f">= {TARGET_THROUGHPUT_RATIO:.0f}x the better peer",
        ),
        Measure(
            "latency per message p50 / p95, natural concurrency (s; ours counts the import's queueing)",
            each(lambda r: percentile(r.concurrent.latencies, 95)),
            LOWER,
            _fmt("{:,.2f}"),
            compare=False,
            texts=pairs(lambda r: r.concurrent.latencies, 1.0, "{:,.2f}"),
        ),
        Measure(
            "chat calls per message, natural concurrency",
            each(lambda r: r.concurrent.per_message(r.concurrent.tally.total_calls)),
            LOWER,
            _fmt("{:,.3f}"),
            target="<= the better peer's",
        ),
        Measure(
            "chat calls per message, one writer",
            each(lambda r: r.sequential.per_message(r.sequential.tally.total_calls)),
            LOWER,
            _fmt("{:,.3f}"),
        ),
        Measure(
            "chat tokens per message, natural concurrency",
            each(lambda r: r.concurrent.per_message(r.concurrent.tally.tokens)),
            LOWER,
            _fmt("{:,.0f}"),
        ),
        Measure(
            "embedding requests per message, natural concurrency",
            each(lambda r: r.concurrent.per_message(r.concurrent.embedding_requests)),
            LOWER,
            _fmt("{:,.2f}"),
        ),
        Measure(
            "CPU per message, natural concurrency (ms; the system's processes + PostgreSQL)",
            each(lambda r: r.concurrent.per_message(r.concurrent.cpu_s) * 1000.0),
            LOWER,
            _fmt("{:,.1f}"),
        ),
        Measure(
            "other processes on the shared host during that ingest (cores of 2)",
            each(lambda r: r.concurrent.foreign_cores),
            LOWER,
            _fmt("{:.2f}"),
            compare=False,
        ),
        Measure(
            f"retrieve p50 / p95, {CLIENTS} clients, LLM reranker off (ms)",
            each(lambda r: percentile(r.formula.latencies, 95) * 1000.0),
            LOWER,
            _fmt("{:,.1f}"),
            texts=pairs(lambda r: r.formula.latencies, 1000.0, "{:,.1f}"),
            target=f"p95 <= {TARGET_P95_RATIO}x the better peer",
        ),
        Measure(
            f"retrieves/s, {CLIENTS} clients, LLM reranker off",
            each(lambda r: r.formula.rate),
            HIGHER,
            _fmt("{:,.1f}"),
        ),
        Measure(
            "CPU per retrieve, LLM reranker off (ms; the system's processes + PostgreSQL)",
            each(lambda r: r.formula.cpu_s / len(r.formula.latencies) * 1000.0),
            LOWER,
            _fmt("{:,.1f}"),
        ),
        Measure(
            "cores busy during that pass: the system's processes + PostgreSQL / its busiest process",
            each(lambda r: r.formula.busy_cores),
            HIGHER,
            _fmt("{:.2f}"),
            compare=False,
            texts={
                r.name: f"{r.formula.busy_cores:.2f} / {r.formula.busiest_process_cores:.2f}"
                for r in runs
                if not r.unavailable
            },
        ),
        Measure(
            "other processes on the shared host during that pass (cores of 2)",
            each(lambda r: r.formula.foreign_cores),
            LOWER,
            _fmt("{:.2f}"),
            compare=False,
        ),
        Measure(
            f"retrieve p50 / p95, {CLIENTS} clients, defaults (ms)",
            each(lambda r: percentile(r.default.latencies, 95) * 1000.0),
            LOWER,
            _fmt("{:,.1f}"),
            texts=pairs(lambda r: r.default.latencies, 1000.0, "{:,.1f}"),
        ),
        Measure(
            f"retrieves/s, {CLIENTS} clients, defaults",
            each(lambda r: r.default.rate),
            HIGHER,
            _fmt("{:,.1f}"),
        ),
        Measure(
            "chat calls per retrieve, LLM reranker off",
            each(lambda r: r.formula.tally.total_calls / max(len(r.formula.latencies), 1)),
            LOWER,
            _fmt("{:,.2f}"),
        ),
        Measure(
            "chat calls per retrieve, defaults",
            each(lambda r: r.default.tally.total_calls / max(len(r.default.latencies), 1)),
            LOWER,
            _fmt("{:,.2f}"),
        ),
        Measure(
            "evidence recall@5 / @10, defaults (%)",
            each(lambda r: r.default.recall(questions, 10)),
            HIGHER,
            _fmt("{:.1f}"),
            texts={
                r.name: f"{r.default.recall(questions, 5):.1f} / {r.default.recall(questions, 10):.1f}"
                for r in runs
                if not r.unavailable
            },
            target="@10 above both",
        ),
        Measure(
            "evidence recall@5 / @10, LLM reranker off (%)",
            each(lambda r: r.formula.recall(questions, 10)),
            HIGHER,
            _fmt("{:.1f}"),
            texts={
                r.name: f"{r.formula.recall(questions, 5):.1f} / {r.formula.recall(questions, 10):.1f}"
                for r in runs
                if not r.unavailable
            },
        ),
        Measure(
            "peak memory of the system's own processes (PSS)",
            each(lambda r: float(r.peak_bytes)),
            LOWER,
            lambda value: "n/a" if math.isnan(value) else mib(value),
        ),
        Measure(
            "peak memory of the shared PostgreSQL during its turn (PSS)",
            each(lambda r: float(r.postgres_peak_bytes)),
            LOWER,
            lambda value: "n/a" if math.isnan(value) else mib(value),
        ),
    ]
    rows: list[list[str]] = []
    targets: dict[str, bool] = {}
    for measure in measures:
        best = _best_peer([measure.values[p.name] for p in peers], measure.better)
        mine = measure.values[ours.name]
        cells = []
        for run in runs:
            if run.unavailable:
                cells.append("could not run")
            else:
                cells.append(measure.texts.get(run.name) or measure.show(measure.values[run.name]))
        ratio = _ratio(mine, best) if measure.compare else ""
        target = measure.target
        if target and not math.isnan(mine) and not math.isnan(best):
            if measure.name.startswith("messages/s end to end, natural"):
                held = mine >= TARGET_THROUGHPUT_RATIO * best
            elif measure.name.startswith("retrieve p50 / p95") and "off" in measure.name:
                held = mine <= TARGET_P95_RATIO * best
            elif measure.name.startswith("chat calls per message"):
                held = mine <= best
            else:
                held = mine > best
            targets[f"{measure.name}: {target}"] = held
            target = f"{target}: {verdict(held)}"
        elif target:
            target = f"{target}: no peer figure"
        rows.append([measure.name, *cells, ratio, target])
    notes: list[str] = []
    for run in runs:
        if run.unavailable:
            notes.append(f"{run.name} could not run here: {run.unavailable}")
        for label, ingest in (("one writer", run.sequential), ("natural concurrency", run.concurrent)):
            if ingest.failed:
                notes.append(
                    f"{run.name}, {label}: {ingest.failed} messages failed, e.g. {'; '.join(ingest.errors[:2])}"
                )
        for label, done in (("reranker off", run.formula), ("defaults", run.default)):
            if done.failed:
                notes.append(f"{run.name}, retrieve {label}: {done.failed} failed, e.g. {'; '.join(done.errors[:2])}")
        calls = run.concurrent.tally.calls
        if calls:
            shown = ", ".join(f"{kind} {count:,}" for kind, count in calls.most_common())
            notes.append(f"{run.name}: chat calls by kind, natural concurrency: {shown}.")
        notes.extend(run.notes)
    return rows, targets, notes


CAPABILITIES = [
    (
        "natural concurrency",
        "imports handled by its worker pools (per-agent order kept by the service; "
        "LLM batching: several turns per extraction call)",
        "asyncio: one writer task per conversation. A conversation's turns must be written in order "
        "(each write reads what the earlier ones stored), and the SDK has no queue or per-agent "
        "ordering of its own, so one agent cannot take concurrent writers",
        "threads: one writer per conversation, for the same reason (each add reads the agent's "
        "existing memories and last messages)",
    ),
    (
        "timestamps (the session dates of LoCoMo)",
        "occurred_at on every turn",
        "occurred_at on every write",
        "none: mem0 OSS refuses `timestamp` on add (platform only); the date is kept as metadata, "
        "which its extraction and search do not read",
    ),
    (
        "speaker of a turn",
        "speaker_name",
        "speaker_name",
        "not in its message format: written into the text (`Caroline: ...`)",
    ),
    (
        "what recall counts (ranked ids)",
        "facts and relevant messages merged by score, each as the turn it came from",
        "returned facts, each as the turn of its source event",
        "returned memories, each as the turn whose add created it (metadata)",
    ),
]


def capability_rows(runs: Sequence[SystemRun]) -> list[list[str]]:
    """The rows of :data:`CAPABILITIES` with a column per system that ran (``--only`` leaves some out)."""
    column = {OURS: 1, ARANDU: 2, MEM0: 3}
    return [[row[0], *(row[column[run.name]] for run in runs)] for row in CAPABILITIES]


def _section(
    machine: MachineInfo,
    *,
    command: str,
    load: str,
    quick: bool,
    runs: Sequence[SystemRun],
    rows: Sequence[Sequence[str]],
    notes: Sequence[str],
    setup: str,
) -> str:
    title = f"## Peers — {machine.date:%Y-%m-%d %H:%M} UTC" + (" — quick (a tenth of the size)" if quick else "")
    headers = ["measure", *(run.name for run in runs), "ours / better peer", "target"]
    table = markdown_table(headers, rows)
    capabilities = markdown_table(["", *(run.name for run in runs)], capability_rows(runs))
    versions = "; ".join(f"{run.name}: {run.versions or 'n/a'}" for run in runs)
    bullets = "\n".join(f"- {note}" for note in notes)
    return (
        f"{title}\n\n- command: `{command}`\n- machine: {machine.describe()}; {load}\n- setup: {setup}\n"
        f"- versions: {versions}\n\n{table}\n\n{capabilities}\n\n{bullets}\n"
    )


def _command(argv: Sequence[str]) -> str:
    args = " ".join(argv)
    if os.environ.get("OPS_BENCH_WRAPPER"):
        return f"./ops/bench/peers {args}".strip()
    return f"python -m ops.bench peers {args}".strip()


# =====================================================================================
# The run
# =====================================================================================


def run_peers_benchmark(
    *,
    quick: bool,
    keep_home: bool,
    record: bool,
    argv: Sequence[str],
    venv: Path | None = None,
    only: Sequence[str] = ("arandu", "mem0"),
) -> int:
    """Install (or reuse) the peers, run the three systems one after the other, print and record the table."""
    from tests.support.openai_stub import OpenAIStub

    machine = machine_info()
    command = _command(argv)
    load = "load average at start {:.2f} / {:.2f} / {:.2f} (1 / 5 / 15 min)".format(*os.getloadavg())
    if not LOCOMO_PATH.exists():
        print(f"error: {LOCOMO_PATH} not found", file=sys.stderr)
        return 2
    sizes = Sizes.quick() if quick else Sizes()
    workload = build_workload(sizes)
    print(
        f"Peers benchmark{' (quick)' if quick else ''} on {machine.describe()}; {load}\n"
        f"data: {workload.messages:,} LoCoMo turns of {len(workload.conversations)} conversations "
        f"(the first {sizes.turns} of each), {len(workload.questions):,} questions; one writer: "
        f"{len(workload.sequential)} turns",
        flush=True,
    )
    venv_dir = venv or default_venv_dir()
    python: Path | None = None
    install_error = ""
    started_install = time.monotonic()
    try:
        python = ensure_peers_venv(venv_dir) if only else None
    except PeerUnavailableError as error:
        install_error = str(error)
        print(f"the peers cannot be installed: {install_error}", file=sys.stderr, flush=True)
    install_s = time.monotonic() - started_install

    model = PeerModel(latency_s=STUB_LATENCY_S)
    stub = OpenAIStub(latency_s=0.0, chat_handler=model.chat, embeddings_handler=model.embeddings).start()
    settings = {**OUR_SETTINGS, "ARANDU_LLM_BASE_URL": stub.base_url, "ARANDU_EMBEDDING_BASE_URL": stub.base_url}
    stack = BenchStack(env=settings, keep_home=keep_home, label="peers")
    runs: list[SystemRun] = []
    sampler: Sampler | None = None
    code = 0
    overall = time.monotonic()
    try:
        ready_s = stack.start()
        print(f"stack ready in {ready_s:.1f} s under {stack.home}", flush=True)
        devstack = stack._require()
        assert devstack.embedded is not None
        sampler = Sampler(devstack.embedded.postgres.data_dir)
        sampler.start()
        runs.append(run_ours(stack, model, workload, sizes, sampler))
        # The peers run alone: this service's processes stop (the embedded servers stay).
        sampler.follow(None, None)
        stack._stop_processes()
        data_file = Path(str(stack.home)) / "peers-data.json"
        data_file.write_text(json.dumps(workload.as_json()))
        for key in only:
            if python is None:
                runs.append(SystemRun(name=PEERS[key], unavailable=f"not installed: {install_error}"))
                continue
            runs.append(
                run_peer(
                    key,
                    python=python,
                    stack=stack,
                    model=model,
                    stub_url=stub.base_url,
                    workload=workload,
                    data_file=data_file,
                    sizes=sizes,
                    sampler=sampler,
                )
            )
            sampler.follow(None, None)
    except KeyboardInterrupt:
        print("\ninterrupted: stopping...", file=sys.stderr, flush=True)
        code = 130
    except Exception as error:
        print(f"\nbenchmark failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        traceback.print_exc()
        print(stack.log_tails(), file=sys.stderr)
        code = 1
    finally:
        with shielded():
            if sampler is not None:
                sampler.stop()
            stack.stop()
            stub.stop()
    if code != 0 or not runs:
        return code or 1
    rows, targets, notes = build_rows(runs, workload)
    headers = ["measure", *(run.name for run in runs), "ours / better peer", "target"]
    setup = (
        f"one embedded PostgreSQL 18 + pgvector (a database per system); one OpenAI-compatible stub answering "
        f"every chat call after {STUB_LATENCY_S * 1000:.0f} ms with the same extraction (one fact per sentence "
        "of 4+ words), rerankers judged by the share of the query's words a fact holds, and this service's "
        f"hashing embeddings ({HASHING_DIMENSIONS}) over HTTP (zero-padded to 1536 for the peers: the same "
        f"cosines); LoCoMo sample, first {sizes.turns} turns of each of {len(workload.conversations)} "
        f"conversations ({workload.messages:,} turns, one agent each), {len(workload.questions):,} questions "
        f"whose evidence lies in them; one writer: {len(workload.sequential)} turns of the first conversation; "
        f"this service: the whole stack (API, worker pools, Beat, Flower, Redis) with "
        + ", ".join(f"{k}={v}" for k, v in OUR_SETTINGS.items())
        + f", stopped before the peers run; the peers: PyPI {', '.join(PEER_REQUIREMENTS)} in {venv_dir} "
        f"(install or reuse: {install_s:.0f} s); wall time {time.monotonic() - overall:.0f} s"
    )
    missed = [name for name, held in targets.items() if not held]
    notes = [
        *notes,
        "Throughput: messages / (first write -> last done); this service from pipeline_runs, the peers from "
        "the first write call to the last return. Memory: PSS of the system's own processes (this service: "
        "API, workers, Beat, Flower and Redis; a peer: its Python process), PostgreSQL apart.",
        "Targets missed: " + ", ".join(missed) + "." if missed else "Every target was met.",
    ]
    print("\n" + text_table(headers, rows))
    print("\n" + text_table(["", *(run.name for run in runs)], capability_rows(runs)))
    print("\n" + "\n".join(f"- {note}" for note in notes))
    if record:
        append_results(
            _section(machine, command=command, load=load, quick=quick, runs=runs, rows=rows, notes=notes, setup=setup)
        )
        print("\nrecorded in ops/bench/RESULTS.md")
    return 0
