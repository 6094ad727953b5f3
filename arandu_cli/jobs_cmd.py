"""``arandu jobs run JOB --agent ID`` and ``arandu jobs list --agent ID``: the maintenance jobs.

Jobs (importance, summaries, profiles, clustering, communities, consolidation, memify,
emotional_trends) run on the ``maintenance`` queue; ``run`` queues one now (``--wait``
follows it to the end), ``list`` shows the agent's recent runs, Beat's and the API's.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from arandu_cli.exit_codes import ExitCode
from arandu_cli.output import console, emit_json, fail, table, when
from arandu_cli.target import connected
from arandu_client import JobRun, WaitTimeoutError

jobs = typer.Typer(help="Maintenance jobs: run one now, list recent runs.", no_args_is_help=True)

Agent = Annotated[str, typer.Option("--agent", "-a", help="The agent whose memory the job works on.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")]


def _duration(run: JobRun) -> str:
    return "-" if run.duration_ms is None else f"{run.duration_ms / 1000:.1f} s"


def _outcome(run: JobRun) -> str:
    if run.error:
        return run.error
    if not run.result:
        return "-"
    return ", ".join(f"{key} {value}" for key, value in run.result.items() if isinstance(value, int | float | str))


@jobs.command("run")
def run_job(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="The job's name (importance, summaries, clustering...).")],
    agent: Agent,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run until it is done, failed or skipped.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds --wait waits at most.")] = 600,
    as_json: AsJson = False,
) -> None:
    """Queue JOB for the agent now (exit 6 if it is already queued or running)."""
    with connected(ctx.obj) as client:
        accepted = client.run_job(agent, job)
        if not wait:
            if as_json:
                emit_json(accepted)
            else:
                console.print(f"job {job} queued for agent {agent}: run {accepted.job_run_id}", markup=False)
            return
        try:
            run = client.wait_for_job(agent, accepted.job_run_id, timeout=timeout)
        except WaitTimeoutError as error:
            fail(str(error))
            raise typer.Exit(ExitCode.TIMEOUT) from None
    if as_json:
        emit_json(run)
    else:
        console.print(f"job {job} for agent {agent}: {run.status} in {_duration(run)} ({_outcome(run)})", markup=False)
    if run.status == "failed":
        raise typer.Exit(ExitCode.FAILED)


@jobs.command("list")
def list_jobs(
    ctx: typer.Context,
    agent: Agent,
    job: Annotated[str | None, typer.Option("--job", "-j", help="Only the runs of this job.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500, help="How many recent runs.")] = 50,
    as_json: AsJson = False,
) -> None:
    """The agent's most recent job runs, newest first."""
    with connected(ctx.obj) as client:
        page = client.list_jobs(agent, limit=limit, job=job)
    if as_json:
        emit_json(page)
        return
    rows: list[list[Any]] = [
        [run.job_run_id, run.job, run.status, run.trigger, when(run.created_at), _duration(run), _outcome(run)]
        for run in page.runs
    ]
    columns = ["run id", "job", "status", "trigger", "queued at", "took", "result"]
    console.print(table(f"{len(page.runs)} job run(s) of agent {agent}", columns, rows))
