"""`pool`, `alloc`, `release` and the `ledger` group: the allocation ledger from the shell.

Parse, call gpupoolctl.ledger, render. Warnings the library returns go to stderr.
"""

from __future__ import annotations

import fnmatch
import json
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpupoolctl.cli.console import notice, warn
from gpupoolctl.cli.handles import open_ledger
from gpupoolctl.cli.render import Column, emit
from gpupoolctl.cli.settings import MEM_HELP, OutputFormat, Settings
from gpupoolctl.errors import ExitCode, GpupoolError, UsageError

if TYPE_CHECKING:
    from gpupoolctl.ledger import Allocation, Ledger

ledger_app = typer.Typer(
    help="The allocation ledger: history, checks, compaction, repair.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    """Add `pool`, `alloc`, `release` and the `ledger` group to the root command."""
    app.command("pool")(pool)
    app.command("alloc")(alloc)
    app.command("release")(release)
    app.add_typer(ledger_app, name="ledger")


def record_slices_of(settings: Settings, targets: list[Any]) -> list[Any]:
    """After the slices of `targets` changed (partition apply, sim reset), read their facts
    and record their slices, so nothing is ever placed on a slice that is gone. Only where
    a ledger is kept: changing a node does not start one. Holds left on slices that are gone
    are warned about (verify reports them as orphans). Returns the facts' results."""
    ledger = open_ledger(settings)
    if not targets or not ledger.path.exists():
        return []
    from gpupoolctl.cli import pool as hosts_pool

    results = hosts_pool.fan_out(settings, targets, {"v": 1, "verb": "facts", "args": {}})
    _warn_all(ledger.refresh_from_facts(results).warnings)
    hosts = {t.name for t in targets}
    for alloc, slice_id in ledger.read().state.orphans():
        if slice_id.split("/", 1)[0] in hosts:
            warn(f"{alloc.id} ({alloc.owner}) holds {slice_id}, which is gone now; release it")
    return results


def holds_by_host(settings: Settings, hosts: set[str]) -> dict[str, list[str]]:
    """Per host of `hosts`, who holds its slices now ("a-5 (ann)", "j-3 (bob)"), as the
    ledger says; nothing where no ledger is kept."""
    ledger = open_ledger(settings)
    if not ledger.path.exists():
        return {}
    view = ledger.read()
    found: dict[str, list[str]] = {}
    for alloc in view.state.active(view.now).values():
        job = view.state.job_holding(alloc.id)
        who = f"{job['id']} ({alloc.owner})" if job else f"{alloc.id} ({alloc.owner})"
        for slice_id in alloc.slices:
            host = str(view.state.slices.get(slice_id, {}).get("host") or slice_id.split("/")[0])
            if host in hosts and who not in found.get(host, []):
                found.setdefault(host, []).append(who)
    return found


def discover_slices(settings: Settings, ledger: Ledger) -> None:
    """On a ledger that knows no slices yet (a fresh one), record the selected hosts'
    slices from their facts, as submit does: `alloc` on a new pool then has slices to give.
    A ledger that knows slices is not touched (nor the inventory read): `pool` refreshes."""
    from gpupoolctl.cli import pool as hosts_pool

    if ledger.read().state.slices:
        return
    missing = hosts_pool.select(settings).targets()
    results = hosts_pool.fan_out(settings, missing, {"v": 1, "verb": "facts", "args": {}})
    for result in results:
        if not result.ok:
            warn(f"{result.name}: {result.outcome}: {result.error} (its slices are unknown)")
    if any(r.ok for r in results):
        _warn_all(ledger.refresh_from_facts(results).warnings)


def _warn_all(messages: list[str]) -> None:
    for message in messages:
        warn(message)


def _gib(mib: int | None) -> str | None:
    from gpupoolctl.hw.units import gib_text

    return None if mib is None else gib_text(mib)


# -- pool -----------------------------------------------------------------------------------

SLICE_COLUMNS = (
    Column("host", "HOST"),
    Column("slice", "SLICE"),
    Column("kind", "KIND"),
    Column("profile", "PROFILE"),
    Column("memory", "MEMORY GiB", "right"),
    Column("state", "STATE"),
    Column("owner", "OWNER"),
    Column("alloc", "ALLOC"),
    Column("expires", "EXPIRES"),
    Column("why", "WHY"),
)
SLICE_CSV_COLUMNS = tuple(
    Column(k, k)
    for k in (
        "host",
        "slice",
        "kind",
        "profile",
        "memory_mib",
        "state",
        "owner",
        "alloc",
        "expires",
        "uuid",
        "why",
    )
)


def pool(
    ctx: typer.Context,
    no_refresh: Annotated[
        bool,
        typer.Option(
            "--no-refresh", help="Show what the ledger knows, without contacting the nodes."
        ),
    ] = False,
    free: Annotated[bool, typer.Option("--free", help="Only the free slices.")] = False,
    host: Annotated[
        str | None,
        typer.Option("--host", help="Only hosts matching this glob (sg-*), like alloc --host."),
    ] = None,
    summary: Annotated[
        bool,
        typer.Option(
            "--summary",
            help="One line per node: slices, free, held, orphaned holds, free memory and shapes.",
        ),
    ] = False,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            metavar="FILE",
            help="Also write the pool as one self-contained page (no external assets): the "
            "view `top` draws, for mail or a status page.",
        ),
    ] = None,
) -> None:
    """Slices of the pool, free or held and by whom, per node.

    Reads the facts of the selected nodes (like `inventory`), records their slices in the
    ledger when they changed (whole GPUs, MIG instances, AMD partitions, SR-IOV VFs), then
    shows every slice (--free: the free ones; --summary: a line per node). Memory is in GiB
    rounded down, the figure `--mem` compares. Exit 3 when some nodes could not be read:
    their last known slices stay.
    """
    from gpupoolctl.cli import pool as hosts_pool
    from gpupoolctl.ledger import pool_report
    from gpupoolctl.sched.unavailable import blocks

    settings: Settings = ctx.obj
    ledger = open_ledger(settings)
    failed: list[Any] = []
    shown: set[str] | None = None

    def wanted(names: set[str]) -> set[str]:
        """The hosts --host keeps (all without it); none is an unknown host, exit 1."""
        if host is None:
            return names
        kept = {name for name in names if fnmatch.fnmatchcase(name, host)}
        if not kept:
            raise GpupoolError(f"--host {host!r} matches no host")
        return kept

    if not no_refresh:
        selection = hosts_pool.select(settings)
        shown = wanted({h.name for h in selection.hosts})
        targets = [t for t in selection.targets() if t.name in shown]  # ask only those
        results = hosts_pool.fan_out(settings, targets, {"v": 1, "verb": "facts", "args": {}})
        failed = [r for r in results if not r.ok]
        if len(failed) < len(results):
            _warn_all(ledger.refresh_from_facts(results).warnings)
    elif settings.limit:
        shown = wanted({h.name for h in hosts_pool.select(settings).hosts})
    view = ledger.read()
    _warn_all(view.warnings)
    if no_refresh and not settings.limit and host is not None:
        shown = wanted({s["host"] for s in view.state.slices.values()})
    report = pool_report(view.state, view.now, shown, blocked=blocks(view.state), free_only=free)
    data = {"ledger": str(ledger.path), **report}
    if summary:
        rows = [_summary_row(n) for n in data["nodes"]]
        emit(settings, data=data, rows=rows, columns=SUMMARY_COLUMNS)
    else:
        rows = [_slice_row(s) for n in data["nodes"] for s in n["slices"]]
        emit(settings, data=data, rows=rows, columns=SLICE_COLUMNS, csv_columns=SLICE_CSV_COLUMNS)
    if not summary and settings.resolved_output() is OutputFormat.table and data["nodes"]:
        from gpupoolctl.cli.render import table

        table(
            settings,
            [
                {**n, "holders": sorted({s["owner"] for s in n["slices"] if s["owner"]})}
                for n in data["nodes"]
            ],
            (
                Column("host", "HOST"),
                Column("total", "SLICES", "right"),
                Column("free", "FREE", "right"),
                Column("held", "HELD", "right"),
                Column("holders", "HELD BY"),
            ),
        )
    if html is not None:
        _write_pool_page(settings, html, host)
    for orphan in data["orphans"]:
        warn(orphan["message"])
    for result in failed:
        warn(f"{result.name}: {result.outcome}: {result.error} (its last known slices are shown)")
    if not rows and not failed:
        notice("the ledger knows no slices yet", quiet=settings.quiet)
    if failed:
        raise typer.Exit(int(ExitCode.HOSTS_FAILED))


