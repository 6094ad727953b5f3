"""What the benchmarks share: a real stack in a throw-away home, memory sampling, figures, the results file.

* :class:`BenchStack` runs the whole stack exactly as ``./ops/dev`` does (through
  :class:`~ops.devstack.DevStack`: embedded PostgreSQL + pgvector and Redis, migrations, API
  under uvicorn, the three worker pools, Beat, Flower) in a fresh temporary ``ARANDU_HOME``
  with free ports, and removes every trace of it on stop, also on Ctrl-C or failure. It can
  restart the service's processes on a fresh database with other settings (an LLM endpoint,
  more threads) while the embedded servers keep running.
* :class:`MemorySampler` samples the stack's memory (PSS of every service process, the embedded
  PostgreSQL from its counters and allocated shared memory, :func:`ops.rss.stack_memory_bytes`)
  every 0.5 s in the background; peaks are read per time window, so each phase gets its own.
* :meth:`BenchStack.cpu_snapshot` and :class:`CpuSnapshot` give the stack's CPU per unit of work
  (per message, retrieve, job), every stack process together, the benchmark process apart.
* :func:`machine_info`, :func:`percentile`, :func:`markdown_table` and :func:`append_results`
  describe the run and record it in ``ops/bench/RESULTS.md``.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import timeit
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, Self

import psutil
import psycopg

if TYPE_CHECKING:
    from ops.devstack import DevStack

PROJECT_ROOT = Path(__file__).resolve().parents[2]
RESULTS_PATH = Path(__file__).resolve().parent / "RESULTS.md"
# Evaluation data lives beside the checkout, never inside the package.
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"
MIB = 1024 * 1024
GIB = 1024 * MIB
SAMPLE_INTERVAL_S = 0.5
# The benchmark's own process: the load generator and the LLM stub, not part of the stack.
BENCHMARK_ROLE = "benchmark process"
# This process's role where the service itself runs in it (the pipeline, retrieve()): then it counts.
IN_PROCESS_ROLE = "pipeline (this process)"

# Settings a benchmark must not inherit from the shell: it measures the defaults it states.
_INHERITED_PREFIXES = ("ARANDU_",)
_INHERITED_NAMES = ("OPENAI_API_KEY",)

# ---- Ctrl-C and SIGTERM ----------------------------------------------------------------

STOP = threading.Event()
_cleaning = threading.Event()


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    first = not STOP.is_set()
    STOP.set()
    # The first signal interrupts the benchmark; later ones (or any during clean-up) must not
    # interrupt the clean-up itself, which stops every process and removes the home.
    if first and not _cleaning.is_set():
        raise KeyboardInterrupt(f"signal {signum}")


def install_stop_signals() -> None:
    """Turn SIGINT and SIGTERM into one KeyboardInterrupt, so every ``finally`` cleans up."""
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """A block (clean-up) that Ctrl-C does not interrupt."""
    _cleaning.set()
    try:
        yield
    finally:
        _cleaning.clear()


# ---- figures -------------------------------------------------------------------------


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct`` percentile (0-100) with linear interpolation between ranks; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * min(max(pct, 0.0), 100.0) / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def mib(value: float) -> str:
    """Bytes as ``1,234 MiB``."""
    return f"{value / MIB:,.0f} MiB"


def ms(seconds: float) -> str:
    """Seconds as milliseconds with one decimal."""
    return "n/a" if math.isnan(seconds) else f"{seconds * 1000:,.1f} ms"


def secs(seconds: float) -> str:
    """Seconds with two decimals."""
    return "n/a" if math.isnan(seconds) else f"{seconds:,.2f} s"


def stack_cpu_label(unit: str) -> str:
    """The measure's name of a CPU-per-unit row (``CPU per message (whole stack)``)."""
    return f"CPU per {unit} (whole stack)"


def verdict(held: bool) -> str:
    """The mark printed beside a target."""
    return "met" if held else "MISSED"


# ---- the machine ---------------------------------------------------------------------


