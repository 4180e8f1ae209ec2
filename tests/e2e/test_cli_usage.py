"""End to end: `usage` through the real CLI, after alloc / release on the bundled pool and a
compaction; the sums are checked against the times the ledger itself recorded."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpupoolctl.ledger import Ledger

FAST = {"GPUPOOL_LEDGER_NO_FSYNC": "1"}
PAST = datetime(2025, 1, 1, tzinfo=UTC)


def default_ledger(cli) -> Path:
    return cli.cwd / "home" / ".local" / "state" / "gpupoolctl" / "ledger.jsonl"


def hours(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds() / 3600


def test_usage_sums_holds_from_the_journal_and_its_archives(cli):
    assert cli("-q", "pool", extra_env=FAST).code == 0
    # A job-like hold with a team, written through the library at fixed times (the CLI's
    # `alloc` takes no team): two hours of a whole card.
    moments = iter([PAST, PAST, PAST + timedelta(hours=2), PAST + timedelta(hours=2)])
    ledger = Ledger(default_ledger(cli), durable=False, actor="t@h", clock=lambda: next(moments))
    whole = next(s for s in ledger.read().state.slices.values() if s["kind"] == "gpu")
    team = ledger.alloc(
        lambda _s, _n: [whole["id"]], owner="carol", request={"team": "ml", "job": "j-1"}
    )
    ledger.release(team.value.id)

    alice = cli("-q", "alloc", "--profile", "1g.10gb", "--owner", "alice", extra_env=FAST)
    bob = cli("-q", "alloc", "--mem", "40gb", "-g", "2", "--owner", "bob", extra_env=FAST)
    assert alice.code == 0 and bob.code == 0, alice.stderr + bob.stderr
    assert cli("-q", "release", bob.stdout.strip(), extra_env=FAST).code == 0
    assert cli("-q", "ledger", "compact", extra_env=FAST).code == 0  # all of it archived

    records = cli("-q", "ledger", "show", "--all", "-o", "json", extra_env=FAST).json()
    slices = {s["id"]: s for s in records[0]["data"]["slices"]}
    allocs = {r["data"]["owner"]: r for r in records if r["op"] == "alloc"}
    released = {r["data"]["id"]: r["ts"] for r in records if r["op"] == "release"}
    until = records[-1]["ts"]  # alice still holds hers: count it up to here
    b_hours = hours(allocs["bob"]["ts"], released[allocs["bob"]["data"]["id"]])
    a_hours = hours(allocs["alice"]["ts"], until)
    a_slice, b_slices = (
        [slices[s] for s in allocs[who]["data"]["slices"]] for who in ("alice", "bob")
    )
    want = {
        ("-", "alice"): (
            a_hours * a_slice[0]["memory_mib"] / a_slice[0]["gpu_memory_mib"],
            a_hours * a_slice[0]["memory_mib"] / 1024,
        ),
        ("-", "bob"): (
            b_hours * sum(s["memory_mib"] / s["gpu_memory_mib"] for s in b_slices),
            b_hours * sum(s["memory_mib"] for s in b_slices) / 1024,
        ),
        ("ml", "carol"): (2.0, 2 * whole["memory_mib"] / 1024),
    }

    run = cli("-q", "usage", "--until", until, "-o", "json", extra_env=FAST)
    assert run.code == 0, run.stderr
    assert run.stderr == ""  # nothing missing: the archives reach back to seq 1
    doc = run.json()
    assert doc["by"] == ["team", "user"] and doc["until"] == until
    got = {(r["team"], r["user"]): (r["gpu_hours"], r["gib_hours"]) for r in doc["rows"]}
    assert list(got) == sorted(want)
    for key, (gpu, gib) in want.items():
        assert got[key] == (pytest.approx(gpu, abs=2e-6), pytest.approx(gib, abs=2e-6))
    assert doc["total"]["holds"] == 3
    assert doc["total"]["gpu_hours"] == pytest.approx(sum(g for g, _ in want.values()), abs=1e-5)

    # csv: the same rows, no total
    run = cli("-q", "usage", "--until", until, "-o", "csv", extra_env=FAST)
    assert run.code == 0, run.stderr
    rows = list(csv.DictReader(io.StringIO(run.stdout)))
    assert list(rows[0]) == ["team", "user", "gpu_hours", "gib_hours", "slice_hours", "holds"]
    assert [(r["team"], r["user"]) for r in rows] == sorted(want)
    assert [float(r["gpu_hours"]) for r in rows] == [r["gpu_hours"] for r in doc["rows"]]

    # per host and job: carol's hold is job j-1, the ones by hand have none
    run = cli("-q", "usage", "--until", until, "--by", "job", "--by", "host", "-o", "json")
    assert run.code == 0, run.stderr
    jobs = {(r["job"], r["host"]) for r in run.json()["rows"]}
    assert ("j-1", whole["host"]) in jobs and {j for j, _ in jobs} == {"-", "j-1"}

    # the period: only carol's two hours lie before the CLI's holds
    run = cli(
        "-q", "usage", "--since", "2025-01-01T01:00:00Z", "--until", "2025-01-02T00:00:00Z",
        "-o", "json",
    )  # fmt: skip
    assert [(r["user"], r["gpu_hours"]) for r in run.json()["rows"]] == [("carol", 1.0)]

    table = cli("usage", "--until", until, extra_env=FAST)
    assert table.code == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == [
        "TEAM", "USER", "GPU-HOURS", "GiB-HOURS", "SLICE-HOURS", "HOLDS",
    ]  # fmt: skip
    assert table.stdout.splitlines()[-1].split()[0] == "TOTAL"


def test_usage_says_when_history_before_the_snapshot_is_gone(cli):
    assert cli("-q", "pool", extra_env=FAST).code == 0
    held = cli("-q", "alloc", "--profile", "1g.10gb", "--owner", "alice", extra_env=FAST)
    assert held.code == 0, held.stderr
    assert cli("-q", "ledger", "compact", extra_env=FAST).code == 0
    for archive in default_ledger(cli).with_name("ledger.jsonl.archive").glob("*.gz"):
        archive.unlink()
    run = cli("-q", "usage", "-o", "json", extra_env=FAST)
    assert run.code == 0, run.stderr
    assert "usage before seq 3 is not known" in run.stderr
    doc = run.json()
    assert doc["known_after_seq"] == 2
    assert [r["user"] for r in doc["rows"]] == ["alice"]  # still held: known from the snapshot


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--by", "site"], "bad --by 'site': use team, user, host, model, job"),
        (["--since", "lately"], "bad --since 'lately'"),
        (["--until", "soon"], "bad --until 'soon'"),
        (["--since", "2025-06-02", "--until", "2025-06-01"], "is after --until"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(cli, args, message):
    run = cli("usage", *args, extra_env=FAST)
    assert run.code == 2
    assert run.stderr.count("\n") == 1 and message in run.stderr, run.stderr


def test_prometheus_export_carries_the_usage_counters(cli):
    assert cli("-q", "pool", extra_env=FAST).code == 0
    assert cli("-q", "alloc", "--owner", "alice", extra_env=FAST).code == 0
    run = cli("-q", "export", "prometheus", extra_env=FAST)
    assert run.code == 0, run.stderr
    assert "# TYPE gpupoolctl_usage_gpu_hours_total counter" in run.stdout
    assert 'gpupoolctl_usage_gib_hours_total{team="-",user="alice"} ' in run.stdout
