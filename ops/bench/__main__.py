"""Command line of the benchmarks: ``python -m ops.bench ingest|retrieve|locomo|peers|... [--quick]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ops.bench.common import install_stop_signals


def _setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.startswith("ARANDU_"):
        raise argparse.ArgumentTypeError(f"expected ARANDU_NAME=VALUE, got {text!r}")
    return name, value


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the chosen benchmark."""
    parser = argparse.ArgumentParser(prog="python -m ops.bench", description="Benchmarks of the arandu stack.")
    sub = parser.add_subparsers(dest="benchmark", required=True)
    ingest = sub.add_parser(
        "ingest",
        help="write path: end to end (offline and LLM stub), API acceptance, historical import",
        description="Ingest benchmark of the real stack; records its figures in ops/bench/RESULTS.md.",
    )
    ingest.add_argument("--quick", action="store_true", help="every phase at a tenth of the size (smoke run)")
    ingest.add_argument(
        "--keep-home", action="store_true", help="keep the temporary ARANDU_HOME (logs, database) for diagnosis"
    )
    ingest.add_argument("--no-record", action="store_true", help="print the figures, not recorded in RESULTS.md")
    ingest.add_argument(
        "--env",
        action="append",
        default=[],
        type=_setting,
        metavar="ARANDU_X=VALUE",
        help="a setting for every phase (diagnosis; recorded with the command), e.g. ARANDU_APPLY_CONCURRENCY=8",
    )
    ingest.add_argument(
        "--llm-env",
        action="append",
        default=[],
        type=_setting,
        metavar="ARANDU_X=VALUE",
        help="a setting for phase 3 (LLM stub) only, e.g. ARANDU_DATABASE_POOL_SIZE=40",
    )
    ingest.add_argument(
        "--llm-only",
        action="store_true",
        help="phase 3 alone: the LLM stub workloads with batching off and on, side by side",
    )
    ingest.add_argument(
        "--llm-fraction",
        type=float,
        default=1.0,
        metavar="F",
        help="run the LLM phases' burst and LoCoMo import at this fraction of their size (a busy machine)",
    )
    ingest.add_argument(
        "--baseline",
        default=None,
        metavar="COMMIT",
        help="the service version whose LLM stub phases run first as the reference of the cost targets "
        "(default: the last commit before issue 36; 'none': batching off is the reference)",
    )
    retrieve = sub.add_parser(
        "retrieve",
        help="read path: retrieve latency, throughput and semantic recall at 1k/10k/100k facts in a 1M-fact table",
        description="Retrieval benchmark of the real stack; records its figures in ops/bench/RESULTS.md.",
    )
    retrieve.add_argument("--quick", action="store_true", help="a tenth of the table, smaller agents (smoke run)")
    retrieve.add_argument(
        "--keep-home", action="store_true", help="keep the temporary ARANDU_HOME (logs, database) for diagnosis"
    )
    retrieve.add_argument("--no-record", action="store_true", help="print the figures, not recorded in RESULTS.md")
    retrieve.add_argument(
        "--reuse-home",
        type=Path,
        metavar="PATH",
        help="measure on the dataset of a home an earlier --keep-home run left (no load; never removed)",
    )
    retrieve.add_argument(
        "--env",
        action="append",
        default=[],
        type=_setting,
        metavar="ARANDU_X=VALUE",
        help="a setting for the stack (diagnosis; recorded with the command), e.g. ARANDU_DATABASE_POOL_SIZE=20",
    )
    vector = sub.add_parser(
        "vector-search",
        help="per-agent HNSW indexes against one table-wide index with pgvector's iterative scans",
        description="Vector search design A/B on a kept retrieve home; records its figures in ops/bench/RESULTS.md.",
    )
    vector.add_argument(
        "--reuse-home",
        type=Path,
        metavar="PATH",
        required=True,
        help="the home of a ./ops/bench/retrieve --keep-home run",
    )
    vector.add_argument(
        "--quick", action="store_true", help="on the home of ./ops/bench/retrieve --quick --keep-home (100k facts)"
    )
    vector.add_argument("--no-record", action="store_true", help="print the figures, not recorded in RESULTS.md")
    locomo = sub.add_parser(
        "locomo",
        help="LoCoMo retrieval recall@5/10/25 through the real pipeline, hashing and local MiniLM embeddings",
        description="LoCoMo retrieval-recall benchmark; records its figures in ops/bench/RESULTS.md.",
    )
    locomo.add_argument(
        "--embedder",
        choices=("both", "hashing", "local"),
        default="both",
        help="which embedder(s) to run (default both: hashing, then local MiniLM when its extra is installed)",
    )
    locomo.add_argument("--quick", action="store_true", help="the first two sessions of each conversation (smoke run)")
    locomo.add_argument(
        "--keep-home", action="store_true", help="keep the temporary ARANDU_HOME (logs, database) for diagnosis"
    )
    locomo.add_argument("--no-record", action="store_true", help="print the figures, not recorded in RESULTS.md")
    locomo.add_argument(
        "--what-if",
        metavar="JSON",
        default=None,
        help="config_overrides of the diagnosis pass (the questions asked again on the same data, for an A/B in "
        "one run), e.g. '{\"event_query_unnamed_share\": 0}'; default: keyword_idf and entity_specificity off",
    )
    trgm = sub.add_parser(
        "entity-trgm",
        help="entity resolution's fuzzy band: name embeddings + pgvector against pg_trgm (decisions and speed)",
        description="Fuzzy-band A/B on the resolution tests and LoCoMo; records its figures in ops/bench/RESULTS.md.",
    )
    trgm.add_argument("--quick", action="store_true", help="LoCoMo's first two sessions, fewer timed rounds")
    trgm.add_argument("--embedder", choices=("hashing", "local"), default="hashing", help="the name embedder of today")
    trgm.add_argument("--no-record", action="store_true", help="print the figures, not recorded in RESULTS.md")
    maintenance = sub.add_parser(
        "maintenance",
        help="one full maintenance cycle (every job) for 100 agents x 1,000 facts, offline skills",
        description="Maintenance benchmark of the real stack; records its figures in ops/bench/RESULTS.md.",
    )
    maintenance.add_argument("--quick", action="store_true", help="10 agents x 200 facts (smoke run)")
    maintenance.add_argument(
        "--keep-home", action="store_true", help="keep the temporary ARANDU_HOME (logs, database) for diagnosis"
    )
    maintenance.add_argument("--no-record", action="store_true", help="print the figures, not recorded in RESULTS.md")
    stall = sub.add_parser(
        "stall",
        help="p95 of normal retrieves alone and beside 6 clients sending maximal queries (one client must not stall)",
        description="Stall benchmark of the real stack; records its figures in ops/bench/RESULTS.md.",
    )
    stall.add_argument("--quick", action="store_true", help="fewer messages and retrieves (smoke run)")
    stall.add_argument(
        "--keep-home", action="store_true", help="keep the temporary ARANDU_HOME (logs, database) for diagnosis"
    )
    stall.add_argument("--no-record", action="store_true", help="print the figures, not recorded in RESULTS.md")
    peers = sub.add_parser(
        "peers",
        help="this service beside the reference SDK (arandu 0.14.3) and mem0 OSS on the same stub, data and PostgreSQL",
        description="Peers benchmark (the peers come from PyPI into a venv of their own); records in RESULTS.md.",
    )
    peers.add_argument("--quick", action="store_true", help="a tenth of the turns (smoke run)")
    peers.add_argument(
        "--keep-home", action="store_true", help="keep the temporary ARANDU_HOME (logs, databases, runner logs)"
    )
    peers.add_argument("--no-record", action="store_true", help="print the figures, not recorded in RESULTS.md")
    peers.add_argument(
        "--venv",
        type=Path,
        metavar="PATH",
        help="the peers' virtual environment (default: $TMPDIR/arandu-bench-peers/venv-<hash of the pins>)",
    )
    peers.add_argument(
        "--only",
        choices=("arandu", "mem0", "ours"),
        action="append",
        help="run only this peer (repeatable; default both); `ours`: this service alone, no peer",
    )
    args = parser.parse_args(argv)
    raw_args = list(sys.argv[1:] if argv is None else argv)

    install_stop_signals()
    if args.benchmark == "ingest":
        from ops.bench.ingest import BASELINE_COMMIT, run_ingest_benchmark

        chosen = args.baseline or BASELINE_COMMIT
        return run_ingest_benchmark(
            quick=args.quick,
            keep_home=args.keep_home,
            record=not args.no_record,
            argv=raw_args[1:],
            env=dict(args.env),
            llm_env=dict(args.llm_env),
            llm_only=args.llm_only,
            baseline=None if chosen.lower() == "none" else chosen,
            llm_fraction=args.llm_fraction,
        )
    if args.benchmark == "retrieve":
        from ops.bench.retrieve import run_retrieve_benchmark

        return run_retrieve_benchmark(
            quick=args.quick,
            keep_home=args.keep_home,
            reuse_home=args.reuse_home,
            record=not args.no_record,
            argv=raw_args[1:],
            env=dict(args.env),
        )
    if args.benchmark == "vector-search":
        from ops.bench.vector_search import run_vector_search_benchmark

        return run_vector_search_benchmark(
            reuse_home=args.reuse_home,
            record=not args.no_record,
            argv=["./ops/bench/vector-search", *raw_args[1:]],
            quick=args.quick,
        )
    if args.benchmark == "locomo":
        from ops.bench.locomo import run_locomo_benchmark

        return run_locomo_benchmark(
            embedders=("hashing", "local") if args.embedder == "both" else (args.embedder,),
            quick=args.quick,
            keep_home=args.keep_home,
            record=not args.no_record,
            argv=raw_args[1:],
            what_if=args.what_if,
        )
    if args.benchmark == "entity-trgm":
        from ops.bench.entity_trgm import run as run_entity_trgm

        return run_entity_trgm(quick=args.quick, record=not args.no_record, embedder=args.embedder)
    if args.benchmark == "maintenance":
        from ops.bench.maintenance import run_maintenance_benchmark

        return run_maintenance_benchmark(
            quick=args.quick, keep_home=args.keep_home, record=not args.no_record, argv=raw_args[1:]
        )
    if args.benchmark == "stall":
        from ops.bench.stall import run_stall_benchmark

        return run_stall_benchmark(
            quick=args.quick, keep_home=args.keep_home, record=not args.no_record, argv=raw_args[1:]
        )
    if args.benchmark == "peers":
        from ops.bench.peers import run_peers_benchmark

        return run_peers_benchmark(
            quick=args.quick,
            keep_home=args.keep_home,
            record=not args.no_record,
            argv=raw_args[1:],
            venv=args.venv,
            only=tuple(name for name in (args.only or ("arandu", "mem0")) if name != "ours"),
        )
    return 2  # pragma: no cover - argparse refuses unknown benchmarks


if __name__ == "__main__":
    sys.exit(main())