def _write_pool_page(settings: Settings, path: Path, host: str | None) -> None:
    from gpupoolctl.atomic import write_file
    from gpupoolctl.board.frame import Filter
    from gpupoolctl.board.html import frame_page
    from gpupoolctl.cli.top_source import FrameSource

    frame = FrameSource(settings, None).frame(Filter.parse(f"host={host}" if host else ""))
    # 0644: the page shows what `pool` shows anyone who may read the ledger, and is meant
    # to be shared.
    write_file(path, frame_page(frame), mode=0o644, what="the pool page")
    notice(f"pool page written to {path}", quiet=settings.quiet)


SUMMARY_COLUMNS = (
    Column("host", "HOST"),
    Column("total", "SLICES", "right"),
    Column("free", "FREE", "right"),
    Column("held", "HELD", "right"),
    Column("orphaned", "ORPHANED", "right"),
    Column("free_memory", "FREE GiB", "right"),
    Column("shapes", "FREE SHAPES"),
)


def _summary_row(node: dict[str, Any]) -> dict[str, Any]:
    shapes = " ".join(f"{n}x{shape}" for shape, n in sorted(node["free_shapes"].items()))
    return {
        **{k: v for k, v in node.items() if k != "slices"},
        "free_memory": _gib(node["free_mib"]),
        "shapes": shapes or None,
    }