@dataclass(frozen=True)
class MachineInfo:
    """What the figures were measured on."""

    cpus: int
    ram_bytes: int
    cpu_model: str
    python: str
    system: str
    date: datetime
    speed_ms: float

    def describe(self) -> str:
        """One line: CPUs, model, RAM, Python, OS, and the speed probe."""
        return (
            f"{self.cpus} CPUs ({self.cpu_model}), {self.ram_bytes / GIB:.1f} GiB RAM, "
            f"Python {self.python}, {self.system}; speed probe {self.speed_ms:.1f} ms"
        )


# Machines of one kind differ by 2x and more (docs/performance.md), so every result carries a
# fixed piece of CPU-bound Python, timed: it tells a slow host from slow code.
SPEED_PROBE = "sum(range(10**6))"


def speed_probe_ms() -> float:
    """The best of 5 runs of :data:`SPEED_PROBE`, in milliseconds (lower is a faster machine)."""
    return min(timeit.repeat(SPEED_PROBE, number=1, repeat=5)) * 1000.0


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


_RUN_COMMIT: list[str] = []


def git_commit() -> str:
    """The checkout's commit (short), ``+changes`` when tracked files differ from it; taken once per run.

    Markdown files are left out of the comparison: documentation does not change a run, and a
    recorded run changes RESULTS.md itself.
    """
    if not _RUN_COMMIT:
        try:
            head = subprocess.run(
                ["git", "rev-parse", "--short=12", "HEAD"],
                cwd=PROJECT_ROOT,
                capture_output=True,
                text=True,
                check=True,
                timeout=10,
            ).stdout.strip()
            changed = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!*.md"],
                cwd=PROJECT_ROOT,
                capture_output=True,
                text=True,
                check=True,
                timeout=10,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            head, changed = "unknown (not a git checkout)", ""
        _RUN_COMMIT.append(head + (" +changes" if changed else ""))
    return _RUN_COMMIT[0]


def machine_info() -> MachineInfo:
    """nproc, RAM, CPU model (from /proc/cpuinfo), Python version, OS, and now (UTC).

    It also fixes the run's commit (:func:`git_commit`), which :func:`append_results` records.
    """
    git_commit()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return MachineInfo(
        cpus=cpus,
        ram_bytes=int(psutil.virtual_memory().total),
        cpu_model=_cpu_model(),
        python=platform.python_version(),
        system=f"{platform.system()} {platform.release()}",
        date=datetime.now(UTC),
        speed_ms=speed_probe_ms(),
    )


