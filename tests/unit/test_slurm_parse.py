"""Reading what Slurm's clients print: squeue --json (22.05 and 23.02+ shapes), squeue's
fixed format, scontrol show job -o, sacct, sbatch --parsable, exit statuses."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.slurm.parse import (
    SEPARATOR,
    SlurmParseError,
    decode_wait_status,
    gres_types,
    is_job_id,
    is_listed_job_id,
    parse_exit_pair,
    parse_sacct,
    parse_sbatch_parsable,
    parse_show_jobs,
    parse_squeue_format,
    parse_squeue_json,
)

# Trimmed from a real 22.05.8 `squeue --json` (the loopback cluster of tests/slurm.py).
JSON_2205 = {
    "meta": {"Slurm": {"version": {"major": 22, "minor": 5, "micro": 8}}},
    "jobs": [
        {
            "job_id": 2,
            "name": "sh",
            "job_state": "FAILED",
            "nodes": "node1",
            "tres_per_node": "gres:gpu:test:1",
            "user_name": "root",
            "submit_time": 1796043263,
            "start_time": 1796043265,
            "end_time": 1796043266,
            "exit_code": 768,
            "state_reason": "NonZeroExitCode",
        },
        {
            "job_id": 5,
            "name": "sleep",
            "job_state": "RUNNING",
            "nodes": "node1",
            "tres_per_node": "gres:gpu:test:1",
            "user_name": "alice",
            "submit_time": 1796043263,
            "start_time": 1796043265,
            "end_time": 1827579065,  # the time limit's end, not an end
            "exit_code": 0,
            "state_reason": "None",
        },
        {
            "job_id": 6,
            "name": "wrap",
            "job_state": "CANCELLED",
            "nodes": "node1",
            "tres_per_node": "",
            "user_name": "root",
            "submit_time": 1796043263,
            "start_time": 1796043265,
            "end_time": 1796043267,
            "exit_code": 15,
            "state_reason": "None",
        },
    ],
}


def test_squeue_json_2205_exit_codes_and_signals() -> None:
    failed, running, cancelled = parse_squeue_json(json.dumps(JSON_2205))
    assert (failed.state, failed.exit_code, failed.signal) == ("FAILED", 3, None)
    assert failed.finished and not failed.ok
    assert failed.describe_end() == "FAILED (NonZeroExitCode), exit code 3"
    assert failed.started == 1796043265.0 and failed.ended == 1796043266.0
    assert running.ended is None and running.exit_code is None and not running.finished
    assert (cancelled.exit_code, cancelled.signal, cancelled.shell_exit_code()) == (None, 15, 143)
    assert cancelled.gres is None


def test_squeue_json_2302_objects() -> None:
    entry = {
        "job_id": 7,
        "name": "x",
        "job_state": ["COMPLETED"],
        "submit_time": {"set": True, "infinite": False, "number": 100},
        "start_time": {"set": True, "infinite": False, "number": 101},
        "end_time": {"set": True, "infinite": False, "number": 103},
        "exit_code": {"status": ["SUCCESS"], "return_code": {"set": True, "number": 0}},
    }
    (job,) = parse_squeue_json(json.dumps({"jobs": [entry]}))
    assert job.ok and job.exit_code == 0 and job.signal is None
    assert (job.submitted, job.started, job.ended) == (100.0, 101.0, 103.0)


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"jobs": 3}', '{"jobs": [{"x": 1}]}'])
def test_squeue_json_garbage_is_a_parse_error(text: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_squeue_json(text)


def test_squeue_format_lines() -> None:
    text = (
        "12|RUNNING|node1|gres:gpu:test:2|2026-11-30T12:50:43|2026-11-30T12:50:46|"
        "2027-11-30T12:50:46|None|alice|a|b|c\n"
        "13|PENDING||N/A|2026-11-30T12:50:43|N/A|N/A|Resources|bob|wait\n"
    )
    running, pending = parse_squeue_format(text)
    assert running.name == "a|b|c"  # the name is last: it may hold the separator
    assert running.gres == "gres:gpu:test:2" and running.ended is None
    assert running.started == datetime(2026, 11, 30, 12, 50, 46).timestamp()
    assert pending.nodes is None and pending.started is None and pending.gres is None
    assert pending.reason == "Resources" and pending.user == "bob"


def test_squeue_format_keeps_pending_arrays_and_het_jobs() -> None:
    """squeue's %i lists a pending array as 3_[1-3] and a het job's parts as 123+0: one such
    line must not make the whole listing unreadable."""
    rest = "|PENDING||N/A|2026-11-30T12:50:43|N/A|N/A|JobHeldUser|alice|x\n"
    text = "".join(
        f"{job_id}{rest}" for job_id in ("3_[1-3]", "4_[2,5-9%2]", "123+0", "123+1", "7")
    )
    assert [j.job_id for j in parse_squeue_format(text)] == [
        "3_[1-3]", "4_[2,5-9%2]", "123+0", "123+1", "7",
    ]  # fmt: skip


@pytest.mark.parametrize("text", ["3_[1-3]", "123+0", "12", "12_3"])
def test_listed_ids_are_wider_than_job_ids_given(text: str) -> None:
    assert is_listed_job_id(text)
    assert is_job_id(text) == text.replace("_", "").isdigit()


@pytest.mark.parametrize("text", ["3_[", "3_[1-3];x", "+0", "12;x", "-1", "3_[1-3]+0"])
def test_listed_ids_are_still_ids(text: str) -> None:
    assert not is_listed_job_id(text)


def test_squeue_format_rejects_short_lines() -> None:
    with pytest.raises(SlurmParseError, match="line 1"):
        parse_squeue_format("12|RUNNING\n")


def test_scontrol_show_job() -> None:
    line = (
        "JobId=2 JobName=my job UserId=root(0) JobState=FAILED Reason=NonZeroExitCode "
        "ExitCode=3:0 SubmitTime=2026-11-30T12:50:43 StartTime=2026-11-30T12:50:46 "
        "EndTime=2026-11-30T12:50:47 NodeList=node1 TresPerNode=gres:gpu:h100_1g.10gb:1"
    )
    (job,) = parse_show_jobs(line + "\n")
    assert job.name == "my job" and job.user == "root"
    assert (job.state, job.exit_code, job.reason) == ("FAILED", 3, "NonZeroExitCode")
    assert job.gres == "gres:gpu:h100_1g.10gb:1"
    assert job.ended is not None and job.started is not None and job.ended - job.started == 1


def test_sacct_skips_steps_and_reads_cancelled_by() -> None:
    text = (
        "41|train|CANCELLED by 0|node1|2026-11-30T12:00:00|2026-11-30T12:00:01|"
        "2026-11-30T12:00:09|0:15\n"
        "41.batch|batch|CANCELLED|node1|2026-11-30T12:00:00|2026-11-30T12:00:01|"
        "2026-11-30T12:00:09|0:15\n"
    )
    (job,) = parse_sacct(text)
    assert (job.job_id, job.state, job.signal) == ("41", "CANCELLED", 15)


@pytest.mark.parametrize(
    ("text", "expected"), [("17\n", "17"), ("17;gpupooltest\n", "17"), ("x\n17\n", "17")]
)
def test_sbatch_parsable(text: str, expected: str) -> None:
    assert parse_sbatch_parsable(text) == expected


@pytest.mark.parametrize("text", ["", "Submitted batch job 17", "--user=x"])
def test_sbatch_parsable_refuses_non_ids(text: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_sbatch_parsable(text)


def test_gres_types_counts_typed_gpus_only() -> None:
    spec = "gpu:h100:6,gpu:h100_1g.10gb:7(S:0),gpu:2,shard:h100:4"
    assert gres_types(spec) == {"h100": 6, "h100_1g.10gb": 7}


# -- properties ---------------------------------------------------------------------------


@given(st.integers(0, 255))
def test_exit_codes_survive_the_wait_status(code: int) -> None:
    assert decode_wait_status(code << 8) == (code, None)


@given(st.integers(1, 127))
def test_signals_survive_the_wait_status(signal: int) -> None:
    assert decode_wait_status(signal) == (None, signal)


@given(st.integers(0, 255), st.integers(0, 64))
def test_exit_pairs(code: int, signal: int) -> None:
    exit_code, sig = parse_exit_pair(f"{code}:{signal}")
    assert (exit_code, sig) == ((None, signal) if signal else (code, None))


_USER = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_.-", max_size=20)


@given(
    st.integers(1, 10**9),
    st.sampled_from(["PENDING", "RUNNING", "COMPLETED", "FAILED"]),
    _USER,
    st.text(
        alphabet=st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)),
        min_size=1,
        max_size=30,
    ).filter(lambda s: s.strip() == s and s.splitlines() == [s]),
)
def test_squeue_format_round_trip(job_id: int, state: str, user: str, name: str) -> None:
    line = SEPARATOR.join(
        [str(job_id), state, "node1", "gres:gpu:t:1", "N/A", "N/A", "N/A", "None", user, name]
    )
    (job,) = parse_squeue_format(line + "\n")
    assert (job.job_id, job.state, job.name) == (str(job_id), state, name)
    assert job.user == (user or None)


@given(st.text(max_size=40))
def test_parsers_fail_only_with_parse_errors(text: str) -> None:
    for parser in (parse_squeue_format, parse_show_jobs, parse_sacct, parse_squeue_json):
        with contextlib.suppress(SlurmParseError):
            parser(text)


@given(st.text(max_size=20))
def test_job_ids_are_digits_or_array_tasks(text: str) -> None:
    if is_job_id(text):
        main, _, task = text.partition("_")
        assert main.isdigit() and main.isascii() and (task == "" or task.isdigit())
