"""On a simulated node a launched job is a real process and a process on its simulated GPU."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_agent_jobs import Agent

PY = sys.executable
SLEEP = [PY, "-c", "import time; time.sleep(30)"]


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    return Agent(tmp_path)


def sim(tmp_path: Path, template: str) -> dict[str, Any]:
    return {"template": template, "state_dir": str(tmp_path / "sim")}


def busy(gpu: dict[str, Any]) -> list[int]:
    pids = [p["pid"] for p in gpu.get("processes") or []]
    for gi in (gpu.get("mig") or {}).get("instances") or []:
        pids += [p["pid"] for p in gi.get("processes") or []]
    return pids


def partition(agent: Agent, spec: dict[str, Any], gpu: dict[str, Any], ops: list[dict]) -> dict:
    args = {"gpus": [{"index": gpu["index"], "uuid": gpu["uuid"], "vendor": "nvidia", "ops": ops}]}
    return agent.ok("partition", args, spec)["gpus"][0]


def test_nvidia_job_shows_on_its_gpu_and_mig_instance_and_blocks_partitioning(
    agent: Agent, tmp_path: Path
) -> None:
    spec = sim(tmp_path, "a100-pcie-4")
    gpus = agent.ok("facts", {}, spec)["gpus"]
    whole, mig = gpus[0], gpus[3]
    instance = mig["mig"]["instances"][0]
    ci_uuid = instance["compute_instances"][0]["uuid"]
    on_gpu = agent.ok(
        "launch",
        {"job_id": "j-1", "argv": SLEEP, "devices": {"vendor": "nvidia", "uuids": [whole["uuid"]]}},
        spec,
    )
    on_mig = agent.ok(
        "launch",
        {"job_id": "j-2", "argv": SLEEP, "devices": {"vendor": "nvidia", "uuids": [ci_uuid]}},
        spec,
    )
    assert on_mig["visible"] == {"CUDA_VISIBLE_DEVICES": ci_uuid}
    gpus = agent.ok("facts", {}, spec)["gpus"]
    assert on_gpu["pid"] in busy(gpus[0]) and on_mig["pid"] in busy(gpus[3])
    assert not busy(gpus[1])
    refused = partition(agent, spec, gpus[0], [{"op": "set_mig_mode", "enabled": True}])
    assert (
        not refused["ok"] and "busy" in refused["error"] and str(on_gpu["pid"]) in refused["error"]
    )
    destroy = [{"op": "destroy_ci", "gi": instance["gi_id"], "ci": 0}]
    refused = partition(agent, spec, gpus[3], destroy)
    assert not refused["ok"] and "busy" in refused["error"]
    for job in ("j-1", "j-2"):
        assert agent.ok("signal", {"job_id": job, "signal": "KILL", "wait_s": 5}, spec)[
            "state"
        ] == ("exited")
    gpus = agent.ok("facts", {}, spec)["gpus"]
    assert not busy(gpus[0]) and not busy(gpus[3])  # ended jobs are no longer GPU processes
    assert partition(agent, spec, gpus[0], [{"op": "set_mig_mode", "enabled": True}])["ok"]


def test_amd_job_gets_its_logical_gpu_and_shows_as_its_process(
    agent: Agent, tmp_path: Path
) -> None:
    spec = sim(tmp_path, "mi300x-8")
    gpus = agent.ok("facts", {}, spec)["gpus"]
    code = "import os; print(os.environ['ROCR_VISIBLE_DEVICES'], os.environ['HIP_VISIBLE_DEVICES'])"
    launched = agent.ok(
        "launch",
        {
            "job_id": "j-3",
            "argv": [PY, "-c", code + "; import time; time.sleep(30)"],
            "devices": {"vendor": "amd", "uuids": [gpus[5]["uuid"], gpus[2]["uuid"]]},
        },
        spec,
    )
    assert launched["visible"] == {"ROCR_VISIBLE_DEVICES": "5,2", "HIP_VISIBLE_DEVICES": "0,1"}
    gpus = agent.ok("facts", {}, spec)["gpus"]
    assert launched["pid"] in busy(gpus[5]) and launched["pid"] in busy(gpus[2])
    assert not busy(gpus[0])
    agent.ok("signal", {"job_id": "j-3", "signal": "KILL", "wait_s": 5}, spec)
    assert not busy(agent.ok("facts", {}, spec)["gpus"][5])
    unknown = agent.ask(
        "launch",
        {"job_id": "j-4", "argv": ["true"], "devices": {"vendor": "amd", "uuids": ["nope"]}},
        spec,
    )
    assert unknown["error"]["type"] == "NoSuchDevice"


def test_a_device_the_node_no_longer_has_is_refused_before_anything_starts(
    agent: Agent, tmp_path: Path
) -> None:
    """A MIG instance re-cut behind the ledger: the launch that names it is NoSuchDevice
    (the workstation requeues the job), and no job folder is claimed; the instances that
    exist, and whole cards, still launch."""
    spec = sim(tmp_path, "a100-pcie-4")
    gpus = agent.ok("facts", {}, spec)["gpus"]
    mig = gpus[3]
    instance = mig["mig"]["instances"][0]
    gone = instance["compute_instances"][0]["uuid"]
    kept = mig["mig"]["instances"][1]["compute_instances"][0]["uuid"]
    ops = [
        {"op": "destroy_ci", "gi": instance["gi_id"], "ci": 0},
        {"op": "destroy_gi", "gi": instance["gi_id"]},
    ]
    assert partition(agent, spec, mig, ops)["ok"]
    for uuids in ([gone], [kept, gone], ["GPU-00000000-0000-0000-0000-000000000000"]):
        refused = agent.ask(
            "launch",
            {"job_id": "j-9", "argv": SLEEP, "devices": {"vendor": "nvidia", "uuids": uuids}},
            spec,
        )
        assert refused["error"]["type"] == "NoSuchDevice", refused
        assert uuids[-1] in refused["error"]["message"] and kept not in refused["error"]["message"]
    assert not (tmp_path / "sim" / "jobs" / "node1" / "j-9").exists()
    for job_id, uuid in (("j-10", kept), ("j-11", gpus[0]["uuid"])):
        launched = agent.ok(
            "launch",
            {"job_id": job_id, "argv": SLEEP, "devices": {"vendor": "nvidia", "uuids": [uuid]}},
            spec,
        )
        assert launched["visible"] == {"CUDA_VISIBLE_DEVICES": uuid}
        agent.ok("signal", {"job_id": job_id, "signal": "KILL", "wait_s": 5}, spec)


def test_simulated_nodes_keep_their_jobs_apart(agent: Agent, tmp_path: Path) -> None:
    spec = sim(tmp_path, "l40s-4")
    agent.ok("launch", {"job_id": "j-5", "argv": [PY, "-c", "pass"]}, spec)
    assert (tmp_path / "sim" / "jobs" / "node1" / "j-5").is_dir()
    assert not agent.root.exists()  # not in the machine's own job folder
