"""`stress ramp`, `stress compare`, `stress report`: find the pool's knee, keep baselines.

Parse, call gpupoolctl.stress, render. Exit codes: 0 ok; 1 harness error (unreadable
result, a backend that could not start, a ramp where no level measured anything or no job
succeeded at any level, runs of different workloads to compare); 2 usage; 4 a threshold
broke during the ramp, a level where no job succeeded, or `compare` found a regression or
could not cover the baseline (missing levels, an early stop); 3 some hosts failed or were
unreachable during the ramp (when nothing above applies); 130 the ramp was interrupted
(what it measured is still shown and saved; a second Ctrl-C aborts it, still 130).
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpupoolctl.cli.console import notice, warn
from gpupoolctl.cli.render import Column, emit
from gpupoolctl.cli.settings import OutputFormat, Settings
from gpupoolctl.errors import ExitCode, GpupoolError, UsageError

if TYPE_CHECKING:
    from gpupoolctl.stress.backend import Backend
    from gpupoolctl.stress.model import RunResult
    from gpupoolctl.stress.runner import Event
    from gpupoolctl.stress.scenario import Scenario

app = typer.Typer(
    help="Stress tests: ramp load through the real submit path, find the knee, compare "
    "against a baseline.",
    no_args_is_help=True,
)

_TEXT_COLUMNS = ("dominant", "thresholds")


def _level_columns(result: RunResult) -> tuple[Column, ...]:
    from gpupoolctl.stress.report_text import level_columns

    return tuple(
        Column(key, header.upper(), "left" if key in _TEXT_COLUMNS else "right")
        for key, header in level_columns(result).items()
    )


COMPARE_COLUMNS = (
    Column("metric", "METRIC"),
    Column("level", "LEVEL", "right"),
    Column("baseline", "BASELINE", "right"),
    Column("current", "CURRENT", "right"),
    Column("change", "CHANGE", "right"),
    Column("limit", "LIMIT", "right"),
    Column("verdict", "VERDICT"),
)
BACKENDS = ("pool", "noop", "slurm")
# --model is a GPU model everywhere else (submit --model H100); --html is stress report's.
MODEL_DEPRECATED = (
    "stress ramp --model is deprecated: use --load-model closed|open; "
    "--model is a GPU model (submit --model H100)"
)
REPORT_DEPRECATED = "stress ramp --report is deprecated: use --html FILE, as stress report does"


# -- ramp -----------------------------------------------------------------------------------


def _scenario(scenario_file: Path | None, overrides: dict[str, Any]) -> Scenario:
    from gpupoolctl.stress.scenario import load_scenario, scenario_from_flags

    base = load_scenario(scenario_file) if scenario_file is not None else None
    given = {k: v for k, v in overrides.items() if v not in (None, [], ())}
    return scenario_from_flags(base, **given)


def _pool_backend(settings: Settings, scenario: Scenario) -> Backend:
    from gpupoolctl.cli import pool
    from gpupoolctl.cli.handles import open_ledger
    from gpupoolctl.ledger import current_user
    from gpupoolctl.policy import resolve_policy
    from gpupoolctl.stress.backend import job_spec
    from gpupoolctl.stress.pool_backend import PoolBackend

    chosen = pool.job_hosts(settings)
    sessions = pool.open_sessions(settings)  # one agent per host for the whole ramp

    backend = PoolBackend(
        open_ledger=lambda: open_ledger(settings),
        targets=chosen.everyone,
        run=pool.session_runner(sessions),
        close_run=sessions.close,
        owner=current_user(),
        hosts=chosen.placeable,
        make_spec=lambda work: job_spec(work, scenario.policy),
        poll_s=scenario.poll_s,
        policy=resolve_policy(settings.pool_policy),
        in_hosts=chosen.in_hosts(),
    )
    try:
        backend.prepare(scenario.requests)
    except BaseException:
        sessions.close()
        raise
    return backend


def _slurm_backend(scenario: Scenario) -> Backend:
    from gpupoolctl.slurm.client import SlurmClient
    from gpupoolctl.stress.backend import job_spec
    from gpupoolctl.stress.slurm_backend import SlurmBackend

    backend = SlurmBackend(
        SlurmClient(), lambda work: job_spec(work, scenario.policy), poll_s=scenario.poll_s
    )
    backend.prepare(scenario.requests)
    return backend


@contextlib.contextmanager
def _interruptible(ramp: Any) -> Iterator[None]:
    """First Ctrl-C: finish the level's bookkeeping, cancel the jobs, keep the results.
    A second one stops at once."""
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, previous)
        warn("interrupted: stopping the ramp (Ctrl-C again to abort at once)")
        ramp.interrupt()

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _progress(settings: Settings, levels: int) -> Iterator[Callable[[Event], None]]:
    """Per-level lines on stderr (kept in cron mail and CI logs); on a terminal, also a bar
    over the levels with the time elapsed."""
    from gpupoolctl.stress.formats import format_duration, format_rate
    from gpupoolctl.stress.runner import LevelDone, LevelStarted

    def line(event: Event) -> str | None:
        if isinstance(event, LevelStarted):
            return (
                f"level {event.level:g} ({event.index + 1}/{event.total}): "
                f"{format_duration(event.seconds)} of load..."
            )
        level = event.result
        if not level.measured:
            return (
                f"level {level.level:g}: measured nothing (no job submitted in the steady "
                "window ended)"
            )
        text = (
            f"level {level.level:g}: {format_rate(level.throughput)} jobs/s, "
            f"queue wait p95 {format_duration(level.queue_wait.p95)}, "
            f"launch p95 {format_duration(level.launch.p95)}, {level.failed} failed"
        )
        if level.restarts or level.recovered:
            text += f", {level.restarts} restarts ({level.recovered} jobs recovered)"
        if level.lost_nodes:
            text += f", {level.lost_nodes} node(s) lost"
        return text

    if settings.quiet:
        yield lambda event: None
        return
    if not sys.stderr.isatty():
        yield lambda event: notice(line(event) or "")
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gpupoolctl.cli.console import err_console

    columns = (
        TextColumn("levels"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[now]}"),
    )
    with Progress(*columns, console=err_console(), transient=True) as bar:
        task = bar.add_task("levels", total=levels, now="")

        def on_event(event: Event) -> None:
            text = line(event) or ""
            if isinstance(event, LevelDone):
                bar.console.print(f"gpupoolctl: {text}", highlight=False)
                bar.update(task, advance=1, now="")
            else:
                bar.update(task, now=text)

        yield on_event


def _show(settings: Settings, result: RunResult, *, plot: bool, baseline: Any = None) -> None:
    from gpupoolctl.stress import report_text
    from gpupoolctl.stress import result as results

    # CSV is the flat rows with raw numbers (to_csv_rows), never the table's text rows:
    # their keys differ, and each cell would come out as '-'.
    as_csv = settings.resolved_output() is OutputFormat.csv
    csv_rows = results.to_csv_rows(result)
    emit(
        settings,
        data=_result_data(result),
        rows=csv_rows if as_csv else report_text.level_rows(result),
        columns=_level_columns(result),
        csv_columns=tuple(Column(k, k) for k in (list(csv_rows[0]) if csv_rows else ["level"])),
        title=f"stress: {result.scenario.get('name') or 'ramp'} ({result.backend})",
    )
    if settings.rich_tables or settings.resolved_output().value == "table":
        lines = report_text.knee_lines(result.knees)
        lines += report_text.bottleneck_lines(result)
        if plot:
            lines.append(report_text.terminal_plot(result, baseline, color=sys.stdout.isatty()))
        for line in lines:
            sys.stdout.write(line + "\n")


def _result_data(result: RunResult) -> dict[str, Any]:
    """The run as saved, and the bottleneck found in it (derived, never saved: a result
    file holds measurements only)."""
    from gpupoolctl.stress import result as results
    from gpupoolctl.stress.bottleneck import find_bottleneck

    data = results.to_dict(result)
    found = find_bottleneck(result.levels, result.knees)
    data["bottleneck"] = found.to_dict() if found is not None else None
    return data


@app.command("ramp")
def ramp(
    ctx: typer.Context,
    scenario_file: Annotated[
        Path | None,
        typer.Option("--scenario", "-s", help="Scenario YAML (see playbooks/stress-*.yaml)."),
    ] = None,
    levels: Annotated[
        str | None,
        typer.Option(
            "--levels",
            help="Concurrency (closed) or arrivals/s (open): 1,2,4,8 or 1..64x2 (geometric) "
            "or 1..33+8 (linear).",
        ),
    ] = None,
    load_model: Annotated[
        str | None,
        typer.Option(
            "--load-model",
            help="closed: N submitters each waiting for its job; open: "
            "a fixed arrival rate per second. (--model, the old spelling, is deprecated: "
            "--model is a GPU model, as in submit --model H100.)",
        ),
    ] = None,
    old_model: Annotated[
        str | None,
        typer.Option("--model", hidden=True, help=f"Deprecated: {MODEL_DEPRECATED}"),
    ] = None,
    warmup: Annotated[
        str | None, typer.Option("--warmup", help="Per level, not measured: 5s.")
    ] = None,
    hold: Annotated[
        str | None, typer.Option("--hold", help="Per level, measured (the steady window): 30s.")
    ] = None,
    drain: Annotated[
        str | None,
        typer.Option("--drain", help="After each level, wait this long for jobs to end."),
    ] = None,
    job_timeout: Annotated[
        str | None, typer.Option("--job-timeout", help="A job running longer fails.")
    ] = None,
    workload: Annotated[
        str | None,
        typer.Option(
            "--workload",
            "-w",
            help="sim (contention model), sleep, cmd, matmul, train (data-parallel steps: "
            "compute and all-reduce over the links the placement chose).",
        ),
    ] = None,
    work: Annotated[
        str | None,
        typer.Option(
            "--work",
            help="How long one job runs alone: sleep and matmul as given; sim on a whole H100 "
            "SXM (a slice takes longer by its share of its card's bandwidth). Default 1s.",
        ),
    ] = None,
    cmd: Annotated[
        str | None, typer.Option("--cmd", help="The command for --workload cmd (no shell).")
    ] = None,
    profile: Annotated[
        str | None, typer.Option("--profile", "-p", help="Each job asks for this profile.")
    ] = None,
    mem: Annotated[
        str | None, typer.Option("--mem", "-m", help="Each job asks for this memory: 10G.")
    ] = None,
    gpus: Annotated[
        int | None, typer.Option("--gpus", "-g", min=1, help="Each job asks for N slices.")
    ] = None,
    max_restarts: Annotated[
        int | None,
        typer.Option(
            "--max-restarts",
            min=0,
            max=100,
            help="Each job runs again up to N times after a failure exit or a lost node (as "
            "submit --max-restarts; after a back-off); the table then shows restarts, "
            "recovered jobs and lost nodes per level.",
        ),
    ] = None,
    threshold: Annotated[
        list[str] | None,
        typer.Option(
            "--threshold",
            "-t",
            metavar="EXPR",
            help="'queue_wait.p95 < 5s', 'failure_rate < 1%'; repeat; replaces the "
            "scenario's. Broken at two levels in a row: the ramp stops; any broken: exit 4.",
        ),
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="For the request mix.")] = None,
    placement: Annotated[
        str | None,
        typer.Option(
            "--policy",
            help="Placement policy for every job: best-fit (default), spread or topology "
            "(replaces the scenario's policy:).",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Scenario name in results.")] = None,
    backend_name: Annotated[
        str,
        typer.Option(
            "--backend",
            help="pool: gpupoolctl's own submit path; noop: the "
            "harness alone (measures its overhead); slurm: sbatch to the Slurm cluster of "
            "SLURM_CONF (built-in workloads run as python -m gpupoolctl.agent.workloads, so "
            "gpupoolctl must be importable on the compute nodes).",
        ),
    ] = "pool",
    save: Annotated[
        Path | None, typer.Option("--save", help="Write the results (JSON) here.")
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="Write a self-contained HTML report here (as stress report --html). "
            "--report, the old spelling, is deprecated.",
        ),
    ] = None,
    old_report: Annotated[
        Path | None,
        typer.Option("--report", hidden=True, help=f"Deprecated: {REPORT_DEPRECATED}"),
    ] = None,
    baseline_file: Annotated[
        Path | None, typer.Option("--baseline", help="Overlay this result in plots/report.")
    ] = None,
    plot: Annotated[bool, typer.Option("--plot", help="A terminal plot under the table.")] = False,
) -> None:
    """Ramp load level by level through the real submit path; report throughput, queue wait,
    failures and the knee (diminishing returns, USL capacity peak, latency knee)."""
    from gpupoolctl.stress import report_html
    from gpupoolctl.stress import result as results
    from gpupoolctl.stress.backend import NoopBackend
    from gpupoolctl.stress.runner import Ramp
    from gpupoolctl.stress.verdict import judge

    settings: Settings = ctx.obj
    # Warned even with -q, as the other deprecated spellings: before they go.
    if old_model is not None:
        warn(MODEL_DEPRECATED)
        load_model = load_model if load_model is not None else old_model  # the new one wins
    if old_report is not None:
        warn(REPORT_DEPRECATED)
        html = html if html is not None else old_report
    if backend_name not in BACKENDS:
        raise UsageError(f"unknown backend {backend_name!r}: use {', '.join(BACKENDS)}")
    html_option = "--html" if html is not None and old_report is None else "--report"
    for option, path in (("--save", save), (html_option, html)):
        # Found out before the ramp, not after it has run for an hour (an empty value reads
        # as the current folder).
        if path is not None and path.is_dir():
            raise UsageError(f"{option} {path}: is a folder; give the file to write")
    scenario = _scenario(
        scenario_file,
        {
            "levels": levels,
            "model": load_model,
            "warmup": warmup,
            "hold": hold,
            "drain": drain,
            "job_timeout": job_timeout,
            "workload": workload,
            "work": work,
            "cmd": cmd,
            "profile": profile,
            "mem": mem,
            "gpus": gpus,
            "max_restarts": max_restarts,
            "thresholds": threshold,
            "seed": seed,
            "name": name,
            "policy": placement,
        },
    )
    baseline = results.load(baseline_file) if baseline_file is not None else None
    try:
        if backend_name == "slurm":
            backend: Backend = _slurm_backend(scenario)
        elif backend_name == "noop":
            backend = NoopBackend()
        else:
            backend = _pool_backend(settings, scenario)
        with _progress(settings, len(scenario.levels)) as on_event:
            runner = Ramp(scenario, backend, on_event=on_event)
            try:
                with _interruptible(runner):
                    outcome = runner.run()
            finally:  # also when the ramp broke: the likely cause is among them
                for message in [*backend.warnings(), *runner.notes]:
                    warn(message)
    except KeyboardInterrupt:  # before the ramp started, or a second Ctrl-C: stop at once
        warn("interrupted: the ramp was aborted; nothing was saved")
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    if save is not None:
        results.save(outcome, save)
        notice(f"results saved to {save}", quiet=settings.quiet)
    if html is not None:
        report_html.write_html(outcome, html, baseline)
        notice(f"report written to {html}", quiet=settings.quiet)
    _show(settings, outcome, plot=plot, baseline=baseline)
    verdict = judge(outcome)
    for message in verdict.warnings:
        warn(message)
    _warn_broken_thresholds(outcome)
    for message in verdict.failures:
        warn(message)
    if outcome.stopped_early:
        warn(outcome.stopped_early)
    raise typer.Exit(int(ramp_exit_code(outcome, verdict, runner, backend)))


def ramp_exit_code(outcome: RunResult, verdict: Any, runner: Any, backend: Any) -> ExitCode:
    """Ctrl-C: 130 (the results still count). Otherwise the first of 1 (the harness
    measured nothing usable), 4 (a threshold broke, a level where no job succeeded), 3
    (some hosts failed or were unreachable during the ramp), 0."""
    if runner.interrupted:
        return ExitCode.INTERRUPTED
    if verdict.error is not None:
        raise GpupoolError(verdict.error)
    if verdict.failures or not outcome.thresholds_ok:
        return ExitCode.CHECK_FAILED
    if getattr(backend, "hosts_failed", False):
        return ExitCode.HOSTS_FAILED
    return ExitCode.OK


def _warn_broken_thresholds(result: RunResult) -> None:
    """Each level's broken thresholds on stderr, as `compare` names its regressions: the
    reason for exit 4 in a cron mail or CI log, whatever the output format, and with -q."""
    from gpupoolctl.stress.report_text import level_rows

    for level, row in zip(result.levels, level_rows(result), strict=True):
        if not level.thresholds_ok:
            warn(f"level {row['level']}: threshold broken: {row['thresholds']}")


# -- compare --------------------------------------------------------------------------------


@app.command("compare")
def compare(
    ctx: typer.Context,
    result_file: Annotated[Path, typer.Argument(metavar="RESULT", help="A saved ramp result.")],
    baseline_file: Annotated[
        Path, typer.Option("--baseline", "-b", help="The result to compare against.")
    ],
    tolerance: Annotated[
        str | None,
        typer.Option(
            "--tolerance",
            help="throughput=10%,p95=25%,p95_abs=50ms,failure_rate=1%,knee=20%,kneedle=1 "
            "(the defaults; give only the ones to change).",
        ),
    ] = None,
    allow_missing_levels: Annotated[
        bool,
        typer.Option(
            "--allow-missing-levels",
            help="Compare only the levels both runs measured, even when the run lacks some of "
            "the baseline's levels or stopped early (a warning instead of exit 4).",
        ),
    ] = False,
    allow_other_workload: Annotated[
        bool,
        typer.Option(
            "--allow-other-workload",
            help="Compare runs of different workloads (kind or arguments) anyway, with a "
            "warning (otherwise exit 1: the numbers measure different things).",
        ),
    ] = False,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            "--report",
            help="Write a self-contained HTML report here: the run's curves over the "
            "baseline's, and each run's bottleneck (written whatever the verdict).",
        ),
    ] = None,
) -> None:
    """Compare a ramp with a baseline: exit 4 when throughput dropped, queue wait grew or the
    knee moved earlier beyond the tolerances, or when the run lacks baseline levels or
    stopped early; 1 when a file cannot be read or the runs are of different workloads."""
    from gpupoolctl.stress import compare as comparing
    from gpupoolctl.stress import result as results

    settings: Settings = ctx.obj
    if html is not None and html.is_dir():
        raise UsageError(f"--html {html}: is a folder; give the file to write")
    tolerances = comparing.parse_tolerances(tolerance or "")
    current = results.load(result_file)
    baseline = results.load(baseline_file)
    comparison = comparing.compare(
        current,
        baseline,
        tolerances,
        allow_missing_levels=allow_missing_levels,
        allow_other_workload=allow_other_workload,
    )
    for message in comparison.warnings:
        warn(message)
    rows = [comparing.row_dict(r) for r in comparison.rows]
    emit(
        settings,
        data={
            "regressed": comparison.regressed,
            "regressions": comparison.regressions,
            "incomplete": comparison.incomplete,
            "warnings": comparison.warnings,
            "rows": rows,
        },
        # CSV keeps the raw numbers (a change of 0.1, not '+10.0%'), as `ramp` and `report` do.
        rows=rows
        if settings.resolved_output() is OutputFormat.csv
        else [_readable(r) for r in rows],
        columns=COMPARE_COLUMNS,
        csv_columns=COMPARE_COLUMNS,
        title=f"{result_file} against {baseline_file}",
    )
    for sentence in [*comparison.regressions, *comparison.incomplete]:
        warn(sentence)
    if html is not None:
        from gpupoolctl.stress import report_html

        report_html.write_html(current, html, baseline)
        notice(f"report written to {html}", quiet=settings.quiet)
    if comparison.failed:
        raise typer.Exit(int(ExitCode.CHECK_FAILED))


def _readable(row: dict[str, Any]) -> dict[str, Any]:
    def number(value: Any) -> Any:
        return f"{value:.4g}" if isinstance(value, float) else value

    change = row.get("change")
    return {
        **{k: number(v) for k, v in row.items()},
        "change": f"{change:+.1%}" if isinstance(change, float) else change,
    }


# -- report ---------------------------------------------------------------------------------


@app.command("report")
def report_cmd(
    ctx: typer.Context,
    result_file: Annotated[Path, typer.Argument(metavar="RESULT", help="A saved ramp result.")],
    plot: Annotated[bool, typer.Option("--plot", help="A terminal plot under the table.")] = False,
    html: Annotated[
        Path | None, typer.Option("--html", help="Write a self-contained HTML report here.")
    ] = None,
    baseline_file: Annotated[
        Path | None, typer.Option("--baseline", "-b", help="Overlay this result.")
    ] = None,
) -> None:
    """Show a saved ramp: the table per level, the knees, and optionally plots."""
    from gpupoolctl.stress import report_html
    from gpupoolctl.stress import result as results

    settings: Settings = ctx.obj
    outcome = results.load(result_file)
    baseline = results.load(baseline_file) if baseline_file is not None else None
    if html is not None:
        report_html.write_html(outcome, html, baseline)
        notice(f"report written to {html}", quiet=settings.quiet)
    _show(settings, outcome, plot=plot, baseline=baseline)
