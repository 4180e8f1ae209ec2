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
    assert unknown["error"]["type"] == "BadDevices"


def test_simulated_nodes_keep_their_jobs_apart(agent: Agent, tmp_path: Path) -> None:
    spec = sim(tmp_path, "l40s-4")
    agent.ok("launch", {"job_id": "j-5", "argv": [PY, "-c", "pass"]}, spec)
    assert (tmp_path / "sim" / "jobs" / "node1" / "j-5").is_dir()
    assert not agent.root.exists()  # not in the machine's own job folder
