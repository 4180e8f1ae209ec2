"""`gpupoolctl quota` through the real CLI on the bundled simulated pool with
playbooks/shares.yaml: the quotas in force at the ledger's time (GPUPOOL_NOW) or at --at,
the windows that apply then, each output format; and the one-line errors."""

from __future__ import annotations

import re
from pathlib import Path

SHARES = str(Path(__file__).resolve().parents[2] / "playbooks" / "shares.yaml")
GIB = 1024  # MiB
# Monday 7 December 2026, 10:00 in Singapore (UTC+8) and 06:00 in Dubai (UTC+4).
MONDAY = "2026-12-07T02:00:00Z"
# Sunday 6 December 2026, 04:00 in Singapore and 00:00 in Dubai.
SUNDAY_NIGHT = "2026-12-05T20:00:00Z"


def quota(cli, *args: str, at: str | None = None, now: str = MONDAY):
    """`quota` with global options `args`, at the ledger's time `now` (and --at `at`)."""
    when = ("--at", at) if at is not None else ()
    return cli("-q", "--pool-policy", SHARES, *args, "quota", *when, extra_env={"GPUPOOL_NOW": now})


def nominals(report: dict) -> dict[tuple[str, str, str], int | None]:
    return {(r["team"], r["scope"], r["resource"]): r["nominal"] for r in report["teams"]}


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_without_teams_quota_exits_1_with_one_line(cli) -> None:
    run = cli("quota")  # no policy file at all: the HOME is empty
    assert run.code == 1
    assert "no pool policy file" in one_line(run.stderr)
    assert run.stdout == ""
    run = cli("--pool-policy", SHARES.replace("shares.yaml", "pool.yaml"), "quota")
    assert run.code == 1
    assert "pool.yaml: has no teams: section" in one_line(run.stderr)


def test_json_follows_the_clock_and_at_gives_another_time(cli) -> None:
    run = quota(cli, "-o", "json")
    assert run.code == 0, run.stderr
    report = run.json()
    assert report["at"] == "2026-12-07T02:00:00.000Z"
    assert report["active_windows"] == ["singapore-day", "dubai-night"]
    assert {w["window"] for w in report["windows"] if w["active"]} == {
        "singapore-day",
        "dubai-night",
    }
    assert nominals(report) == {
        ("inference", "site singapore", "gpu-memory"): 1100 * GIB,
        ("inference", "site singapore", "1g.10gb"): 7,
        ("inference", "site dubai", "gpu-memory"): 350 * GIB,
        ("training", "site singapore", "gpu-memory"): 300 * GIB,
        ("training", "site dubai", "gpu-memory"): 1500 * GIB,
    }
    assert all(r["in_use"] == 0 and r["borrowed"] == 0 for r in report["teams"])

    run = quota(cli, "-o", "json", at=SUNDAY_NIGHT)
    assert run.code == 0, run.stderr
    report = run.json()
    assert report["at"] == "2026-12-05T20:00:00.000Z"
    assert report["active_windows"] == ["singapore-night", "dubai-night", "dubai-weekend"]
    assert {w["window"] for w in report["windows"] if w["active"]} == {
        "singapore-night",
        "dubai-night",
        "dubai-weekend",
    }
    assert nominals(report) == {
        ("inference", "site singapore", "gpu-memory"): 300 * GIB,
        ("inference", "site dubai", "gpu-memory"): 350 * GIB,
        ("training", "site singapore", "gpu-memory"): 1100 * GIB,
        ("training", "site singapore", "cards"): 14,
        ("training", "site dubai", "gpu-memory"): 1500 * GIB,
    }


def test_csv_and_table(cli) -> None:
    run = quota(cli, "-o", "csv")
    assert run.code == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "team,scope,resource,nominal,limit,in_use,borrowed,lendable"
    assert lines[1] == f"inference,site singapore,gpu-memory,{1100 * GIB},-,0,0,-"
    assert len(lines) == 1 + 5

    run = quota(cli)
    assert run.code == 0, run.stderr
    out = run.stdout
    assert (
        "Quotas at 2026-12-07T02:00:00.000Z (windows in force: singapore-day, dubai-night)" in out
    )
    row = next(line for line in out.splitlines() if line.startswith("inference"))
    assert re.split(r"\s{2,}", row.strip()) == [
        "inference", "site singapore", "gpu-memory", "1100 GiB", "-", "0 GiB", "0 GiB", "-",
    ]  # fmt: skip
    assert "Time windows" in out


def test_bad_times_exit_2_with_one_line(cli) -> None:
    run = quota(cli, at="next tuesday")
    assert run.code == 2
    assert "next tuesday" in one_line(run.stderr) and "ISO-8601" in run.stderr
    assert run.stdout == ""

    run = quota(cli, now="half past nine")
    assert run.code == 2
    line = one_line(run.stderr)
    assert "GPUPOOL_NOW" in line and "half past nine" in line and "ISO-8601" in line
    assert run.stdout == ""