def _slice_row(entry: dict[str, Any]) -> dict[str, Any]:
    """A slice of pool_report as a table row: its memory in GiB next to the MiB."""
    row: dict[str, Any] = {}
    for key, value in entry.items():
        if key == "memory_mib":
            row["memory"] = _gib(value)
        row[key] = value
    return row


# -- alloc / release ------------------------------------------------------------------------


def _alloc_dict(alloc: Allocation) -> dict[str, Any]:
    return {
        "id": alloc.id,
        "owner": alloc.owner,
        "slices": alloc.slices,
        "created": alloc.created,
        "expires": alloc.expires,
        "seq": alloc.seq,
    }


# -n is a namespace (`export k8s -n`, as kubectl's); a count is --gpus/-g, as submit's.
COUNT_DEPRECATED = (
    "alloc --count/-n is deprecated: use --gpus/-g, as submit does; "
    "-n is a namespace (export k8s -n)"
)


def alloc(
    ctx: typer.Context,
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            "-p",
            help="MIG profile (1g.10gb), AMD mode (cpx), or kind: gpu, mig, partition, vf.",
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
    gpus: Annotated[
        int,
        typer.Option(
            "--gpus",
            "-g",
            min=1,
            help="How many slices, all or none (as submit's --gpus). --count/-n, the old "
            "spelling, is deprecated: -n is a namespace.",
        ),
    ] = 1,
    old_count: Annotated[
        int | None,
        typer.Option("--count", "-n", min=1, hidden=True, help=f"Deprecated: {COUNT_DEPRECATED}"),
    ] = None,
    host: Annotated[
        str | None, typer.Option("--host", help="Only on hosts matching this glob.")
    ] = None,
    vendor: Annotated[str | None, typer.Option("--vendor", help="nvidia or amd.")] = None,
    owner: Annotated[
        str | None, typer.Option("--owner", help="Who holds it (default: you).")
    ] = None,
    ttl: Annotated[
        str | None,
        typer.Option("--ttl", help="Free it automatically after this long: 30m, 8h, 2d."),
    ] = None,
    team: Annotated[
        str | None,
        typer.Option(
            "--team",
            help="Count it against this team's quota (the pool policy's teams:), as submit "
            "does. Default: the holder's first team there, else the default team.",
        ),
    ] = None,
) -> None:
    """Hold free slice(s) by hand and print the allocation id.

    Best fit: of the free slices that match, the ones with the least memory (then by id),
    so small requests never take big cards. With teams in the pool policy the hold counts
    against the holder's team (--team) and is admitted within its quota as submit's work is.
    Exit 5 when nothing fits, or nothing fits within the team's quota.
    """
    from dataclasses import replace

    from gpupoolctl.jobs.alloc import alloc as hold
    from gpupoolctl.jobs.teams import resolve_team
    from gpupoolctl.ledger import current_user
    from gpupoolctl.ledger.units import parse_duration, parse_memory_mib
    from gpupoolctl.policy import resolve_policy
    from gpupoolctl.policy.actor import is_pool_admin
    from gpupoolctl.sched import JobRequest
    from gpupoolctl.sched.snapshot import share_inputs

    settings: Settings = ctx.obj
    count = gpus
    if old_count is not None:
        warn(COUNT_DEPRECATED)  # even with -q, as the global -f's: before it goes
        source = ctx.get_parameter_source("gpus")
        if source is None or source.name == "DEFAULT":
            count = old_count  # --gpus given as well wins
    request = JobRequest(
        gpus=count,
        profile=profile,
        memory_mib=parse_memory_mib(mem) if mem is not None else None,
        vendor=vendor,
        host=host,
        team=team,
    )
    life: timedelta | None = parse_duration(ttl) if ttl is not None else None
    actor = current_user()
    who = owner if owner is not None else actor
    policy = resolve_policy(settings.pool_policy)
    admin = is_pool_admin(policy.admins, actor)
    request = replace(request, team=resolve_team(policy, who, team, admin=admin))
    ledger = open_ledger(settings)
    discover_slices(settings, ledger)
    done = hold(  # placed by sched (within the team's quota), held by the ledger
        ledger,
        request,
        owner=who,
        ttl=life,
        shares=lambda state, now: share_inputs(state, policy, now),
    )
    _warn_all(done.warnings)
    held: Allocation = done.value
    data = _alloc_dict(held)
    if settings.resolved_output() is OutputFormat.table:
        print(held.id)  # alone on stdout, so that ID=$(gpupoolctl alloc ...) works
        until = f" until {held.expires}" if held.expires else ""
        notice(
            f"{held.id}: {', '.join(held.slices)} held by {held.owner}{until}", quiet=settings.quiet
        )
        return
    row = {**data, "slices": " ".join(held.slices)}
    columns = [Column(k, k) for k in ("id", "owner", "slices", "created", "expires", "seq")]
    emit(settings, data=data, rows=[row], columns=columns)


