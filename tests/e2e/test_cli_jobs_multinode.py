"""A job across two nodes of the bundled pool: each node's process knows its rank and where
the others meet (what torchrun reads), through the real CLI."""

from __future__ import annotations

import json
import sys

PY = sys.executable
SHOW_ENV = (
    "import json, os; print(json.dumps({k: v for k, v in os.environ.items() "
    "if k.startswith(('GPUPOOL_', 'PET_', 'MASTER_'))}))"
)


def test_two_node_job_gets_ranks_and_one_rendezvous(cli) -> None:
    run = cli(
        "-q",
        "submit",
        "--gpus",
        "10",
        "--profile",
        "gpu",
        "--model",
        "H100",
        "--wait",
        "-e",
        "MASTER_PORT=31337",
        "--",
        PY,
        "-c",
        SHOW_ENV,
    )
    assert run.code == 0, run.stderr
    (job,) = cli("-q", "jobs", "--all", "-o", "json").json()
    hosts = job["host"].split(",")
    assert hosts == ["sg-dgx01", "sg-dgx02"]
    seen = {}
    for host in hosts:
        logs = cli("-q", "logs", job["id"], "--host", host)
        assert logs.code == 0, logs.stderr
        seen[host] = json.loads(logs.stdout)
    zero, one = seen["sg-dgx01"], seen["sg-dgx02"]
    assert (zero["PET_NODE_RANK"], one["PET_NODE_RANK"]) == ("0", "1")
    assert zero["PET_NNODES"] == one["PET_NNODES"] == "2"
    assert (zero["PET_NPROC_PER_NODE"], one["PET_NPROC_PER_NODE"]) == ("8", "2")
    assert zero["GPUPOOL_GPUS_PER_NODE"] == one["GPUPOOL_GPUS_PER_NODE"] == "8,2"
    # Local transport: the nodes are this machine, so they meet on loopback.
    assert zero["PET_MASTER_ADDR"] == one["PET_MASTER_ADDR"] == "127.0.0.1"
    assert zero["PET_MASTER_PORT"] == one["PET_MASTER_PORT"]
    assert zero["MASTER_PORT"] == one["MASTER_PORT"] == "31337"  # the job's --env wins


def test_wait_and_logs_say_which_node_they_show_and_where_a_failed_jobs_stderr_is(cli) -> None:
    code = "import sys; print('out'); print('bad', file=sys.stderr); sys.exit(2)"
    args = ("submit", "--gpus", "10", "--profile", "gpu", "--model", "H100", "--wait")
    run = cli(*args, "--", PY, "-c", code)
    assert run.code == 2, run.stderr
    assert "showing sg-dgx01's output (node 1 of 2)" in run.stderr
    assert "sg-dgx02" in run.stderr
    (job,) = cli("-q", "jobs", "--all", "-o", "json").json()
    logs = cli("logs", job["id"])
    assert logs.code == 0 and logs.stdout == "out\n"
    assert "this is sg-dgx01's stdout (node 1 of 2); --host sg-dgx02" in logs.stderr
    assert f"its stderr: gpupoolctl logs --stderr {job['id']}" in logs.stderr
    quiet = cli("-q", "logs", job["id"], "--host", "sg-dgx02", "--stderr")
    assert quiet.code == 0 and quiet.stdout == "bad\n" and quiet.stderr == ""
