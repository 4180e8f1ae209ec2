"""SlurmClient's own logic (finding commands, errors, the squeue --json fallback), with
stand-in scripts on PATH. What real Slurm does is in tests/integration/test_slurm_backend.py."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gpupoolctl.errors import ExitCode, UsageError
from gpupoolctl.slurm.client import SlurmCapacityError, SlurmClient, SlurmError
from gpupoolctl.slurm.parse import SlurmParseError


def _fake(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _client(folder: Path, timeout_s: float = 10.0) -> SlurmClient:
    env = {"PATH": f"{folder}:/usr/bin:/bin", "CALLS": str(folder / "calls")}
    return SlurmClient(env=env, timeout_s=timeout_s, search=())  # the stand-ins come first


def test_missing_command_names_the_package(tmp_path: Path) -> None:
    client = SlurmClient(env={"PATH": str(tmp_path)}, search=())
    with pytest.raises(UsageError, match="slurm-client"):
        client.command("sbatch")


def test_failure_carries_slurms_last_line(tmp_path: Path) -> None:
    _fake(
        tmp_path,
        "sbatch",
        'cat >/dev/null; echo "sbatch: error: Batch job submission failed: Invalid account" >&2\n'
        "exit 1\n",
    )
    with pytest.raises(SlurmError) as caught:
        _client(tmp_path).sbatch(["--gres=gpu:1"], "#!/bin/sh\ntrue\n")
    assert str(caught.value) == (
        "sbatch failed (exit 1): sbatch: error: Batch job submission failed: Invalid account"
    )
    assert caught.value.exit_code == ExitCode.ERROR


def test_impossible_request_is_exit_5(tmp_path: Path) -> None:
    _fake(
        tmp_path,
        "sbatch",
        "cat >/dev/null; echo 'sbatch: error: Batch job submission failed: Requested node "
        "configuration is not available' >&2; exit 1\n",
    )
    with pytest.raises(SlurmCapacityError) as caught:
        _client(tmp_path).sbatch([], "true\n")
    assert caught.value.exit_code == ExitCode.NO_CAPACITY


def test_script_goes_on_stdin(tmp_path: Path) -> None:
    _fake(tmp_path, "sbatch", 'cat > "$CALLS"; echo "42;cluster"\n')
    assert _client(tmp_path).sbatch(["--parsable"], "#!/bin/sh\nexec true\n") == "42"
    assert (tmp_path / "calls").read_text() == "#!/bin/sh\nexec true\n"


def test_a_hung_command_is_bounded(tmp_path: Path) -> None:
    _fake(tmp_path, "squeue", "exec sleep 30\n")
    with pytest.raises(SlurmError, match=r"did not answer within 0\.5s"):
        _client(tmp_path, timeout_s=0.5).queue()


def test_squeue_falls_back_to_the_format_once(tmp_path: Path) -> None:
    _fake(
        tmp_path,
        "squeue",
        'echo "$*" >> "$CALLS"\n'
        'case "$*" in *--json*) echo "squeue: unrecognized option --json" >&2; exit 1;; esac\n'
        "echo '7|RUNNING|n1|gres:gpu:t:1|N/A|N/A|N/A|None|alice|train'\n",
    )
    client = _client(tmp_path)
    for _ in range(2):
        (job,) = client.queue()
        assert (job.job_id, job.state, job.name) == ("7", "RUNNING", "train")
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [("--json" in c) for c in calls] == [True, False, False]


@pytest.mark.parametrize(
    "complaint",
    ["squeue: unrecognized option '--json'", "squeue: fatal: JSON plugin load failure"],
)
def test_squeue_without_json_support_uses_the_format(tmp_path: Path, complaint: str) -> None:
    _fake(
        tmp_path,
        "squeue",
        'echo "$*" >> "$CALLS"\n'
        f'case "$*" in *--json*) echo "{complaint}" >&2; exit 1;; esac\n'
        "echo '3_[1-3]|PENDING||N/A|N/A|N/A|N/A|JobHeldUser|alice|arr'\n",
    )
    client = _client(tmp_path)
    assert [j.job_id for j in client.queue()] == ["3_[1-3]"]
    assert [j.job_id for j in client.queue()] == ["3_[1-3]"]
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [("--json" in c) for c in calls] == [True, False, False]


def test_one_failed_json_call_does_not_switch_json_off(tmp_path: Path) -> None:
    """A slurmctld time-out is that call's error; the next poll asks for JSON again."""
    _fake(
        tmp_path,
        "squeue",
        'echo "$*" >> "$CALLS"\n'
        'if [ ! -e "$CALLS.failed" ]; then touch "$CALLS.failed"\n'
        '  echo "squeue: error: slurm_load_jobs error: Socket timed out on send/recv '
        'operation" >&2; exit 1; fi\n'
        """echo '{"jobs": [{"job_id": 7, "job_state": "RUNNING", "user_name": "alice"}]}'\n""",
    )
    client = _client(tmp_path)
    with pytest.raises(SlurmError, match="Socket timed out on send/recv operation"):
        client.queue()
    for _ in range(2):
        assert [(j.job_id, j.state) for j in client.queue()] == [("7", "RUNNING")]
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == ["--json"] * 3


def test_unreadable_json_is_an_error_not_a_switch(tmp_path: Path) -> None:
    _fake(tmp_path, "squeue", 'echo "$*" >> "$CALLS"\necho "{truncated"\n')
    client = _client(tmp_path)
    with pytest.raises(SlurmParseError):
        client.queue()
    with pytest.raises(SlurmParseError):
        client.queue()
    assert (tmp_path / "calls").read_text().splitlines() == ["--json"] * 2


def test_undecodable_job_names_are_replaced(tmp_path: Path) -> None:
    """Slurm prints a job name as the submitter's raw bytes (here Latin-1 'café')."""
    _fake(
        tmp_path,
        "squeue",
        """printf '{"jobs": [{"job_id": 8, "job_state": "RUNNING", "name": "caf\\351"}]}\\n'\n""",
    )
    (job,) = _client(tmp_path).queue()
    assert (job.job_id, job.name) == ("8", "caf\ufffd")


def test_json_users_are_filtered_here(tmp_path: Path) -> None:
    _fake(
        tmp_path,
        "squeue",
        """echo '{"jobs": [{"job_id": 1, "job_state": "RUNNING", "user_name": "alice"},
        {"job_id": 2, "job_state": "PENDING", "user_name": "bob"}]}'\n""",
    )
    assert [j.job_id for j in _client(tmp_path).queue(user="bob")] == ["2"]


def test_unknown_job_is_none_without_accounting(tmp_path: Path) -> None:
    _fake(
        tmp_path,
        "scontrol",
        'case "$*" in\n'
        "  'show config') echo 'AccountingStorageType   = accounting_storage/none';;\n"
        "  *) echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1;;\n"
        "esac\n",
    )
    client = _client(tmp_path)
    assert client.accounting() is False
    assert client.finished_job("99") is None