def release(
    ctx: typer.Context,
    alloc_id: Annotated[str, typer.Argument(metavar="ALLOC_ID", help="As printed by alloc.")],
) -> None:
    """Give back the slices of an allocation. An unknown or already released id is an error,
    and so is another user's allocation, unless you are a pool admin (the pool policy's
    `admins:`; root always is)."""
    from gpupoolctl.ledger import current_user
    from gpupoolctl.policy import resolve_policy
    from gpupoolctl.policy.actor import is_pool_admin

    settings: Settings = ctx.obj
    user = current_user()
    admin = is_pool_admin(resolve_policy(settings.pool_policy).admins, user)
    done = open_ledger(settings).release(alloc_id, user=user, admin=admin)
    _warn_all(done.warnings)
    held: Allocation = done.value
    data = {"released": held.id, "owner": held.owner, "slices": held.slices}
    if settings.resolved_output() is OutputFormat.table:
        print(f"released {held.id} ({held.owner}): {', '.join(held.slices)}")
        return
    row = {**data, "slices": " ".join(held.slices)}
    emit(settings, data=data, rows=[row], columns=[Column(k, k) for k in data])


# -- ledger show / verify / compact / repair -------------------------------------------------

SHOW_COLUMNS = (
    Column("seq", "SEQ", "right"),
    Column("ts", "TIME"),
    Column("actor", "ACTOR"),
    Column("op", "OP"),
    Column("detail", "DETAIL"),
)
SHOW_CSV_COLUMNS = tuple(Column(k, k) for k in ("seq", "ts", "actor", "op", "batch", "data"))