# ---- markdown and the results file -----------------------------------------------------


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table (pipes in cells escaped)."""

    def cell(value: str) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines.extend("| " + " | ".join(cell(value) for value in row) + " |" for row in rows)
    return "\n".join(lines)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """The same table aligned in columns, for the terminal."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(width, len(str(value))) for width, value in zip(widths, row, strict=True)]
    line = "  ".join("-" * width for width in widths)
    out = ["  ".join(h.ljust(width) for h, width in zip(headers, widths, strict=True)), line]
    out.extend("  ".join(str(v).ljust(width) for v, width in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(out)


RESULTS_HEADER = """\
# Benchmark results

A dashboard: for each benchmark under `ops/bench/` (and `ops/chaos`), its latest recorded run:
the date (UTC), the machine (CPUs, CPU model, RAM, Python, a speed probe), the exact command,
the figures with their targets (met / MISSED), CPU per unit of work and peak memory. A run
with `--record` (the default; `--no-record` prints only) replaces its benchmark's section;
earlier runs and the investigations written beside them are in git history
(`git log -p ops/bench/RESULTS.md`). These hosts are shared and their speed moves about 2x
within an hour: compare changes by A/B runs made side by side, and read times as ratios or as
CPU per message / per retrieve, which hold steadier across hosts.

What is measured:

- **The real stack**, started as `./ops/dev` starts it: the API under uvicorn, the `ingest`,
  `apply` and `maintenance` worker pools, Beat and Flower, on the embedded PostgreSQL 18 +
  pgvector and Redis, in a fresh temporary `ARANDU_HOME` with `ARANDU_LOG_LEVEL=WARNING`.
  Workers keep running while the API is measured, as in production.
- **Memory** is the proportional set size (PSS) of every process of the stack including the
  embedded servers, sampled every 0.5 s; shared pages are split between the processes that
  share them, so the sum is the real footprint. The benchmark process itself (load
  generator, LLM stub) is not counted. Budget: idle under 1.5 GiB, under 2.5 GiB throughout.
- **CPU per unit of work** ("CPU per message (whole stack)", per retrieve, per job) is the
  CPU time (user + system) every process of the stack used over the phase: the API, the
  worker pools and their children, Beat, Flower, the embedded PostgreSQL (its backends and
  parallel workers included, also those that ended during the phase) and Redis, divided by
  the messages processed (or retrieves answered, jobs run); the benchmark process (load
  generator, LLM stub) is left out, except where the service runs inside it (LoCoMo, entity
  resolution). It holds far steadier across hosts than wall-clock rates, and
  `docs/production.md` sizes deployments from it.
- **Processing figures** come from `pipeline_runs` in PostgreSQL: throughput is messages /
  (last `finished_at` - first `created_at`), latency is `finished_at - created_at` per
  message (queueing included). **API latencies** are measured by the client, per request.
- `--quick` runs are smoke runs at a tenth of the size; their figures are not comparable.
"""

# "## Ingest — 2026-12-07 05:59 UTC", "## Outages (ops/chaos), 2026-12-07 05:31 UTC",
# "## Vector search: ... (2026-12-07 01:41 UTC)": the benchmark is what precedes the date.
_SECTION_TITLE = re.compile(r"^## (?P<name>.+?)(?: —|,| \() ?\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC\)?(?P<rest>.*)$")


def benchmark_of(title: str) -> str | None:
    """The benchmark a section's title names (quick runs apart), None for a title of another shape."""
    match = _SECTION_TITLE.match(title.strip())
    if match is None or "hand-written" in title:
        return None
    return match.group("name") + (" (quick)" if "quick" in match.group("rest") else "")


def split_sections(text: str) -> tuple[str, list[str]]:
    """The text before the first ``## `` heading, and each ``## `` section (heading included)."""
    parts = re.split(r"(?m)^(?=## )", text)
    return parts[0], [part for part in parts[1:] if part.strip()]


def with_commit(section: str, commit: str | None = None) -> str:
    """``section`` with a ``- commit:`` line (after its ``- command:`` line, else after its title) unless it has one."""
    lines = section.splitlines()
    if any(line.startswith("- commit:") for line in lines):
        return section
    line = f"- commit: `{commit or git_commit()}`"
    at = next((i + 1 for i, text in enumerate(lines) if text.startswith("- command:")), None)
    if at is None:
        # A title, then a blank line: the commit goes in the section's list of facts, first.
        at = 2 if len(lines) > 1 and not lines[1].strip() else 1
        lines[at:at] = [line, ""] if at < len(lines) and not lines[at].startswith("- ") else [line]
    else:
        lines.insert(at, line)
    return "\n".join(lines)


def append_results(section: str, path: Path = RESULTS_PATH) -> None:
    """Record ``section`` on the dashboard: it replaces the previous section of its benchmark, else is added.

    Sections whose title names no benchmark (or an unknown one) are kept as they are; the file
    is created with its header if needed.
    """
    if not path.exists() or not path.read_text().strip():
        path.write_text(RESULTS_HEADER)
    preamble, sections = split_sections(path.read_text())
    new_section = with_commit(section.strip()) + "\n"
    name = benchmark_of(new_section.splitlines()[0])
    kept: list[str] = []
    replaced = False
    for existing in sections:
        if name is not None and benchmark_of(existing.splitlines()[0]) == name:
            if not replaced:
                kept.append(new_section)
                replaced = True
            continue
        kept.append(existing.rstrip() + "\n")
    if not replaced:
        kept.append(new_section)
    path.write_text(preamble.rstrip() + "\n\n" + "\n".join(kept))


# ---- the stack -------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def libpq_url(url: str) -> str:
    """A SQLAlchemy URL as psycopg (libpq) takes it."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


_TOP_STATEMENTS_SQL = """
SELECT d.datname, s.calls, s.total_exec_time, s.total_exec_time / greatest(s.calls, 1), s.rows, s.query
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE s.toplevel AND d.datname NOT IN ('postgres', 'template0', 'template1')
ORDER BY s.total_exec_time DESC
LIMIT %s
"""


TOP_STATEMENTS_TITLE = "PostgreSQL's top statements by total execution time (pg_stat_statements, whole run)"


def statements_block(lines: Sequence[str]) -> str:
    """The top statements as a folded block of a RESULTS.md section (empty when there are none)."""
    if not lines:
        return ""
    body = "\n".join(lines)
    return f"\n<details><summary>{TOP_STATEMENTS_TITLE}</summary>\n\n```\n{body}\n```\n\n</details>\n"


class StatementStats:
    """The server's statements ranked by total execution time over part of a run (``pg_stat_statements``).

    The embedded server preloads the module (``ops.embedded.PRELOAD_SETTINGS``); the view is
    created in the benchmark's database on :meth:`reset`. Statistics are server-wide: every
    database of the run counts, each statement shown with its database.
    """

    def __init__(self, database_url: str) -> None:
        self.url = libpq_url(database_url)
        self.available = False

    def reset(self) -> bool:
        """Start counting afresh; False (and nothing shown later) when the server lacks the module."""
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                conn.execute("SELECT pg_stat_statements_reset()")
            self.available = True
        except psycopg.Error:
            self.available = False
        return self.available

    def top(self, limit: int = 10, width: int = 220) -> list[str]:
        """One line per statement: calls, total and mean ms, rows, database and the text (shortened)."""
        if not self.available:
            return []
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(_TOP_STATEMENTS_SQL, (limit,)).fetchall()
        lines = []
        for database, calls, total, mean, returned, query in rows:
            text = " ".join(str(query).split())
            if len(text) > width:
                text = text[: width - 3] + "..."
            lines.append(
                f"{total:>12,.1f} ms {calls:>9,} calls {mean:>8.3f} ms/call {returned:>9,} rows  [{database}] {text}"
            )
        return lines


@contextlib.contextmanager
def checkout(commit: str) -> Iterator[Path]:
    """The files of ``commit`` of this repository in a temporary folder (removed afterwards)."""
    folder = Path(tempfile.mkdtemp(prefix="arandu-baseline-"))
    try:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", commit], cwd=PROJECT_ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True, capture_output=True)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class BenchStack:
    """The whole stack of ``./ops/dev`` in a fresh temporary ``ARANDU_HOME`` with free ports.

    ``env`` adds settings for the service's processes (``ARANDU_LOG_LEVEL`` defaults to
    ``WARNING``); ``ARANDU_*`` and ``OPENAI_API_KEY`` variables of the calling shell are not
    inherited, so the defaults are the service's. Use as a context manager: leaving it stops
    every process and the embedded servers, removes the home (unless ``keep_home``) and
    restores this process's environment.
    """

    def __init__(
        self,
        *,
        env: Mapping[str, str] | None = None,
        keep_home: bool = False,
        label: str = "bench",
        home: Path | None = None,
    ) -> None:
        self.extra_env = {"ARANDU_LOG_LEVEL": "WARNING", **dict(env or {})}
        # A given home (one a run kept with keep_home) is reused as it is, and never removed.
        self.reused_home = home
        self.keep_home = keep_home or home is not None
        self.label = label
        self.home: Path | None = None
        self.devstack: DevStack | None = None
        self.database = "arandu"
        self._saved_environ: dict[str, str] | None = None

    # -- life cycle --------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> float:
        """Start the embedded servers, migrate, start every process; seconds until all are ready."""
        from memory_core.db.migrate import upgrade
        from memory_core.settings import load_settings
        from ops.devstack import DevStack

        self._saved_environ = dict(os.environ)
        for name in list(os.environ):
            if name.startswith(_INHERITED_PREFIXES) or name in _INHERITED_NAMES:
                del os.environ[name]
        # A short path: the Redis socket lives under it and unix socket paths are limited.
        self.home = self.reused_home or Path(tempfile.mkdtemp(prefix=f"arandu-{self.label}-"))
        os.environ.update(
            {
                "ARANDU_HOME": str(self.home),
                "ARANDU_API_HOST": "127.0.0.1",
                "ARANDU_API_PORT": str(free_port()),
                "ARANDU_FLOWER_HOST": "127.0.0.1",
                "ARANDU_FLOWER_PORT": str(free_port()),
                **self.extra_env,
            }
        )
        self.devstack = DevStack(load_settings(), STOP)
        started = time.monotonic()
        settings = self.devstack.prepare_environment()
        upgrade(settings)
        self.devstack.start_processes(settings)
        self.devstack.wait_ready(settings)
        return time.monotonic() - started

    def restart(
        self,
        *,
        database: str,
        env: Mapping[str, str] | None = None,
        unset: Sequence[str] = (),
        flush_broker: bool = True,
        code_root: Path | None = None,
    ) -> float:
        """Stop the service's processes, then start them on a fresh ``database`` with changed settings.

        The embedded servers keep running. The broker is emptied first (``flush_broker``), so
        no task of an earlier phase reaches the new processes. ``code_root``: a checkout of
        another version of the service (see :func:`checkout`) whose code migrates the database
        and runs the processes (an A/B against that version); ``None`` is this checkout's code.
        Returns seconds until ready.
        """
        from memory_core.db.migrate import upgrade
        from memory_core.settings import load_settings

        stack = self._require()
        started = time.monotonic()
        self._stop_processes()
        if flush_broker:
            self._flush_broker()
        changes = dict(env or {})
        if stack.embedded is None:
            raise RuntimeError("restart on a fresh database needs the embedded PostgreSQL")
        changes["ARANDU_DATABASE_URL"] = stack.embedded.postgres.ensure_database(database)
        self.database = database
        for name in unset:
            stack.env.pop(name, None)
            os.environ.pop(name, None)
        # Another version's modules come first on the path of the children (PYTHONSAFEPATH: the
        # current directory, this checkout, is not put in front of them).
        for name in ("PYTHONPATH", "PYTHONSAFEPATH"):
            stack.env.pop(name, None)
        if code_root is not None:
            changes.update({"PYTHONPATH": str(code_root), "PYTHONSAFEPATH": "1"})
        stack.env.update(changes)
        os.environ.update({name: value for name, value in changes.items() if not name.startswith("PYTHON")})
        settings = load_settings()
        if code_root is None:
            upgrade(settings)
        else:
            subprocess.run(
                [sys.executable, "-m", "memory_core.db.migrate", "upgrade"],
                env=stack.env,
                cwd=code_root,
                check=True,
                capture_output=True,
            )
        stack.start_processes(settings)
        stack.wait_ready(settings)
        return time.monotonic() - started

    def _stop_processes(self) -> None:
        stack = self._require()
        # DevStack.stop() stops the children, then the embedded servers: hide the servers from it.
        embedded, stack.embedded = stack.embedded, None
        try:
            stack.stop()
        finally:
            stack.embedded = embedded
        stack.children.clear()

    def _flush_broker(self) -> None:
        import redis

        stack = self._require()
        if stack.embedded is None:
            return
        client = redis.Redis(unix_socket_path=str(stack.embedded.redis.socket_path), socket_timeout=5)
        try:
            client.flushall()
        finally:
            client.close()

    def stop(self) -> None:
        """Stop every process and the embedded servers, remove the home, restore the environment."""
        with shielded():
            if self.devstack is not None:
                try:
                    self.devstack.stop()
                finally:
                    self.devstack = None
            if self.home is not None and not self.keep_home:
                shutil.rmtree(self.home, ignore_errors=True)
            if self._saved_environ is not None:
                os.environ.clear()
                os.environ.update(self._saved_environ)
                self._saved_environ = None

    # -- what a benchmark needs ----------------------------------------------------------

    def _require(self) -> DevStack:
        if self.devstack is None:
            raise RuntimeError("the stack is not started")
        return self.devstack

    def setting(self, name: str) -> Any:
        """A service setting's value as this stack's processes got it (``pipeline_chunk_size``...)."""
        return getattr(self._require().settings, name)

    @property
    def api_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the API."""
        return f"http://127.0.0.1:{os.environ['ARANDU_API_PORT']}"

    @property
    def api_key(self) -> str:
        """A bearer key the API accepts."""
        return self._require().api_key

    @property
    def json_headers(self) -> dict[str, str]:
        """The headers of an authenticated JSON request to the API."""
        return {"Authorization": f"Bearer {self.api_key}", "Content-Type": "application/json"}

    @property
    def database_url(self) -> str:
        """libpq URL of the database the processes use now."""
        return libpq_url(self._require().env["ARANDU_DATABASE_URL"])

    def process_pids(self) -> list[int]:
        """PIDs of the service's processes (their pool children are found from them)."""
        stack = self._require()
        return [child.popen.pid for child in stack.children if child.popen is not None]

    def data_dirs(self) -> list[Path]:
        """Data folders of the embedded servers (their processes are found by command line)."""
        stack = self._require()
        if stack.embedded is None:
            return []
        return [stack.embedded.postgres.data_dir, stack.embedded.redis.data_dir]

    def memory_bytes(self) -> int:
        """PSS of every process of the stack plus the embedded servers (not this process)."""
        from ops.rss import stack_memory_bytes

        if self.devstack is None:
            return 0
        return stack_memory_bytes(self.process_pids(), self.data_dirs())

    def log_tails(self, lines: int = 15) -> str:
        """The end of every process log, for a failure report."""
        if self.devstack is None:
            return ""
        return "\n".join(
            f"--- {child.name} ({child.log_path}) ---\n{child.log_tail(lines)}" for child in self.devstack.children
        )

    def processes_exited(self) -> list[str]:
        """Names of the service's processes that exited (empty while all run)."""
        if self.devstack is None:
            return []
        return [child.name for child in self.devstack.children if not child.alive()]

    # The role of this process in :meth:`cpu_snapshot`. The benchmark process (load generator,
    # LLM stub) is not part of the stack; a subclass that runs the service in process names it
    # otherwise, and then it counts.
    own_role = BENCHMARK_ROLE

    def cpu_snapshot(self) -> CpuSnapshot:
        """CPU time used so far by every process of the stack, by role, and by this process."""
        roles: dict[str, list[int]] = {}
        folders: dict[str, Path] = {}
        if self.devstack is not None:
            for child in self.devstack.children:
                if child.popen is not None:
                    roles.setdefault(child.name, []).append(child.popen.pid)
            if self.devstack.embedded is not None:
                folders = {
                    "postgres": self.devstack.embedded.postgres.data_dir,
                    "redis": self.devstack.embedded.redis.data_dir,
                }
        return cpu_snapshot_of(roles, folders, own_role=self.own_role)

    def log_positions(self) -> dict[Path, int]:
        """Current size of every process log, to read what is written after this point."""
        if self.devstack is None:
            return {}
        return {
            child.log_path: child.log_path.stat().st_size if child.log_path.exists() else 0
            for child in self.devstack.children
        }

    def log_lines_since(self, positions: Mapping[Path, int]) -> Iterator[str]:
        """Lines the process logs received after ``positions`` was taken."""
        for path, offset in positions.items():
            with contextlib.suppress(OSError), path.open("rb") as handle:
                handle.seek(offset)
                for raw in handle:
                    yield raw.decode("utf-8", "replace").rstrip("\n")


def cpu_snapshot_of(
    roles: Mapping[str, Sequence[int]], folders: Mapping[str, Path] | None = None, *, own_role: str = BENCHMARK_ROLE
) -> CpuSnapshot:
    """CPU time used so far by processes named by role: the ``roles`` pids and their descendants,
    the processes whose command line names a ``folders`` path (an embedded server) and theirs, and
    this process under ``own_role``.

    Each stack process counts its reaped children too (a PostgreSQL backend that ended, a pool
    child that was replaced), so work done by processes that exit between two snapshots is not
    lost; :meth:`CpuSnapshot.since` takes off what such a process had used before.
    """
    from ops.rss import stack_processes

    found: dict[int, tuple[str, psutil.Process]] = {}
    for role, pids in roles.items():
        for proc in stack_processes(pids):
            found[proc.pid] = (role, proc)
    for role, folder in (folders or {}).items():
        for proc in stack_processes([], [folder]):
            found.setdefault(proc.pid, (role, proc))
    own = psutil.Process()
    found[own.pid] = (own_role, own)
    used: dict[int, tuple[str, float]] = {}
    parents: dict[int, int] = {}
    for pid, (role, proc) in found.items():
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            seconds = float(times.user + times.system)
            if pid != own.pid:
                # This process reaps the stack's top processes when a phase restarts them: its
                # children's time would count them twice (and the embedded servers' tools).
                seconds += float(times.children_user + times.children_system)
                parents[pid] = int(proc.info["ppid"]) if "ppid" in getattr(proc, "info", {}) else proc.ppid()
            used[pid] = (role, seconds)
    return CpuSnapshot(time.monotonic(), used, machine_busy_seconds(), parents, own_role)


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (every core, every process) since boot."""
    times = psutil.cpu_times()
    idle = float(times.idle) + float(getattr(times, "iowait", 0.0))
    return float(sum(times)) - idle - float(getattr(times, "guest", 0.0)) - float(getattr(times, "guest_nice", 0.0))


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds (user + system, reaped children included) per process id, with its role, at a moment.

    ``machine_busy`` is the whole machine's busy CPU time, so that what other processes used
    meanwhile (another test suite on a shared machine) shows up beside the figures. ``parents``
    maps each stack process to its parent, to tell a process that ended and was reaped by a
    stack process (its time is now in that parent's) from one that merely left the stack.
    ``own_role`` is the role of the benchmark's own process.
    """

    taken_at: float
    used: dict[int, tuple[str, float]]
    machine_busy: float = 0.0
    parents: dict[int, int] = field(default_factory=dict)
    own_role: str = BENCHMARK_ROLE

    def since(self, earlier: CpuSnapshot) -> dict[str, float]:
        """CPU seconds per role between ``earlier`` and this snapshot (new processes count in full).

        A process that ended meanwhile and was reaped by a stack process that is still here is
        in that parent's children's time with its whole life: what it had used before
        ``earlier`` is taken off.
        """
        spent: dict[str, float] = {}
        for pid, (role, seconds) in self.used.items():
            before = earlier.used.get(pid)
            delta = seconds - (before[1] if before and before[0] == role else 0.0)
            spent[role] = spent.get(role, 0.0) + max(delta, 0.0)
        for pid, (_role, seconds) in earlier.used.items():
            parent = earlier.parents.get(pid)
            if pid in self.used or parent is None or parent not in self.used:
                continue
            parent_role = self.used[parent][0]
            if parent_role in spent:
                spent[parent_role] = max(spent[parent_role] - seconds, 0.0)
        return spent

    def stack_seconds_since(self, earlier: CpuSnapshot) -> float:
        """CPU seconds of the whole stack between ``earlier`` and now: every role but the benchmark process."""
        return sum(seconds for role, seconds in self.since(earlier).items() if role != BENCHMARK_ROLE)

    def stack_ms_per(self, earlier: CpuSnapshot, items: int) -> float:
        """Milliseconds of the stack's CPU per item (message, retrieve, job) over the window; NaN for none."""
        if items <= 0:
            return math.nan
        return self.stack_seconds_since(earlier) / items * 1000.0

    def stack_cpu_cell(self, earlier: CpuSnapshot, items: int, unit: str) -> str:
        """``12.3 ms per message (postgres 4.1, worker-ingest 3.0, ...)``: the stack's CPU per item, by role."""
        per_item = self.stack_ms_per(earlier, items)
        if math.isnan(per_item):
            return "n/a"
        spent = sorted(
            ((role, seconds) for role, seconds in self.since(earlier).items() if role != BENCHMARK_ROLE),
            key=lambda item: -item[1],
        )
        shown = ", ".join(f"{role} {seconds / items * 1000:.1f}" for role, seconds in spent[:4] if seconds > 0)
        return f"{per_item:,.1f} ms per {unit}" + (f" ({shown})" if shown else "")

    def describe_since(self, earlier: CpuSnapshot, top: int = 6) -> str:
        """``api 45%, postgres 30%, ...`` of one core over the window, busiest first, and the total."""
        window = self.taken_at - earlier.taken_at
        if window <= 0:
            return "n/a"
        spent = sorted(self.since(earlier).items(), key=lambda item: -item[1])
        total = sum(seconds for _, seconds in spent)
        shown = ", ".join(f"{role} {seconds / window * 100:.0f}%" for role, seconds in spent[:top] if seconds > 0)
        return (
            f"{shown} (all: {total / window * 100:.0f}% of one core, over {window:.0f} s); "
            f"other processes on the machine: {self.foreign_share(earlier) * 100:.0f}%"
        )

    def per_item_since(self, earlier: CpuSnapshot, items: int, top: int = 6) -> str:
        """``worker-apply 12.3 ms, ...`` of CPU per item over the window, busiest first, and the total.

        On a shared machine wall-clock rates depend on the neighbours; CPU per message much less.
        """
        if items <= 0:
            return "n/a"
        spent = sorted(self.since(earlier).items(), key=lambda item: -item[1])
        total = sum(seconds for _, seconds in spent)
        shown = ", ".join(f"{role} {seconds / items * 1000:.1f}" for role, seconds in spent[:top] if seconds > 0)
        return f"{shown} (all: {total / items * 1000:.1f}) ms"

    def foreign_share(self, earlier: CpuSnapshot) -> float:
        """CPU used by processes outside the stack and the benchmark, in cores, over the window."""
        window = self.taken_at - earlier.taken_at
        if window <= 0:
            return 0.0
        ours = sum(self.since(earlier).values())
        return max(self.machine_busy - earlier.machine_busy - ours, 0.0) / window


class SessionCpu:
    """CPU seconds of this thread and of the PostgreSQL backend serving one connection, read cheaply.

    For statements and in-process calls timed one at a time: a whole-stack snapshot walks the
    process table, which costs this process more than a statement does. ``backend_pid`` is the
    connection's ``pg_backend_pid()``; the server must run on this machine.
    """

    def __init__(self, backend_pid: int) -> None:
        self.backend = psutil.Process(backend_pid)
        self.client_s = 0.0
        self.server_s = 0.0

    def _server_now(self) -> float:
        times = self.backend.cpu_times()
        return float(times.user + times.system)

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        """Add the CPU this thread and the backend use inside the block to the totals."""
        client, server = time.thread_time(), self._server_now()
        try:
            yield
        finally:
            self.client_s += time.thread_time() - client
            self.server_s += self._server_now() - server

    def ms_per(self, items: int) -> tuple[float, float]:
        """(PostgreSQL, this process) milliseconds per item over every counted block; NaN for none."""
        if items <= 0:
            return math.nan, math.nan
        return self.server_s / items * 1000.0, self.client_s / items * 1000.0


# ---- memory sampling -----------------------------------------------------------------


class MemorySampler:
    """Samples the stack's memory every ``interval_s`` in a daemon thread; peaks per time window."""

    def __init__(self, stack: BenchStack, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.stack = stack
        self.interval_s = interval_s
        self._samples: list[tuple[float, int]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0
        # CPU seconds the sampling thread used: where the service runs in this process, its CPU
        # per unit of work is reported without the sampler's.
        self.own_cpu_s = 0.0

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Start sampling."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (the samples are kept)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            started, cpu = time.monotonic(), time.thread_time()
            self.sample()
            with self._lock:
                self.own_cpu_s += time.thread_time() - cpu
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def sample(self) -> int:
        """Take one sample now (also from the caller's thread) and return it in bytes."""
        try:
            value = self.stack.memory_bytes()
        except Exception:
            # A process exiting mid-walk, or the stack restarting: skip this sample.
            self.errors += 1
            return 0
        if value > 0:
            with self._lock:
                self._samples.append((time.monotonic(), value))
        return value

    @property
    def count(self) -> int:
        """How many samples were taken."""
        with self._lock:
            return len(self._samples)

    def peak(self, since: float = 0.0, until: float = math.inf) -> int:
        """Largest sample taken in [since, until] (monotonic clock), 0 when there is none."""
        with self._lock:
            return max((value for moment, value in self._samples if since <= moment <= until), default=0)

    def settled(self, seconds: float = 3.0) -> int:
        """Median of the samples of the next ``seconds`` (memory at rest), sampling as it waits."""
        values: list[int] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = self.sample()
            if value:
                values.append(value)
            time.sleep(self.interval_s)
        return int(percentile(values, 50)) if values else 0
