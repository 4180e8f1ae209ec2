"""End to end: pool / alloc / release / ledger * through the real CLI on the bundled pool."""

from __future__ import annotations

import csv
import io
import json
import stat
from pathlib import Path

from gpupoolctl.jobs.alloc import alloc as hold
from gpupoolctl.ledger import Ledger, journal
from gpupoolctl.sched import JobRequest

FAST = {"GPUPOOL_LEDGER_NO_FSYNC": "1"}


def default_ledger(cli) -> Path:
    return cli.cwd / "home" / ".local" / "state" / "gpupoolctl" / "ledger.jsonl"


def test_pool_alloc_release_show_verify_compact(cli):
    run = cli("pool", "-o", "json")
    assert run.code == 0, run.stderr
    doc = run.json()
    assert len(doc["nodes"]) == 6
    assert sum(n["total"] for n in doc["nodes"]) == sum(n["free"] for n in doc["nodes"]) > 40
    kinds = {s["kind"] for n in doc["nodes"] for s in n["slices"]}
    assert kinds == {"gpu", "mig"}
    path = default_ledger(cli)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert cli("pool", "-q").code == 0
    assert len(path.read_text().splitlines()) == 1  # unchanged slices are not re-recorded

    run = cli("alloc", "--profile", "1g.10gb", "--owner", "alice", "--ttl", "8h")
    assert run.code == 0, run.stderr
    assert run.stdout == "a-2\n"
    assert "held by alice until" in run.stderr
    run = cli("alloc", "--mem", "40gb", "-g", "2", "-o", "json")
    assert run.code == 0, run.stderr
    assert [s.split("/")[-1] for s in run.json()["slices"]] == ["mig-3g.40gb@0", "mig-3g.40gb@4"]

    run = cli("alloc", "--profile", "7g.80gb")
    assert run.code == 5
    assert run.stderr.count("\n") == 1 and "nothing fits" in run.stderr

    rows = list(csv.DictReader(io.StringIO(cli("pool", "--no-refresh", "-o", "csv").stdout)))
    held = {r["slice"]: r for r in rows if r["state"] == "held"}
    assert held["sg-dgx02/gpu6/mig-1g.10gb@0"]["owner"] == "alice"
    assert len(held) == 3

    assert cli("release", "a-2").code == 0
    again = cli("release", "a-2")
    assert again.code == 1 and "already released" in again.stderr
    unknown = cli("release", "nope")
    assert unknown.code == 1 and "unknown allocation" in unknown.stderr

    records = cli("ledger", "show", "-o", "json").json()
    assert [r["op"] for r in records] == ["slices", "alloc", "alloc", "release"]
    assert all(r["actor"].count("@") == 1 and r["ts"].endswith("Z") for r in records)
    shown = cli("ledger", "show", "--op", "alloc", "-o", "csv").stdout.splitlines()
    assert shown[0] == "seq,ts,actor,op,batch,data" and len(shown) == 3
    assert cli("ledger", "show", "--since", "3", "-o", "json").json() == records[2:]
    verify = cli("ledger", "verify")
    assert verify.code == 0 and verify.stdout.startswith("ok: ")

    compact = cli("ledger", "compact")
    assert compact.code == 0 and "compacted 4 record(s)" in compact.stdout
    after = cli("ledger", "show")
    assert "4 earlier record(s) are archived" in after.stderr
    assert cli("ledger", "show", "--all", "-o", "json").json() == records
    assert cli("ledger", "verify", "--all", "-o", "json").json()["ok"] is True


def prepared(tmp_path: Path) -> Path:
    path = tmp_path / "pool.jsonl"
    led = Ledger(path, durable=False)
    led.refresh_slices(
        ["n1"],
        [
            {
                "id": f"n1/gpu{i}",
                "host": "n1",
                "kind": "gpu",
                "profile": None,
                "memory_mib": 40960,
                "uuid": f"U{i}",
            }
            for i in range(4)
        ],
    )
    hold(led, JobRequest(), owner="alice")
    hold(led, JobRequest(), owner="bob")
    return path


def test_damage_blocks_writes_until_repair(cli, tmp_path):
    path = prepared(tmp_path)
    env = {**FAST, "GPUPOOL_LEDGER": str(path)}
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b"alice", b"mallo")
    path.write_bytes(b"\n".join(lines))

    refused = cli("alloc", extra_env=env)
    assert refused.code == 1
    assert refused.stderr == (
        f"gpupoolctl: error: {path}:2: damaged record: checksum mismatch (damaged or edited); "
        "writes are refused until `gpupoolctl ledger repair`\n"
    )
    verify = cli("ledger", "verify", "-o", "json", extra_env=env)
    assert verify.code == 4
    assert [p["kind"] for p in verify.json()["problems"]] == ["damaged"]
    repaired = cli("ledger", "repair", extra_env=env)
    assert repaired.code == 0 and "quarantined 1 line(s)" in repaired.stdout
    assert cli("ledger", "verify", extra_env=env).code == 0
    assert cli("alloc", extra_env=env).code == 0
    quarantine = Path(str(path) + ".quarantine")
    assert "mallo" in quarantine.read_text()
    assert stat.S_IMODE(quarantine.stat().st_mode) == 0o600


