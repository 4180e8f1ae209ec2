"""The train workload through the real CLI on the bundled sim pool: a two-node submit whose
nodes meet and whose report reaches the ledger, and a short ramp whose levels carry the
jobs' own compute/comm split and work throughput."""

from __future__ import annotations

import json
from pathlib import Path


def _ledger_records(cli) -> list[dict]:
    path = Path(cli.tmp) / "home" / ".local" / "state" / "gpupoolctl" / "ledger.jsonl"
    records = []
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        for item in [entry.get("data")] if isinstance(entry.get("data"), dict) else []:
            records.append(item)
    return records


def test_a_two_node_train_job_meets_and_its_report_reaches_the_ledger(jobs_cli) -> None:
    run = jobs_cli(
        "-q",
        "submit",
        "--gpus",
        "10",
        "--profile",
        "gpu",
        "--model",
        "H100",
        "--wait",
        "--",
        "gpupoolctl-workload",
        "train",
        "--params",
        "1e8",
        "--steps",
        "4",
    )
    assert run.code == 0, run.stderr
    (job,) = jobs_cli("-q", "jobs", "--all", "-o", "json").json()
    assert job["state"] == "done" and job["host"] == "sg-dgx01,sg-dgx02"
    outputs = [
        json.loads(jobs_cli("-q", "logs", job["id"], "--host", h).stdout)
        for h in ("sg-dgx01", "sg-dgx02")
    ]
    assert [o["node_rank"] for o in outputs] == [0, 1]
    assert all(o["ranks"] == 10 and o["nnodes"] == 2 for o in outputs)
    reports = [r["report"] for r in _ledger_records(jobs_cli) if "report" in r]
    assert len(reports) == 1
    (report,) = reports
    assert report["samples"] == 4 * 4 * 10 and report["steps"] == 4
    assert report["bound_by"] == "nic" and report["comm_links"]["nic"] > 0
    assert set(report) == {"samples", "steps", "compute_s", "comm_s", "comm_links", "bound_by"}


SCENARIO = """\
name: train-short
model: closed
levels: 1,2
warmup: 0s
hold: 3s
drain: 20s
job-timeout: 30s
workload:
  kind: train
  params: 100000000
  steps: 5
requests:
  - gpus: 2
    profile: gpu
    model: H100
"""


def test_a_ramp_of_train_jobs_reports_compute_comm_and_work(jobs_cli) -> None:
    (Path(jobs_cli.cwd) / "train.yaml").write_text(SCENARIO)
    run = jobs_cli(
        "-l",
        "sg-dgx01",
        "stress",
        "ramp",
        "-s",
        "train.yaml",
        "--save",
        "run.json",
        "-o",
        "json",
        timeout=120,
    )
    assert run.code == 0, run.stderr
    saved = json.loads((Path(jobs_cli.cwd) / "run.json").read_text())
    assert [lv["level"] for lv in saved["levels"]] == [1, 2]
    for level in saved["levels"]:
        assert level["completed"] > 0
        assert level["phases"]["compute"] > 0 and level["phases"]["comm"] > 0
        assert level["phases"]["compute"] + level["phases"]["comm"] <= level["phases"]["run"]
        assert level["work_throughput"] > 0
        assert level["comm_links"]["nvlink"] > 0
        # two H100s of one DGX: the ring stays on NVLink, and every job says so
        assert set(level["bound_by"]) == {"nvlink"} and level["bound_by"]["nvlink"] >= 1