def _detail(record: dict[str, Any]) -> str:
    data = record["data"]
    op = record["op"]
    if op == "alloc":
        until = f" until {data.get('expires')}" if data.get("expires") else ""
        return f"{data.get('id')} {data.get('owner')} {','.join(data.get('slices', []))}{until}"
    if op == "release":
        return f"{data.get('id')}{' (as pool admin)' if data.get('as_admin') else ''}"
    if op == "expire":
        return ",".join(str(i) for i in data.get("ids", []))
    if op == "slices":
        hosts = data.get("hosts", [])
        names = ",".join(hosts[:3]) + (f",+{len(hosts) - 3}" if len(hosts) > 3 else "")
        return f"{len(data.get('slices', []))} slices on {names}"
    if op == "repair" and data.get("acknowledged"):
        seqs = ",".join(str(p.get("seq")) for p in data["acknowledged"])
        return f"acknowledged history problem(s) at seq {seqs}"
    if op == "repair":
        return f"quarantined {data.get('quarantined')} line(s), gaps {data.get('gaps')}"
    if op in ("enqueue", "dequeue", "job"):
        rest = {k: v for k, v in data.items() if k != "id"}
        return f"{data.get('id')} {json.dumps(rest, sort_keys=True)}"
    return json.dumps(data, sort_keys=True)


@ledger_app.command("show")
def show(
    ctx: typer.Context,
    since: Annotated[
        str | None,
        typer.Option(
            "--since", help="From this seq (120), this long ago (2h) or this time (ISO-8601)."
        ),
    ] = None,
    everything: Annotated[
        bool, typer.Option("--all", help="Include the archives of earlier compactions.")
    ] = False,
    op: Annotated[
        list[str] | None, typer.Option("--op", help="Only these operations (repeatable).")
    ] = None,
) -> None:
    """History, oldest first: one row per record (-o json gives the records themselves).

    Without --all or --since, only the records since the last compaction.
    """
    from gpupoolctl.ledger import OPS
    from gpupoolctl.ledger.units import parse_since

    settings: Settings = ctx.obj
    unknown = [name for name in op or [] if name not in OPS]
    if unknown:
        raise UsageError(f"unknown --op {unknown[0]!r}: use {', '.join(OPS)}")
    since_seq, since_ts = parse_since(since)
    ledger = open_ledger(settings)
    found = ledger.history(
        since_seq=since_seq, since_ts=since_ts, ops=set(op) if op else None, everything=everything
    )
    _warn_all(found.warnings)
    records = [{k: v for k, v in r.items() if k != "crc"} for r in found.records]
    rows = [
        {**r, "detail": _detail(r), "data": json.dumps(r["data"], sort_keys=True)} for r in records
    ]
    emit(settings, data=records, rows=rows, columns=SHOW_COLUMNS, csv_columns=SHOW_CSV_COLUMNS)
    if found.archived and not everything:
        notice(
            f"{found.archived} earlier record(s) are archived (--all or --since to include them)",
            quiet=settings.quiet,
        )