def test_torn_tail_warning_reaches_stderr(cli, tmp_path):
    path = prepared(tmp_path)
    with open(path, "ab") as out:
        out.write(
            journal.encode(4, "2025-01-01T00:00:00.000Z", "x@y", "release", {"id": "a-2"})[:40]
        )
    verify = cli("--ledger", str(path), "ledger", "verify", "-o", "json")
    assert verify.code == 4 and verify.json()["problems"][0]["kind"] == "torn"
    run = cli("--ledger", str(path), "release", "a-2", extra_env=FAST)
    assert run.code == 0, run.stderr
    assert f"gpupoolctl: warning: {path}:4: unterminated last line (40 bytes" in run.stderr
    assert cli("--ledger", str(path), "ledger", "verify").code == 0


def test_hold_on_a_slice_that_is_gone_fails_verify(cli, tmp_path):
    path = prepared(tmp_path)
    Ledger(path, durable=False).refresh_slices(
        ["n1"],
        [
            {
                "id": "n1/gpu1",
                "host": "n1",
                "kind": "gpu",
                "profile": None,
                "memory_mib": 40960,
                "uuid": "U1",
            }
        ],
    )
    env = {"GPUPOOL_LEDGER": str(path)}
    verify = cli("ledger", "verify", extra_env=env)
    assert verify.code == 4
    assert "a-2" in verify.stdout and "no longer exists" in verify.stdout
    pool = cli("pool", "--no-refresh", extra_env=env)
    assert pool.code == 0 and "a-2 (alice) holds n1/gpu0, which no longer exists" in pool.stderr
    assert cli("release", "a-2", extra_env=env).code == 0
    assert cli("ledger", "verify", extra_env=env).code == 0


LAYOUTS = str(Path(__file__).resolve().parents[2] / "playbooks" / "layouts.yaml")


def test_pool_summary_counts_the_orphaned_holds_ledger_verify_reports(cli):
    """Two holds on MIG instances of sg-dgx01, then the node goes back to whole cards behind
    the ledger's back: `ledger verify` reports two orphans, and `pool --summary` shows them
    on the node (table, CSV, JSON), not a node that looks all free."""
    inference = cli("-q", "partition", "apply", "-f", LAYOUTS, "-c", "inference", "--yes")
    assert inference.code == 0, inference.stderr
    for _ in range(2):
        assert cli("-q", "alloc", "--profile", "1g.10gb", "--host", "sg-dgx01").code == 0
    assert cli("-q", "-l", "sg-dgx01", "sim", "reset", "--force").code == 0

    verify = cli("-q", "ledger", "verify", "-o", "json")
    assert verify.code == 4
    orphans = [p for p in verify.json()["problems"] if p["kind"] == "orphan"]
    assert sorted(p["where"] for p in orphans) == ["a-2", "a-3"]

    table = cli("-q", "pool", "--summary")
    assert table.code == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:5] == ["HOST", "SLICES", "FREE", "HELD", "ORPHANED"]
    cells = {row.split()[0]: row.split()[1:5] for row in rows}
    assert cells["sg-dgx01"] == ["8", "8", "0", "2"]  # whole again, all free, 2 orphaned
    assert all(c[3] == "0" for host, c in cells.items() if host != "sg-dgx01")
    doc = cli("-q", "pool", "--summary", "--no-refresh", "-o", "json").json()
    counted = {n["host"]: n["orphaned"] for n in doc["nodes"]}
    assert sum(counted.values()) == len(orphans) == len(doc["orphans"])
    rows = list(csv.DictReader(io.StringIO(
        cli("-q", "pool", "--summary", "--no-refresh", "-o", "csv").stdout)))  # fmt: skip
    assert {r["host"]: int(r["orphaned"]) for r in rows} == counted
    # A host filter keeps its own: another node shows none.
    other = cli("-q", "pool", "--summary", "--no-refresh", "--host", "sg-dgx02", "-o", "json")
    assert [(n["host"], n["orphaned"]) for n in other.json()["nodes"]] == [("sg-dgx02", 0)]


def test_ledger_option_beats_environment_and_bad_input_is_usage(cli, tmp_path):
    path = prepared(tmp_path)
    other = tmp_path / "other.jsonl"
    run = cli(
        "--ledger",
        str(path),
        "ledger",
        "show",
        "-o",
        "json",
        extra_env={"GPUPOOL_LEDGER": str(other)},
    )
    assert run.code == 0 and len(run.json()) == 3
    assert not other.exists()
    bad = cli("--ledger", str(path), "alloc", "--ttl", "soon")
    assert bad.code == 2 and "bad duration" in bad.stderr
    assert json.loads(cli("--ledger", str(path), "ledger", "repair", "-o", "json").stdout) == {
        "repaired": False,
        "quarantined": 0,
        "kept": 0,
        "torn_removed": False,
        "snapshot_rebuilt": False,
        "gaps": [],
        "quarantine": None,
        "acknowledged": [],
        "holds": [],
    }


def test_alloc_checks_its_request_like_submit(cli):
    run = cli("alloc", "--vendor", "nvdia", "--owner", "x")
    assert run.code == 2
    assert "unknown vendor 'nvdia'" in run.stderr
