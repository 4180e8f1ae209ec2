"""The command line's contract with scripts: exit codes, what reaches stderr, bad input.

Each test runs the real CLI (the `cli` fixture) the way a cron job or CI script would: no
terminal, -o json/csv, -q. See DESIGN.md (Conventions) for the exit codes.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

# One simulated host that answers and one that fails at once (an unknown sim template), so
# "some hosts failed" is exercised without waiting for a network time-out.
MIXED = """\
all:
  vars:
    transport: local
  hosts:
    good01:
      sim: l40s-4
    bad01:
      sim: no-such-template
"""


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("gpupoolctl: error:")]


@pytest.fixture
def mixed(cli) -> Path:
    path = cli.tmp / "mixed.yaml"
    path.write_text(MIXED)
    return path


# -- hosts that fail are named on stderr, whatever the format ---------------------------------


@pytest.mark.parametrize("args", [("-o", "json"), ("-o", "csv"), ("-q", "-o", "json")])
def test_inventory_names_each_unread_host_on_stderr_in_every_format(cli, mixed, args) -> None:
    run = cli("-i", str(mixed), "inventory", *args)
    assert run.code == 3, run.stderr
    warnings = [line for line in run.stderr.splitlines() if "warning: bad01: failed:" in line]
    assert len(warnings) == 1, run.stderr
    assert "no-such-template" in warnings[0]
    assert "good01" not in run.stderr  # the host read is not blamed
    if "csv" in args:  # the CSV has rows only for the host that was read
        rows = list(csv.DictReader(io.StringIO(run.stdout)))
        assert rows and {row["host"] for row in rows} == {"good01"}
    else:
        doc = run.json()
        assert doc["summary"]["failed"] == 1 and doc["summary"]["ok"] == 1


def test_sim_reset_names_each_host_it_could_not_reset(cli, mixed) -> None:
    run = cli("-i", str(mixed), "sim", "reset", "-o", "json")
    assert run.code == 3, run.stderr
    outcomes = {h["host"]: h["outcome"] for h in run.json()["hosts"]}
    assert outcomes == {"good01": "ok", "bad01": "failed"}
    assert "warning: bad01: failed:" in run.stderr and "(not reset)" in run.stderr
    assert "good01" not in run.stderr


# -- files the system refuses: one line, exit 1 -----------------------------------------------


def test_a_ledger_lock_that_cannot_be_opened_is_one_line_not_a_traceback(cli) -> None:
    ledger = cli.tmp / "pool.jsonl"
    (cli.tmp / "pool.jsonl.lock").mkdir()  # where the lock file must be
    run = cli("--ledger", str(ledger), "alloc", "--profile", "gpu")
    assert run.code == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert errors(run.stderr) == [f"gpupoolctl: error: {ledger}.lock: Is a directory"]
    assert run.stdout == ""


def test_os_error_message_names_the_file_and_every_reason_in_order() -> None:
    from gpupoolctl.cli.main import os_error_message

    path = "/srv/ledger.jsonl.lock"
    try:
        try:
            raise PermissionError(13, "Permission denied", path)
        except PermissionError:
            raise FileNotFoundError(2, "No such file or directory", path) from None
    except FileNotFoundError as exc:
        # `from None` hides the context from tracebacks, not from __context__.
        assert os_error_message(exc) == f"{path}: Permission denied, then No such file or directory"
    assert os_error_message(OSError(28, "No space left on device")) == "No space left on device"


# -- empty and out-of-range values are usage errors, not "not given" -------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("alloc", "--owner="), "--owner must not be empty"),
        (("alloc", "--mem="), "--mem must not be empty"),
        (("alloc", "--ttl="), "--ttl must not be empty"),
        (("submit", "--mem=", "--dry-run", "--", "true"), "--mem must not be empty"),
        (("submit", "--profile=", "--dry-run", "--", "true"), "--profile must not be empty"),
    ],
)
def test_empty_request_values_are_usage_errors(cli, args, message) -> None:
    run = cli(*args)
    assert run.code == 2, (run.code, run.stdout, run.stderr)
    found = errors(run.stderr)
    assert len(found) == 1 and found[0].startswith(f"gpupoolctl: error: {message}"), run.stderr
    assert run.stdout == ""


@pytest.mark.parametrize("option", ["--connect-timeout", "--command-timeout"])
def test_a_time_out_too_large_for_the_clock_is_a_usage_error(cli, option) -> None:
    run = cli(option, "1e308", "-l", "sg-dgx01", "inventory", "-o", "json")
    assert run.code == 2, run.stderr
    assert option in run.stderr and "86400" in run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""


def test_ledger_show_refuses_an_unknown_op(cli) -> None:
    run = cli("ledger", "show", "--op", "alloc", "--op", "aloc", "-o", "json")
    assert run.code == 2, run.stderr
    assert errors(run.stderr) == [
        "gpupoolctl: error: unknown --op 'aloc': use slices, alloc, release, expire, enqueue, "
        "dequeue, job, repair, reshape, drain, host, fence"
    ]
    assert run.stdout == ""


def test_logs_host_that_is_not_the_jobs_node_is_a_usage_error(cli) -> None:
    submitted = cli("-q", "submit", "--mem", "10G", "--wait", "-o", "json", "--", "true")
    assert submitted.code == 0, submitted.stderr
    job = submitted.json()
    run = cli("logs", job["id"], "--host", "no-such-node")
    assert run.code == 2, run.stderr
    assert errors(run.stderr) == [
        f"gpupoolctl: error: --host no-such-node: {job['id']} has no node there "
        f"(its nodes: {job['host']})"
    ]
    assert cli("-q", "logs", job["id"], "--host", job["host"]).code == 0


# -- formats a command does not write are refused ---------------------------------------------


def test_export_mig_parted_refuses_csv_rather_than_printing_yaml(cli) -> None:
    run = cli("export", "mig-parted", "-o", "csv")
    assert run.code == 2, run.stderr
    assert "-o csv does not apply (allowed: json, yaml)" in run.stderr
    assert run.stdout == ""
    as_json = cli("-q", "export", "mig-parted", "-o", "json")
    assert as_json.code == 0 and as_json.json()["version"] == "v1"


# -- files to write: refused before the work, not after ---------------------------------------


def test_prometheus_textfile_refuses_an_empty_folder_name(cli) -> None:
    run = cli("export", "prometheus", "--textfile", "")
    assert run.code == 2, run.stderr
    assert "--textfile" in run.stderr and "must not be empty" in run.stderr
    assert not (cli.cwd / "gpupoolctl.prom").exists()  # not written into the current folder


@pytest.mark.parametrize("option", ["--save", "--report"])
def test_stress_ramp_refuses_a_folder_to_write_before_it_ramps(cli, option) -> None:
    folder = cli.tmp / "results"
    folder.mkdir()
    run = cli(
        *("stress", "ramp", "--backend", "noop", "--levels", "1", "--hold", "0.2s"),
        *("--warmup", "0s", "--drain", "0s", option, str(folder)),
    )
    assert run.code == 2, run.stderr
    assert errors(run.stderr) == [
        f"gpupoolctl: error: {option} {folder}: is a folder; give the file to write"
    ]
    assert "level 1" not in run.stderr  # nothing was run


# -- a check that did not hold says which, even with -q ---------------------------------------


def test_stress_ramp_names_each_broken_threshold_on_stderr_with_q(cli) -> None:
    run = cli(
        *("-q", "stress", "ramp", "--backend", "noop", "--levels", "1", "--hold", "0.2s"),
        *("--warmup", "0s", "--drain", "0s", "-t", "throughput > 1e12/s", "-o", "json"),
    )
    assert run.code == 4, run.stderr
    result = json.loads(run.stdout)  # stdout is the document alone
    assert result["levels"][0]["thresholds"][0]["ok"] is False
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(
        "gpupoolctl: warning: level 1: threshold broken: throughput > 1e12/s ("
    ), run.stderr