@ledger_app.command("verify")
def verify(
    ctx: typer.Context,
    everything: Annotated[
        bool, typer.Option("--all", help="Also check every archive (reads all history).")
    ] = False,
) -> None:
    """Check checksums, sequence and invariants: no slice held twice (by two allocations,
    or by a job and another allocation), no hold on a slice that no longer exists. Exit 0
    when all hold, 4 when not, 1 when a ledger given with --ledger does not exist."""
    settings: Settings = ctx.obj
    report = open_ledger(settings).verify(deep=everything)
    data = report.to_dict()
    rows = [p.to_dict() for p in report.problems]
    columns = (Column("kind", "PROBLEM"), Column("where", "WHERE"), Column("message", "DETAIL"))
    if not report.exists and settings.resolved_output() is OutputFormat.table:
        print(f"ok: no ledger yet at {report.path} (nothing has been allocated)")
    elif report.ok and settings.resolved_output() is OutputFormat.table:
        print(
            f"ok: {report.path}: seq {report.seq}, {report.journal_records} record(s) since the "
            f"last compaction, {report.archives} archive(s), {report.slices} slice(s), "
            f"{report.allocations} allocation(s)"
        )
    else:
        emit(settings, data=data, rows=rows, columns=columns)
    if not report.ok:
        raise typer.Exit(int(ExitCode.CHECK_FAILED))


@ledger_app.command("compact")
def compact(ctx: typer.Context) -> None:
    """Fold the journal into a snapshot and archive its records (gzip): history is kept,
    and reading the ledger stays fast however long it has been used."""
    settings: Settings = ctx.obj
    done = open_ledger(settings).compact()
    _warn_all(done.warnings)
    result = done.value
    if settings.resolved_output() is OutputFormat.table:
        if result["compacted"]:
            print(
                f"compacted {result['records']} record(s) up to seq {result['seq']}; "
                f"archived to {result['archive']}"
            )
        else:
            print("nothing to compact")
        return
    emit(settings, data=result, rows=[result], columns=[Column(k, k) for k in result])


@ledger_app.command("repair")
def repair(ctx: typer.Context) -> None:
    """Move damaged lines to the quarantine file (LEDGER.quarantine) and keep every good
    record; rebuild a damaged snapshot from the archives. Writes work again afterwards.

    History problems that `ledger verify` reports (a release of an allocation that was not
    held, say, written by an older version) are recorded as known in a `repair` record, so
    verify is clean again; the records themselves stay. Two live holders of one slice are
    not history: cancel or release one of them.

    A damaged line that was a live hold (an `alloc` no later record ended) is named: its
    slices stay out of placement until a pool admin releases it (`release ID`)."""
    settings: Settings = ctx.obj
    result = open_ledger(settings).repair().value
    data = result.to_dict()
    for hold in result.holds:  # on stderr whatever the format: it needs a person
        warn(
            f"quarantined {hold['id']} ({hold['owner']}), a live hold of "
            f"{', '.join(hold['slices'])}: its slices stay out of placement until a pool "
            f"admin releases it (`gpupoolctl release {hold['id']}`)"
        )
    if settings.resolved_output() is OutputFormat.table:
        if not result.repaired:
            print("nothing to repair")
            return
        parts = []
        if result.quarantined or result.gaps:
            parts += [f"kept {result.kept} record(s)", f"quarantined {result.quarantined} line(s)"]
        if result.quarantine:
            parts.append(f"in {result.quarantine}")
        if result.holds:
            ids = ", ".join(hold["id"] for hold in result.holds)
            parts.append(f"kept the slices of quarantined hold(s) {ids} out of placement")
        if result.snapshot_rebuilt:
            parts.append("rebuilt the snapshot from the archives")
        if result.gaps:
            parts.append(f"declared lost seqs {result.gaps}")
        if result.acknowledged:
            seqs = ", ".join(str(p["seq"]) for p in result.acknowledged)
            parts.append(
                f"recorded {len(result.acknowledged)} history problem(s) as known (seq {seqs})"
            )
        print("repaired: " + ", ".join(parts))
        return
    emit(settings, data=data, rows=[data], columns=[Column(k, k) for k in data])
