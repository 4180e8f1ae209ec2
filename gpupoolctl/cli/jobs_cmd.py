"""`submit`, `jobs`, `logs`, `cancel`, `schedule`: jobs on the pool from the shell.

Parse, call gpupoolctl.jobs, render. Exit codes: 0 ok; 1 error; 2 usage; 3 some nodes could
not be reached (what is known is still shown); 5 the pool could never satisfy the request.
`submit --wait` exits with the job's own exit code.

`--backend slurm` (submit, jobs, cancel) hands the job to a Slurm cluster through sbatch,
squeue and scancel instead (gpupoolctl.slurm; what maps and what is refused is in
gpupoolctl.slurm.mapping). The ledger is not used then: Slurm's job ids and states are shown.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpupoolctl.cli.console import error, notice, warn
from gpupoolctl.cli.handles import open_jobs, open_ledger
from gpupoolctl.cli.render import Column, emit
from gpupoolctl.cli.settings import MEM_HELP, OutputFormat, Settings
from gpupoolctl.errors import ExitCode, GpupoolError, UsageError
from gpupoolctl.jobs.events import (
    Event,
    NodeLost,
    NodeReturned,
    Preempted,
    Reshaped,
    StaleRunKilled,
    WouldRecut,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gpupoolctl.jobs import Jobs
    from gpupoolctl.ledger import Ledger

JOB_COLUMNS = (
    Column("id", "ID"),
    Column("name", "NAME"),
    Column("state", "STATE"),
    Column("host", "HOST"),
    Column("slice", "SLICE"),
    Column("age", "AGE", "right"),
    Column("exit_code", "EXIT", "right"),
    Column("restarts", "RESTARTS", "right"),
    Column("reason", "REASON"),
)
SLURM_COLUMNS = (
    Column("id", "ID"),
    Column("name", "NAME"),
    Column("state", "STATE"),
    Column("host", "NODE"),
    Column("gres", "GRES"),
    Column("age", "AGE", "right"),
    Column("exit_code", "EXIT", "right"),
)
SLURM_CSV_COLUMNS = tuple(
    Column(k, k)
    for k in ("id", "name", "state", "owner", "host", "gres", "age_s", "exit_code", "reason")
)
BACKENDS = ("pool", "slurm")
BackendOption = Annotated[
    str,
    typer.Option(
        "--backend",
        help="pool: gpupoolctl's own pool (default); slurm: a Slurm cluster through "
        "sbatch/squeue/scancel (SLURM_CONF from the environment).",
    ),
]
JOB_CSV_COLUMNS = tuple(
    Column(k, k)
    for k in (
        "id",
        "name",
        "state",
        "owner",
        "host",
        "slice",
        "age_s",
        "exit_code",
        "priority",
        "restarts",
        "reason",
    )
)


def register(app: typer.Typer) -> None:
    """Add the job commands to the root command."""
    app.command("submit", context_settings={"allow_interspersed_args": False})(submit)
    app.command("jobs")(jobs_list)
    app.command("logs")(logs)
    app.command("cancel")(cancel)
    app.command("schedule")(schedule)


def _finish(settings: Settings, jobs: Jobs) -> None:
    for message in jobs.warnings:
        warn(message)
    if jobs.hosts_failed:
        raise typer.Exit(int(ExitCode.HOSTS_FAILED))


def _age(seconds: float | None) -> str | None:
    from gpupoolctl.board.formats import age

    return None if seconds is None else age(seconds)


def _rows(
    records: list[dict[str, Any]], waiting: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    from gpupoolctl.jobs.listing import reason_text, row

    now = time.time()
    rows = []
    for job in records:
        shown = row(job, now)
        if waiting and job["id"] in waiting:
            shown["reason"] = reason_text(job, waiting[job["id"]])
        rows.append({**shown, "age": _age(shown["age_s"])})
    return rows


def _backend(name: str) -> str:
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}: use {' or '.join(BACKENDS)}")
    return name


def _slurm_rows(jobs: list[Any]) -> list[dict[str, Any]]:
    from gpupoolctl.slurm.jobs import row

    now = time.time()
    return [{**r, "age": _age(r["age_s"])} for r in (row(j, now) for j in jobs)]


def _emit_slurm(settings: Settings, jobs: list[Any], *, one: bool = False) -> None:
    rows = _slurm_rows(jobs)
    data: Any = rows[0] if one and rows else rows
    emit(settings, data=data, rows=rows, columns=SLURM_COLUMNS, csv_columns=SLURM_CSV_COLUMNS)


def _asking_again(exc: Exception) -> None:
    """A failed squeue poll that waiting retries (see gpupoolctl.slurm.jobs)."""
    warn(f"{exc} (asking again)")


# -- submit ---------------------------------------------------------------------------------


def submit(
    ctx: typer.Context,
    command: Annotated[
        list[str] | None,
        typer.Argument(metavar="-- COMMAND [ARGS]...", help="Run as given, without a shell."),
    ] = None,
    gpus: Annotated[
        int,
        typer.Option(
            "--gpus",
            "-g",
            min=1,
            help="How many GPUs (slices) the job gets. Without --profile or --mem each is a "
            "whole card; with them, any slice that matches.",
        ),
    ] = 1,
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile", "-p", help="MIG profile (3g.40gb), AMD mode (cpx) or kind (gpu)."
        ),
    ] = None,
    mem: Annotated[
        str | None,
        typer.Option(
            "--mem",
            "-m",
            help=MEM_HELP,
        ),
    ] = None,
    vendor: Annotated[str | None, typer.Option("--vendor", help="nvidia or amd.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="GPU model contains (H100).")] = None,
    bandwidth: Annotated[
        str | None, typer.Option("--bandwidth", help="At least this memory bandwidth class.")
    ] = None,
    same_node: Annotated[bool, typer.Option("--same-node", help="All slices on one node.")] = False,
    same_island: Annotated[
        bool, typer.Option("--same-island", help="All slices in one NVLink/xGMI island.")
    ] = False,
    host: Annotated[
        str | None, typer.Option("--host", help="Only on hosts matching this glob.")
    ] = None,
    priority: Annotated[
        str, typer.Option("--priority", help="low, normal, high, or 0..100.")
    ] = "normal",
    preemptible: Annotated[
        bool, typer.Option("--preemptible", help="A higher priority job may stop this one.")
    ] = False,
    team: Annotated[
        str | None,
        typer.Option(
            "--team",
            help="Count it against this team's quota (the pool policy's teams:). Default: "
            "your first team there, else the default team. With --backend slurm: "
            "sbatch --account.",
        ),
    ] = None,
    requeue: Annotated[
        bool, typer.Option("--requeue", help="When preempted, wait in the queue again.")
    ] = False,
    grace: Annotated[
        float,
        typer.Option(
            "--grace", min=0, max=3600, help="Seconds between SIGTERM and SIGKILL when stopped."
        ),
    ] = 30.0,
    max_restarts: Annotated[
        int,
        typer.Option(
            "--max-restarts",
            min=0,
            max=100,
            metavar="N",
            help="Run it again, up to N times, when it exits with a failure code (after a "
            "back-off: 10s, 20s, 40s ... 5m) or its node is lost (at once, elsewhere); each "
            "try sees GPUPOOL_RESTART_COUNT. Preemption is --requeue's and does not count, "
            "nor does a launch its node did not carry out (no answer, a device it lacks): "
            "that job is requeued at once, whatever N.",
        ),
    ] = 0,
    checkpoint_dir: Annotated[
        str | None,
        typer.Option(
            "--checkpoint-dir",
            metavar="PATH",
            help="A folder on the node (relative: to the job's working folder), the same on "
            "every try, given as GPUPOOL_CHECKPOINT_DIR; %j is the job id, %% a %.",
        ),
    ] = None,
    time_limit: Annotated[
        str | None,
        typer.Option(
            "--time-limit",
            metavar="TIME",
            help="Wall-clock limit on the node (90s, 30m, 4h, 1d, HH:MM:SS): then SIGTERM, "
            "the grace, SIGKILL; recorded failed, not restarted.",
        ),
    ] = None,
    signal: Annotated[
        str | None,
        typer.Option(
            "--signal",
            metavar="SIG[@S]",
            help="Send SIG (USR1, TERM, ...) S seconds (default 60) before the time limit, "
            "and before a preemption's SIGTERM (waiting up to S, at most the grace).",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="A name to know it by.")] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="NAME=VALUE for the job (repeatable).")
    ] = None,
    workdir: Annotated[
        str | None, typer.Option("--workdir", help="Folder on the node to run in (default ~).")
    ] = None,
    policy: Annotated[
        str, typer.Option("--policy", help="best-fit (default), spread or topology.")
    ] = "best-fit",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show where it would go and why; change nothing.")
    ] = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait", help="Follow its output (stdout and stderr); exit with its exit code."
        ),
    ] = False,
    backend: BackendOption = "pool",
) -> None:
    """Run a command on the best slice(s) for it; queue it when nothing fits now.

    Example: gpupoolctl submit --mem 10G -- python serve.py

    With --backend slurm: sbatch with --gres=gpu:<type>:<n>, the type named as `export
    slurm` names it (--profile 1g.10gb -> h100_1g.10gb). --same-island, --preemptible,
    --bandwidth, --vendor, --policy and --grace are refused (exit 2); --mem asks for any GPU.
    --dry-run is sbatch --test-only; --wait follows the state (not the output) and exits
    with the job's exit code. Output goes where sbatch puts it (slurm-<id>.out; `logs
    --backend slurm ID` reads it).
    """
    from gpupoolctl.jobs import JobSpec, NeverFits
    from gpupoolctl.jobs.spec import parse_env, parse_signal, parse_time_limit
    from gpupoolctl.ledger.units import parse_memory_mib
    from gpupoolctl.sched import JobRequest, NoFit, parse_priority
    from gpupoolctl.sched.request import sized_profile

    settings: Settings = ctx.obj
    argv = list(command or [])
    if argv[:1] == ["--"]:
        argv = argv[1:]
    warning = parse_signal(signal) if signal is not None else None
    request = JobRequest(
        gpus=gpus,
        profile=sized_profile(profile, mem),  # neither: whole cards
        memory_mib=parse_memory_mib(mem) if mem is not None else None,
        vendor=vendor.lower() if vendor else None,
        model=model,
        bandwidth_class=bandwidth,
        same_node=same_node,
        same_island=same_island,
        host=host,
        priority=parse_priority(priority),
        preemptible=preemptible,
        team=team,
    )
    spec = JobSpec(
        argv=argv,
        request=request,
        name=name,
        env=parse_env(env or []),
        workdir=workdir,
        requeue=requeue,
        grace_s=grace,
        policy=policy,
        max_restarts=max_restarts,
        checkpoint_dir=checkpoint_dir,
        time_limit_s=parse_time_limit(time_limit) if time_limit is not None else None,
        signal=warning[0] if warning else None,
        signal_s=warning[1] if warning else None,
    )
    spec.validate()
    if _backend(backend) == "slurm":
        _submit_slurm(settings, spec, dry_run=dry_run, wait=wait)
        return
    jobs = open_jobs(settings)
    jobs.ensure_slices(record=not dry_run)
    if dry_run:
        result = jobs.plan(spec)
        _render_plan(settings, result)
        _finish(settings, jobs)
        if isinstance(result, NoFit) and result.never:
            raise NeverFits(f"the pool can never satisfy this request: {result.reason}")
        return
    from gpupoolctl.jobs.submitting import submit

    outcome = submit(jobs, spec)
    job_id = str(outcome.job_id)
    from gpupoolctl.jobs.service import find

    record = find(jobs, job_id)
    for event in outcome.events:
        if isinstance(event, Preempted) and event.job == job_id:
            victims = ", ".join(event.victims)
            notice(f"{job_id}: preempted {victims} to make room", quiet=settings.quiet)
    if wait:
        for message in jobs.warnings:
            warn(message)
        jobs.warnings.clear()
        # stdout is the job's own output: its id and state go to stderr.
        notice(f"{job_id}: {_state_line(outcome, record)}", quiet=settings.quiet)
        code = _follow(settings, jobs, job_id)
        raise typer.Exit(code)
    events = [e.to_dict() for e in outcome.events]
    data = {**_rows([record])[0], "placement": record.get("placement"), "events": events}
    failed = outcome.state == "failed"
    if settings.resolved_output() is OutputFormat.table:
        print(job_id)  # alone on stdout: JOB=$(gpupoolctl submit ...)
    else:
        emit(settings, data=data, rows=[data], columns=JOB_COLUMNS, csv_columns=JOB_CSV_COLUMNS)
    if failed:  # an error, never silenced by -q, in every output format
        error(f"{job_id}: {_state_line(outcome, record)}")
    elif settings.resolved_output() is OutputFormat.table:
        notice(f"{job_id}: {_state_line(outcome, record)}", quiet=settings.quiet)
    _finish(settings, jobs)
    if failed:
        raise typer.Exit(int(ExitCode.ERROR))


def _state_line(outcome: Any, record: dict[str, Any]) -> str:
    """What became of a submitted job, in words: where it runs, why it waits or failed."""
    where = ", ".join(s for n in record.get("nodes") or [] for s in n.get("slices", []))
    reason = outcome.reason or record.get("error") or record.get("reason")
    if outcome.state == "running":
        return f"running on {where}"
    if outcome.state == "queued":
        return f"queued: {reason or 'nothing fits now'}"
    return f"{outcome.state}: {reason}" if reason else str(outcome.state)


def _submit_slurm(settings: Settings, spec: Any, *, dry_run: bool, wait: bool) -> None:
    from gpupoolctl.slurm import jobs as slurm_jobs
    from gpupoolctl.slurm.client import SlurmClient

    client = SlurmClient()
    submitted = slurm_jobs.submit(client, spec, dry_run=dry_run)
    for note in submitted.request.notes:
        warn(note)
    if dry_run:
        data = {
            "dry_run": True,
            "gres": submitted.request.gres,
            "sbatch": list(submitted.request.args),
            "slurm": submitted.test_only,
        }
        if settings.resolved_output() is OutputFormat.table:
            print(submitted.test_only)
        else:
            emit(settings, data=data, rows=[data], columns=[Column(k, k) for k in data])
        return
    job_id = str(submitted.job_id)
    if not wait:
        if settings.resolved_output() is OutputFormat.table:
            print(job_id)  # alone on stdout: JOB=$(gpupoolctl submit --backend slurm ...)
            notice(f"{job_id}: submitted to Slurm ({submitted.request.gres})", quiet=settings.quiet)
        else:
            _emit_slurm(settings, [slurm_jobs.status(client, job_id)], one=True)
        return
    if settings.resolved_output() is OutputFormat.table:
        print(job_id)

    def changed(job: Any) -> None:
        notice(f"{job_id}: {job.state}", quiet=settings.quiet)

    job = slurm_jobs.wait(client, job_id, on_change=changed, on_error=_asking_again)
    if settings.resolved_output() is not OutputFormat.table:
        _emit_slurm(settings, [job], one=True)
    notice(f"{job_id}: {job.describe_end()}", quiet=settings.quiet)
    raise typer.Exit(slurm_jobs.exit_status(job))


def _render_plan(settings: Settings, result: Any) -> None:
    from gpupoolctl.sched import Placement

    if isinstance(result, Placement):
        data = {
            "dry_run": True,
            "fits": True,
            "slices": list(result.slices),
            "hosts": list(result.hosts),
            "policy": result.policy,
            "waste_mib": result.waste_mib,
            "why": result.why,
        }
    elif hasattr(result, "recut"):  # it waits for an elastic re-cut (sched.elastic.Upcoming)
        recut = result.recut
        data = {
            "dry_run": True,
            "fits": False,
            "never": False,
            # Made by submit's own pass: it runs at once; else the reason it would wait with.
            "reason": f"would {recut.describe()} and take one"
            if result.wait_s <= 0
            else result.reason(),
            "recut": {
                "gpu": recut.card.key,
                "before": recut.before,
                "after": recut.after,
                "idle_s": recut.idle_s,
                "why": recut.reason,
                "in_s": result.wait_s,
                "held_by": result.cause,
            },
        }
    else:
        data = {
            "dry_run": True,
            "fits": False,
            "never": result.never,
            "reason": result.reason,
            "code": result.code,
        }
    if settings.resolved_output() is OutputFormat.table:
        if data.get("recut") and not data["recut"]["in_s"]:
            print(data["reason"])
        elif data["fits"]:
            print(f"would run on {', '.join(data['hosts'])}: {', '.join(data['slices'])}")
            why = data["why"]
            for line in why if isinstance(why, list) else [why]:
                print(f"  why: {line}")
        else:
            verdict = "can never fit" if data["never"] else "would wait in the queue"
            print(f"{verdict}: {data['reason']}")
        return
    emit(settings, data=data, rows=[data], columns=[Column(k, k) for k in data])


def _follow(settings: Settings, jobs: Jobs, job_id: str) -> int:
    """Stream the job's stdout and stderr to ours until it ends (running the queue while it
    waits)."""
    from gpupoolctl.jobs.following import Ended, FollowWarning, Waiting, follow

    show = settings.resolved_output() is OutputFormat.table
    first_wait = True
    said_node = False
    try:
        for event in follow(jobs, job_id, output=show):
            if isinstance(event, FollowWarning):
                warn(event.message)
            elif isinstance(event, Waiting):
                if not first_wait or event.state != "queued":
                    notice(f"{job_id}: {event.state}: {event.reason}", quiet=settings.quiet)
                first_wait = False
            elif isinstance(event, Ended):
                job, code = event.job, event.exit_code
            else:
                if not said_node:
                    said_node = True
                    _say_followed_node(settings, jobs, job_id)
                stream = sys.stderr if event.stream == "stderr" else sys.stdout
                stream.write(event.text)
                stream.flush()
    except KeyboardInterrupt:
        state = find_state(jobs, job_id)
        notice(
            f"{job_id}: stopped waiting; the job itself is not stopped ({state}): "
            f"`gpupoolctl logs -f {job_id}` follows it again, `gpupoolctl cancel {job_id}` "
            "stops it",
            quiet=False,
        )
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    if not show:
        data = _rows([job])[0]
        emit(settings, data=data, rows=[data], columns=JOB_COLUMNS, csv_columns=JOB_CSV_COLUMNS)
    line = f"{job_id}: {_end_line(job)}"
    if job.get("error"):
        error(line)  # it never ran to its own end (launch failed, node lost): never silenced
    else:
        notice(line, quiet=settings.quiet)  # its own exit code says the rest
    return code


def _say_followed_node(settings: Settings, jobs: Jobs, job_id: str) -> None:
    """--wait shows the first node's output: say so when the job has more than one."""
    from gpupoolctl.jobs.service import find

    names = [str(n["host"]) for n in find(jobs, job_id).get("nodes") or []]
    if len(names) > 1:
        notice(
            f"{job_id}: showing {names[0]}'s output (node 1 of {len(names)}); "
            f"`gpupoolctl logs --host NODE {job_id}` for {', '.join(names[1:])}",
            quiet=settings.quiet,
        )


def find_state(jobs: Jobs, job_id: str) -> str:
    from gpupoolctl.jobs.service import find

    try:
        return str(find(jobs, job_id).get("state"))
    except GpupoolError:
        return "state unknown"


def _end_line(job: dict[str, Any]) -> str:
    """How a job ended: its state, its exit code or signal when it has one, and why."""
    parts = [str(job.get("state"))]
    if job.get("signal"):
        parts.append(f"killed by {job['signal']}")
    elif isinstance(job.get("exit_code"), int):
        parts.append(f"exit code {job['exit_code']}")
    reason = job.get("error") or job.get("reason")
    return ", ".join(parts) + (f" ({reason})" if reason else "")


# -- jobs / schedule ------------------------------------------------------------------------


def jobs_list(
    ctx: typer.Context,
    everything: Annotated[
        bool, typer.Option("--all", help="Also jobs that ended more than an hour ago.")
    ] = False,
    no_refresh: Annotated[
        bool,
        typer.Option("--no-refresh", help="Show what the ledger knows, without asking nodes."),
    ] = False,
    backend: BackendOption = "pool",
) -> None:
    """Jobs: id, name, state, node, slice, age, exit code. Polls running jobs on their
    nodes first (one fan-out), records the ones that ended and releases their slices, then
    runs a schedule pass. Exit 3 when some node could not be asked.

    With --backend slurm: your Slurm jobs (one squeue call): pending, running and those
    that ended within the cluster's MinJobAge, with node, GRES and exit code."""
    settings: Settings = ctx.obj
    if _backend(backend) == "slurm":
        from gpupoolctl.ledger import current_user
        from gpupoolctl.slurm import jobs as slurm_jobs
        from gpupoolctl.slurm.client import SlurmClient

        if no_refresh:
            raise UsageError("--no-refresh has no meaning with --backend slurm")
        found = slurm_jobs.listing(SlurmClient(), current_user())
        _emit_slurm(settings, found)
        if not found:
            notice("no jobs", quiet=settings.quiet)
        return
    ledger = open_ledger(settings)
    if _listed_from_ledger(settings, ledger, everything=everything):
        return
    from gpupoolctl.jobs.dryrun import waiting_reasons
    from gpupoolctl.jobs.listing import recent
    from gpupoolctl.jobs.refreshing import refresh

    jobs = open_jobs(settings, ledger=ledger)  # it reads only what was appended since
    if not no_refresh:
        refresh(jobs)
    records = recent(jobs.read().state, everything=everything)
    waiting = waiting_reasons(jobs) if any(j.get("state") == "queued" for j in records) else {}
    rows = _rows(records, waiting)
    emit(settings, data=rows, rows=rows, columns=JOB_COLUMNS, csv_columns=JOB_CSV_COLUMNS)
    if not rows:
        notice("no jobs", quiet=settings.quiet)
    _finish(settings, jobs)


def _listed_from_ledger(settings: Settings, ledger: Ledger, *, everything: bool) -> bool:
    """`jobs` where a refresh would have nothing to do (no job running or pending, nothing
    queued, no re-cut in flight, no lost host or fenced run): the rows straight from the
    ledger, without loading the job service, the scheduler, the policy or the inventory
    (cron and CI scripts ask an idle pool this all the time). False: there is work, and
    the caller refreshes as usual."""
    from gpupoolctl.jobs.listing import idle, recent

    view = ledger.read()
    if not idle(view.state):
        return False
    rows = _rows(recent(view.state, everything=everything))
    emit(settings, data=rows, rows=rows, columns=JOB_COLUMNS, csv_columns=JOB_CSV_COLUMNS)
    if not rows:
        notice("no jobs", quiet=settings.quiet)
    for message in view.warnings:
        warn(message)
    return True


def schedule(
    ctx: typer.Context,
    watch: Annotated[
        str | None,
        typer.Option(
            "--watch",
            metavar="INTERVAL",
            help="Run the pass again every INTERVAL (15s, 1m, ...) until Ctrl-C (exit 130): "
            "for systemd or tmux. -o json prints one JSON document per pass, one per line.",
        ),
    ] = None,
    passes: Annotated[
        int | None,
        typer.Option("--passes", min=1, metavar="N", help="With --watch: stop after N passes."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Say what the pass would do now (start, preempt, re-cut, wait, refuse) "
            "and why; change nothing and ask no node (jobs that ended since the last pass "
            "are not known yet).",
        ),
    ] = False,
) -> None:
    """One pass of the scheduling loop: settle, reap, start what fits (preempting when a
    higher priority may), re-cut idle cards for waiting work (elastic).

    Re-cuts happen only with a pool policy whose elastic section allows them (--pool-policy,
    GPUPOOL_POLICY or ~/.config/gpupoolctl/pool.yaml; see `gpupoolctl policy check`).
    Cron-friendly; submit and jobs run the same pass."""
    settings: Settings = ctx.obj
    if dry_run:
        if watch is not None or passes is not None:
            raise UsageError("--dry-run shows one pass: not with --watch or --passes")
        from gpupoolctl.jobs.dryrun import dry_pass

        jobs = open_jobs(settings)
        _emit_events(settings, dry_pass(jobs))
        _finish(settings, jobs)
        return
    if watch is None:
        if passes is not None:
            raise UsageError("--passes needs --watch")
        jobs = open_jobs(settings)
        _one_pass(settings, jobs)
        _finish(settings, jobs)
        return
    interval = _interval(watch)
    from gpupoolctl.cli import pool
    from gpupoolctl.jobs.watch import watch as watch_loop

    sessions = pool.open_sessions(settings)  # one agent per host for every pass
    jobs = open_jobs(settings, run=pool.session_runner(sessions))
    done = 0
    try:
        for round_ in watch_loop(jobs, interval, passes):
            _render_round(settings, round_.at, round_.events)
            for message in round_.warnings:
                warn(message)
            done = round_.number
    except KeyboardInterrupt:
        notice(f"stopped after {done} pass(es)", quiet=settings.quiet)
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    finally:
        sessions.close()
    if jobs.hosts_failed:
        raise typer.Exit(int(ExitCode.HOSTS_FAILED))


def _interval(text: str) -> float:
    from gpupoolctl.policy.values import duration_s

    seconds = duration_s(text, "--watch", most_s=86400.0)
    if seconds < 0.05:
        raise UsageError(f"--watch: {text!r} is too short; give at least 0.05s")
    return seconds


SCHEDULE_COLUMNS = (Column("event", "EVENT"), Column("job", "JOB"), Column("detail", "DETAIL"))


def _event_rows(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The loop's events as rows of EVENT, JOB and DETAIL (each row also holds the event's
    JSON fields, for CSV)."""
    rows = []
    for event in events:
        row = event.to_dict()
        detail = row.get("reason") or row.get("error")
        match event:
            case Reshaped(gpu=gpu, before=before, after=after, error=failed, jobs=held):
                detail = f"{gpu}: {before} -> {after}" + (f": {failed}" if failed else "")
                row["job"] = ",".join(held)
            case WouldRecut(gpu=gpu, before=before, after=after):
                detail = f"{gpu}: {before} -> {after}"
            case NodeLost(host=host, since=since, answered=answered, jobs=held):
                last = answered or f"{since} or earlier"
                detail = f"{host}: no answer since {last}; jobs ended or requeued"
                row["job"] = ",".join(held)
            case NodeReturned(host=host, undrained=undrained):
                lifted = "its drain lifted" if undrained else "still drained"
                detail = f"{host} answers again, stale runs killed; {lifted}"
            case StaleRunKilled(host=host, run=run):
                detail = f"{host}: run {run} of a job that moved on, killed"
        rows.append({**row, "victims": row.get("victims"), "detail": detail})
    return rows


def _emit_events(settings: Settings, events: Sequence[Event]) -> None:
    """A pass's events: their dicts (JSON, YAML) or their rows (table, CSV)."""
    data = [e.to_dict() for e in events]
    emit(settings, data=data, rows=_event_rows(events), columns=SCHEDULE_COLUMNS)


def _one_pass(settings: Settings, jobs: Jobs) -> None:
    from gpupoolctl.jobs.refreshing import refresh

    _emit_events(settings, refresh(jobs).events)


def _render_round(settings: Settings, stamp: str, events: Sequence[Event]) -> None:
    """One round of `schedule --watch`: a JSON document per line, or a line per event."""
    if settings.resolved_output() is OutputFormat.json:
        import json

        data = [e.to_dict() for e in events]
        print(json.dumps({"at": stamp, "events": data}), flush=True)
        return
    for row in _event_rows(events):
        if row.get("event") == "waiting" and settings.verbosity <= 0:
            continue  # the same every pass: shown with -v
        print(f"{stamp}  {row['event']:<15} {row.get('job') or '':<10} {row.get('detail') or ''}")
    sys.stdout.flush()


# -- logs / cancel --------------------------------------------------------------------------


def logs(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="JOB", help="As printed by submit.")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until it ends.")
    ] = False,
    stderr: Annotated[bool, typer.Option("--stderr", help="Its stderr instead of stdout.")] = False,
    host: Annotated[
        str | None, typer.Option("--host", help="For a multi-node job: this node's output.")
    ] = None,
    backend: BackendOption = "pool",
) -> None:
    """A job's output, read from its folder on its node.

    With --backend slurm: the file Slurm writes it to (scontrol's StdOut, by default
    slurm-<id>.out where it was submitted), read on this machine: a shared or local folder.
    Without sbatch --error, stderr is in the same file."""
    from gpupoolctl.jobs.following import FOLLOW_INTERVAL_S

    settings: Settings = ctx.obj
    stream = "stderr" if stderr else "stdout"
    jobs = None
    if _backend(backend) == "slurm":
        from gpupoolctl.slurm import jobs as slurm_jobs
        from gpupoolctl.slurm.client import SlurmClient

        if host is not None:
            raise UsageError("--host with --backend slurm: a batch job has one output file")
        client = SlurmClient()

        last: dict[str, Any] = {}

        def read(offset: int) -> dict[str, Any]:
            # Ask slurmctld again only when the last chunk was empty (has the job ended?):
            # reading a long file through is one scontrol call, not one per chunk.
            known = last["job"] if last.get("text") else None
            last.update(
                slurm_jobs.output(client, job_id, stream=stream, offset=offset, known=known)
            )
            return last

        # Slurm asks clients not to poll slurmctld in tight loops: start slower.
        intervals = slurm_jobs.WAIT_INTERVAL_S
    else:
        from gpupoolctl.jobs.logs import logs as read_logs

        jobs = open_jobs(settings)

        def read(offset: int) -> dict[str, Any]:
            chunk = read_logs(jobs, job_id, stream=stream, offset=offset, host=host)
            return {**chunk, "active": chunk["state"] == "running"}

        intervals = FOLLOW_INTERVAL_S
    offset = 0
    delay = intervals[0]
    collected: list[str] = []
    as_text = settings.resolved_output() is OutputFormat.table
    while True:
        chunk = read(offset)
        offset = chunk["next_offset"]
        if as_text:
            sys.stdout.write(chunk["text"])
            sys.stdout.flush()
        else:
            collected.append(chunk["text"])
        at_end = offset >= chunk.get("size", offset)
        if not follow and at_end:
            break  # read it all: no second round trip to learn there is no more
        if chunk["text"]:
            delay = intervals[0]
            continue
        if not follow or not chunk["active"]:
            break
        time.sleep(delay)
        delay = min(delay * 1.5, intervals[1])
    if not as_text:
        data = {"job": job_id, "stream": stream, "text": "".join(collected), "size": offset}
        emit(settings, data=data, rows=[data], columns=[Column(k, k) for k in data])
    if jobs is not None:
        _where_else(settings, jobs, job_id, stream, chunk.get("host"), host_given=host is not None)
        _finish(settings, jobs)


def _where_else(
    settings: Settings, jobs: Jobs, job_id: str, stream: str, shown: Any, *, host_given: bool
) -> None:
    """Say which node's output was shown when the job has several, and where the stderr of
    a job that failed is, when stdout was shown (stderr on stderr: stdout stays the job's)."""
    from gpupoolctl.jobs.service import find

    job = find(jobs, job_id)
    names = [str(n["host"]) for n in job.get("nodes") or []]
    if len(names) > 1 and not host_given:
        others = ", ".join(n for n in names if n != shown)
        notice(
            f"{job_id}: this is {shown}'s {stream} (node 1 of {len(names)}); --host {others} "
            "for the others",
            quiet=settings.quiet,
        )
    if stream == "stdout" and job.get("state") in ("failed", "cancelled"):
        notice(
            f"{job_id}: {job.get('state')}; its stderr: gpupoolctl logs --stderr {job_id}",
            quiet=settings.quiet,
        )


def cancel(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="JOB", help="As printed by submit.")],
    grace: Annotated[
        float | None,
        typer.Option(
            "--grace",
            min=0,
            max=3600,
            help="Seconds between SIGTERM and SIGKILL (default: "
            "the job's own, 30 s unless it was submitted with --grace).",
        ),
    ] = None,
    forget: Annotated[
        bool,
        typer.Option(
            "--forget",
            help="Do not ask its node: record the job failed and release its slices now. "
            "For a job whose node is gone for good: what still runs there is killed when "
            "the node answers a `schedule` or `jobs` pass, and its slices take no new work "
            "until then.",
        ),
    ] = False,
    backend: BackendOption = "pool",
) -> None:
    """Stop a job (SIGTERM to its process group, grace period, SIGKILL), release its
    slices and record it cancelled; a queued job just leaves the queue, and one being
    launched is stopped on its node before it can start (or right after, if it had).
    Exit 1 when the job had already ended (it is recorded as it ended, e.g. done), or
    when its node could not confirm the end (then --forget, if the node is gone), and for
    another user's job unless you are a pool admin (the pool policy's `admins:`).

    With --backend slurm: scancel JOB, then its state once Slurm settled it (exit 1 when the
    job had already ended, or when Slurm did not confirm its end within 15 s)."""
    from gpupoolctl.jobs.cancelling import cancel as cancel_job

    settings: Settings = ctx.obj
    if _backend(backend) == "slurm":
        if forget:
            raise UsageError("--forget with --backend slurm: Slurm keeps its own jobs")
        _cancel_slurm(settings, job_id, grace)
        return
    jobs = open_jobs(settings)
    if forget:
        from gpupoolctl.jobs.cancelling import forget as forget_job
        from gpupoolctl.ledger import current_user

        job = forget_job(jobs, job_id, who=current_user())
        warn(
            f"{job_id}: forgotten; its node was not asked: a run left there is killed when "
            "the node answers a `schedule` or `jobs` pass, and its slices take no work until"
        )
        data = _rows([job])[0]
        if settings.resolved_output() is OutputFormat.table:
            print(f"forgot {job_id}: {job.get('error')}")
        else:
            emit(settings, data=data, rows=[data], columns=JOB_COLUMNS, csv_columns=JOB_CSV_COLUMNS)
        return
    job = cancel_job(jobs, job_id, grace_s=grace)
    data = _rows([job])[0]
    if settings.resolved_output() is OutputFormat.table:
        code = job.get("exit_code")
        print(f"cancelled {job_id}" + (f" (exit code {code})" if code is not None else ""))
    else:
        emit(settings, data=data, rows=[data], columns=JOB_COLUMNS, csv_columns=JOB_CSV_COLUMNS)
    _finish(settings, jobs)


def _cancel_slurm(settings: Settings, job_id: str, grace: float | None) -> None:
    from gpupoolctl.slurm import jobs as slurm_jobs
    from gpupoolctl.slurm.client import SlurmClient

    if grace is not None:
        raise UsageError("--grace with --backend slurm: Slurm's KillWait sets the grace period")
    # A job that had already ended is an error (exit 1), as the pool backend's cancel says.
    job = slurm_jobs.cancel(SlurmClient(), job_id, on_error=_asking_again)
    if settings.resolved_output() is OutputFormat.table:
        if job.finished:
            print(f"cancelled {job.job_id}: {job.describe_end()}")
    else:
        _emit_slurm(settings, [job], one=True)
    if not job.finished:
        # As the pool backend's cancel: signalled but not confirmed is exit 1.
        warn(
            f"job {job.job_id} was signalled but Slurm has not confirmed it ended "
            f"(still {job.state}); `gpupoolctl jobs --backend slurm` shows when it does"
        )
        raise typer.Exit(int(ExitCode.ERROR))
