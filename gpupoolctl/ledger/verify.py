"""`ledger verify`: checksums, sequence, batches, and the invariants of the state."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.hw.slice import within_capacity
from gpupoolctl.ledger import replay
from gpupoolctl.ledger.history import read_archive
from gpupoolctl.ledger.paths import LedgerPaths
from gpupoolctl.ledger.snapshot import archive_path
from gpupoolctl.ledger.state import JOB_HOLDING, State


@dataclass
class Problem:
    # damaged | gap | torn | snapshot | history | double-hold | job | orphan | archive |
    # reshape
    kind: str
    where: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "where": self.where, "message": self.message}


@dataclass
class Report:
    path: str
    seq: int = 0
    snapshot_seq: int = 0
    journal_records: int = 0
    archives: int = 0
    slices: int = 0
    allocations: int = 0
    problems: list[Problem] = field(default_factory=list)
    exists: bool = True  # False: the default ledger, not written yet

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "path": self.path,
            "exists": self.exists,
            "seq": self.seq,
            "snapshot_seq": self.snapshot_seq,
            "journal_records": self.journal_records,
            "archives": self.archives,
            "slices": self.slices,
            "allocations": self.allocations,
            "problems": [p.to_dict() for p in self.problems],
        }


def check(paths: LedgerPaths, loaded: replay.Loaded, torn_size: int, *, deep: bool) -> Report:
    where = str(paths.journal)
    state = loaded.state
    report = Report(
        path=where,
        seq=state.seq,
        snapshot_seq=loaded.snapshot_seq,
        journal_records=loaded.scan.records,
        archives=len(loaded.snap.archives) if loaded.snap else 0,
        slices=len(state.slices),
        allocations=len(state.allocations),
    )
    add = report.problems.append
    for bad in loaded.scan.bad:
        add(Problem("damaged", f"{where}:{bad.line}", bad.reason))
    damaged_seqs = [b.seq for b in loaded.scan.bad if b.seq is not None]
    for gap in loaded.undeclared_gaps():
        if any(gap.first <= seq <= gap.last for seq in damaged_seqs):
            continue  # the damaged line above is where those records went
        add(Problem("gap", f"{where}:{gap.line}", f"records {gap.first}..{gap.last} missing"))
    torn = loaded.scan.torn
    if torn is not None:
        cause = "" if torn.reason == replay.CRASH_TAIL else " left by an interrupted writer"
        add(
            Problem(
                "torn",
                f"{where}:{torn.line}",
                f"{torn.reason} ({torn_size} bytes){cause}; the next write removes it",
            )
        )
    for problem in state.problems:
        add(Problem("history", f"seq {problem['seq']}", problem["message"]))
    report.problems.extend(_over_capacity(state))
    for kind, place, message in state.job_conflicts():
        add(Problem(kind, place, message))
    for alloc, slice_id in state.orphans():
        add(
            Problem(
                "orphan",
                alloc.id,
                f"{alloc.id} ({alloc.owner}) holds {slice_id}, which no longer exists "
                "(partition changed?); release it",
            )
        )
    for record, message in _unsure_reservations(state):
        add(Problem("reshape", str(record["id"]), message))
    if deep and loaded.snap is not None:
        _check_archives(paths, loaded, report)
    return report


def _over_capacity(state: State) -> list[Problem]:
    """Slices held by more than their capacity allows (hw.slice), by slice id: counted are
    the allocations that name the slice, and a live job's own allocation where the job runs
    on it (a job whose allocation was closed, or never named the slice, still uses it)."""
    holders: dict[str, list[str]] = {}
    for alloc in state.allocations.values():
        for slice_id in alloc.slices:
            holders.setdefault(slice_id, []).append(alloc.id)
    users: dict[str, str] = {}  # allocation id -> the job that runs on it
    for job in state.jobs.values():
        alloc_id = job.get("alloc")
        if job.get("state") not in JOB_HOLDING or not alloc_id:
            continue
        users[str(alloc_id)] = str(job["id"])
        for node in job.get("nodes") or []:
            for slice_id in node.get("slices") or []:
                held = holders.setdefault(str(slice_id), [])
                if str(alloc_id) not in held:
                    held.append(str(alloc_id))
    found = []
    for slice_id, ids in sorted(holders.items()):
        if not within_capacity(state.slices.get(slice_id), len(ids)):
            named = ", ".join(f"{users[a]} ({a})" if a in users else a for a in ids)
            found.append(Problem("double-hold", slice_id, f"held by {named} at once"))
    return found


def _unsure_reservations(state: Any) -> list[tuple[dict[str, Any], str]]:
    """Cards reserved by a run that has ended without closing them (their layout is unsure
    until their node is read again), or for longer than ABANDONED_AFTER_S: neither takes
    work meanwhile."""
    if not state.reshapes:
        return []
    import time

    from gpupoolctl.ledger import reservations
    from gpupoolctl.ledger.units import parse_ts

    now = time.time()
    found = []
    for record in state.reshapes.values():
        maker = reservations.describe_maker(record)
        held = f"{record['id']} has held {record['gpu']} since {record['ts']} for {maker}"
        if reservations.made_here(record) and reservations.maker_gone(record, now):
            found.append(
                (
                    record,
                    f"{held}, which ended without closing it: the card's layout is unsure "
                    "until its node is read again (`gpupoolctl schedule`, or the next "
                    "`partition apply`, does it)",
                )
            )
        elif now - parse_ts(str(record["ts"])).timestamp() > reservations.ABANDONED_AFTER_S:
            found.append(
                (
                    record,
                    f"{held}, over {reservations.ABANDONED_AFTER_S / 3600:g} h: it may have "
                    "died on another workstation or in a process still running; once that is "
                    "over, `gpupoolctl schedule` closes it",
                )
            )
    return found


def _check_archives(paths: LedgerPaths, loaded: replay.Loaded, report: Report) -> None:
    assert loaded.snap is not None
    expected_first = None
    for entry in loaded.snap.archives:
        target = archive_path(paths, entry)
        if not target.exists():
            report.problems.append(Problem("archive", str(target), "archive file is missing"))
            continue
        digest = hashlib.sha256(target.read_bytes()).hexdigest()
        if digest != entry.get("sha256"):
            report.problems.append(Problem("archive", str(target), "sha256 mismatch"))
        warnings: list[str] = []
        scan = read_archive(paths, entry, lambda _r: False, [], warnings)
        for text in warnings:
            report.problems.append(Problem("archive", str(target), text))
        if scan is None:
            continue
        if scan.torn is not None:
            report.problems.append(Problem("archive", str(target), "ends in a torn line"))
        for gap in scan.undeclared_gaps():
            report.problems.append(
                Problem("gap", f"{target}:{gap.line}", f"records {gap.first}..{gap.last} missing")
            )
        if expected_first is not None and entry["first_seq"] != expected_first:
            report.problems.append(
                Problem(
                    "archive",
                    str(target),
                    f"starts at seq {entry['first_seq']}, expected {expected_first}",
                )
            )
        if scan.last_seq != entry["last_seq"]:
            report.problems.append(
                Problem(
                    "archive",
                    str(target),
                    f"ends at seq {scan.last_seq}, snapshot says {entry['last_seq']}",
                )
            )
        expected_first = entry["last_seq"] + 1
