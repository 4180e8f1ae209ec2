"""End to end: a ledger whose lock is held elsewhere fails commands in bounded time."""

from __future__ import annotations

import time
from pathlib import Path

from gpupoolctl.ledger import Ledger, LedgerPaths
from tests.lockholder import HOLDER_NAME, holding

FAST = {"GPUPOOL_LEDGER_NO_FSYNC": "1"}


def _ledger(tmp_path: Path) -> Path:
    path = tmp_path / "pool.jsonl"
    Ledger(path, durable=False).refresh_slices(
        ["n1"],
        [{"id": "n1/gpu0", "host": "n1", "kind": "gpu", "profile": None, "memory_mib": 40960}],
    )
    return path


def test_reader_and_writer_give_up_with_one_line_and_exit_1(cli, tmp_path):
    path = _ledger(tmp_path)
    env = {**FAST, "GPUPOOL_LEDGER_LOCK_TIMEOUT": "0.3"}
    with holding(LedgerPaths(path).lock) as holder:
        for args in (("ledger", "show"), ("alloc", "--owner", "alice")):
            start = time.monotonic()
            run = cli("--ledger", str(path), *args, extra_env=env)
            elapsed = time.monotonic() - start
            assert run.code == 1, run.stderr
            assert run.stdout == ""
            assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
            assert run.stderr.startswith(f"gpupoolctl: error: ledger lock {path}.lock is busy")
            assert f"pid {holder.pid} ({HOLDER_NAME})" in run.stderr
            assert "GPUPOOL_LEDGER_LOCK_TIMEOUT" in run.stderr
            assert elapsed >= 0.3
    # Nothing was written while the lock was held, and the ledger works again after it.
    assert cli("--ledger", str(path), "alloc", "--owner", "alice", extra_env=FAST).code == 0


def test_bad_timeout_value_is_a_usage_error(cli, tmp_path):
    path = _ledger(tmp_path)
    env = {**FAST, "GPUPOOL_LEDGER_LOCK_TIMEOUT": "-1"}
    run = cli("--ledger", str(path), "ledger", "show", extra_env=env)
    assert run.code == 2
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert "GPUPOOL_LEDGER_LOCK_TIMEOUT='-1': expected seconds" in run.stderr


def test_a_command_waiting_long_for_the_lock_says_who_holds_it(cli, tmp_path):
    path = _ledger(tmp_path)
    with holding(LedgerPaths(path).lock, seconds=3) as holder:
        run = cli("--ledger", str(path), "alloc", "--owner", "alice", extra_env=FAST)
    assert run.code == 0, run.stderr
    said = f"gpupoolctl: waiting for the ledger lock {path}.lock held by pid {holder.pid}"
    assert said in run.stderr
    # -q keeps it quiet; the command still waits and succeeds.
    with holding(LedgerPaths(path).lock, seconds=3):
        quiet = cli("-q", "--ledger", str(path), "release", "a-2", extra_env=FAST)
    assert quiet.code == 0, quiet.stderr
    assert "waiting" not in quiet.stderr
