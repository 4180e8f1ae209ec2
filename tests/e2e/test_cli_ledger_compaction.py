"""Compaction through the real CLI: a job that just ended is still known afterwards, and the
ledger compacts itself once its journal is long."""

from __future__ import annotations

import sys
from pathlib import Path

PY = sys.executable
FAST = {"GPUPOOL_LEDGER_NO_FSYNC": "1"}


def test_logs_and_jobs_all_still_know_a_job_after_compaction(cli) -> None:
    run = cli(
        "-q",
        "submit",
        "--mem",
        "10G",
        "--wait",
        "--",
        PY,
        "-c",
        "print('still here')",
        extra_env=FAST,
    )
    assert run.code == 0, run.stderr
    job_id = cli("-q", "jobs", "--all", "-o", "json", extra_env=FAST).json()[0]["id"]
    assert cli("-q", "ledger", "compact", extra_env=FAST).code == 0

    logs = cli("-q", "logs", job_id, extra_env=FAST)
    assert logs.code == 0, logs.stderr
    assert logs.stdout == "still here\n"
    (job,) = cli("-q", "jobs", "--all", "-o", "json", extra_env=FAST).json()
    assert job["id"] == job_id and job["state"] == "done" and job["exit_code"] == 0


def test_the_ledger_compacts_itself_past_the_threshold(cli) -> None:
    env = {**FAST, "GPUPOOL_LEDGER_AUTOCOMPACT": "3"}
    assert cli("-q", "pool", extra_env=env).code == 0
    for _ in range(3):
        alloc = cli("-q", "alloc", "--profile", "1g.10gb", extra_env=env)
        assert alloc.code == 0, alloc.stderr
    journal = Path(cli.cwd) / "home" / ".local" / "state" / "gpupoolctl" / "ledger.jsonl"
    assert len(list(journal.with_name("ledger.jsonl.archive").glob("*.jsonl.gz"))) == 1
    records = cli("-q", "ledger", "show", "--all", "-o", "json", extra_env=env).json()
    assert [r["op"] for r in records] == ["slices", "alloc", "alloc", "alloc"]
    assert cli("-q", "ledger", "verify", extra_env=env).code == 0


def test_a_bad_threshold_is_a_usage_error(cli) -> None:
    run = cli("pool", extra_env={**FAST, "GPUPOOL_LEDGER_AUTOCOMPACT": "lots"})
    assert run.code == 2
    assert run.stderr.strip().endswith(
        "GPUPOOL_LEDGER_AUTOCOMPACT='lots': expected a whole number of records (0 to never "
        "compact by itself)"
    )
    assert "Traceback" not in run.stderr
