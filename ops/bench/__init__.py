"""Benchmarks of the running service: ``python -m ops.bench ingest [--quick]``.

Every benchmark starts the real stack (API under uvicorn, the three worker pools, Beat,
Flower, embedded PostgreSQL + pgvector and Redis) in a fresh temporary ``ARANDU_HOME``,
drives it over HTTP, prints a table and records it in ``ops/bench/RESULTS.md``.
:mod:`ops.bench.common` holds what the benchmarks share.
"""
