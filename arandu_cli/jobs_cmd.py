"""``arandu jobs run JOB --agent ID`` and ``arandu jobs list --agent ID``: the maintenance jobs.

Jobs (clustering, consolidation, importance, profiles...) run on the ``maintenance`` queue;
``run`` asks for one now (``202`` with the run's id), ``list`` shows the agent's recent runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer
from pydantic import BaseModel

from arandu_cli.exit_codes import ExitCode
from arandu_cli.output import console, emit_json, fail, table
from arandu_cli.target import connected
from arandu_client import AranduClient

jobs = typer.Typer(help="Maintenance jobs: run one now, list recent runs.", no_args_is_help=True)

Agent = Annotated[str, typer.Option("--agent", "-a", help="The agent whose memory the job works on.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")]
_COLUMNS = ("job_run_id", "job", "status", "trigger", "created_at", "finished_at", "error")


def _method(client: AranduClient, name: str) -> Callable[..., Any]:
    method = getattr(client, name, None)
    if method is None:  # an arandu_client older than the jobs endpoints
        fail(f"this arandu_client has no {name}(): upgrade the package to use `arandu jobs`")
        raise typer.Exit(ExitCode.UNAVAILABLE)
    return method  # type: ignore[no-any-return]


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def _runs(answer: Any) -> list[dict[str, Any]]:
    plain = _plain(answer)
    if isinstance(plain, dict):
        for key in ("runs", "jobs", "job_runs", "items"):
            if isinstance(plain.get(key), list):
                return [_plain(item) for item in plain[key]]
    if isinstance(plain, list):
        return [_plain(item) for item in plain]
    return []


@jobs.command("run")
def run_job(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="The job's name (e.g. importance, clustering, consolidation).")],
    agent: Agent,
    as_json: AsJson = False,
) -> None:
    """Queue JOB for the agent now; prints the run id to follow with `arandu jobs list`."""
    with connected(ctx.obj) as client:
        accepted = _plain(_method(client, "run_job")(agent, job))
    if as_json:
        emit_json(accepted)
        return
    run_id = accepted.get("job_run_id") if isinstance(accepted, dict) else accepted
    console.print(f"job {job} queued for agent {agent}: run {run_id}", markup=False)


@jobs.command("list")
def list_jobs(ctx: typer.Context, agent: Agent, as_json: AsJson = False) -> None:
    """The agent's recent job runs with their status."""
    with connected(ctx.obj) as client:
        answer = _plain(_method(client, "list_jobs")(agent))
    if as_json:
        emit_json(answer)
        return
    runs = _runs(answer)
    columns = [name for name in _COLUMNS if any(name in run for run in runs)] or list(_COLUMNS[:3])
    rows = [[run.get(name) for name in columns] for run in runs]
    console.print(table(f"{len(runs)} job run(s) of agent {agent}", columns, rows))
