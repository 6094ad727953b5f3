"""ops/bench/RESULTS.md is a dashboard: a recorded run replaces its benchmark's section."""

from __future__ import annotations

from pathlib import Path

from ops.bench.common import RESULTS_HEADER, append_results, benchmark_of, git_commit, split_sections, with_commit


def test_a_run_replaces_its_benchmarks_section_and_keeps_the_others(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    append_results("## Ingest — 2026-12-01 10:00 UTC\n\nold ingest\n", results)
    append_results("## Retrieve — 2026-12-01 11:00 UTC\n\nretrieve\n", results)
    append_results("## Outages (ops/chaos), 2026-12-01 12:00 UTC\n\noutages\n", results)
    append_results("## Ingest — 2026-12-02 09:00 UTC\n\nnew ingest\n", results)
    append_results("## Ingest — 2026-12-02 09:30 UTC — quick (a tenth of the size)\n\nsmoke\n", results)

    text = results.read_text()
    assert text.startswith(RESULTS_HEADER.strip())
    preamble, sections = split_sections(text)
    titles = [section.splitlines()[0] for section in sections]
    assert titles == [
        "## Ingest — 2026-12-02 09:00 UTC",
        "## Retrieve — 2026-12-01 11:00 UTC",
        "## Outages (ops/chaos), 2026-12-01 12:00 UTC",
        "## Ingest — 2026-12-02 09:30 UTC — quick (a tenth of the size)",
    ]
    assert "old ingest" not in text
    assert "new ingest" in text
    assert "dashboard" in preamble


def test_the_benchmark_is_what_precedes_the_date() -> None:
    assert benchmark_of("## Ingest, LLM stub phases — 2026-12-07 05:59 UTC") == "Ingest, LLM stub phases"
    assert benchmark_of("## Vector search: per-agent indexes vs iterative scans (2026-12-07 01:41 UTC)") == (
        "Vector search: per-agent indexes vs iterative scans"
    )
    assert benchmark_of("## Retrieve — 2026-12-05 09:16 UTC — quick (a tenth of the size)") == "Retrieve (quick)"
    assert benchmark_of("## What we learned (hand-written, 2026-11-30 14:50 UTC)") is None
    assert benchmark_of("## Some notes") is None


def test_every_recorded_section_names_its_commit(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    append_results("## Stall — 2026-12-01 10:00 UTC\n\n- command: `./ops/bench/stall`\n- machine: m\n", results)
    append_results("## Outages (ops/chaos), 2026-12-01 12:00 UTC\n\n2 CPUs\n", results)
    append_results("## Retrieve — 2026-12-01 11:00 UTC\n\n- command: `x`\n- commit: `abc123`\n", results)

    _, sections = split_sections(results.read_text())
    stall, outages, retrieve = (section.splitlines() for section in sections)
    assert stall[2:4] == ["- command: `./ops/bench/stall`", f"- commit: `{git_commit()}`"]
    assert outages[2] == f"- commit: `{git_commit()}`"
    assert "2 CPUs" in outages
    assert [line for line in retrieve if line.startswith("- commit:")] == ["- commit: `abc123`"]
    assert with_commit("## T — 2026-12-01 10:00 UTC\n\n- command: `y`", "f00") == (
        "## T — 2026-12-01 10:00 UTC\n\n- command: `y`\n- commit: `f00`"
    )
