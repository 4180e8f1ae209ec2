"""A multi-node job's rendezvous environment: ranks, counts, the address and port."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.jobs import Jobs, JobSpec, Nodes, submitting
from gpupoolctl.jobs.rendezvous import BASE_PORT, PORT_SPAN, node_env, rendezvous_port
from gpupoolctl.ledger import Ledger
from gpupoolctl.remote.results import HostResult
from gpupoolctl.remote.target import target_from_vars
from gpupoolctl.sched import JobRequest


@given(st.text(min_size=1, max_size=40))
def test_the_port_is_the_same_for_a_job_and_inside_its_span(job_id: str) -> None:
    port = rendezvous_port(job_id)
    assert port == rendezvous_port(job_id)
    assert BASE_PORT <= port < BASE_PORT + PORT_SPAN


def test_every_node_gets_its_rank_and_the_same_rendezvous() -> None:
    nodes = [{"host": "a", "slices": ["a/0", "a/1"]}, {"host": "b", "slices": ["b/0"]}]
    first, second = (node_env("j-7", nodes, i, "10.1.0.5") for i in range(2))
    assert (first["PET_NODE_RANK"], second["PET_NODE_RANK"]) == ("0", "1")
    assert first["GPUPOOL_NODE_RANK"] == "0" and second["GPUPOOL_NODE_RANK"] == "1"
    assert (first["PET_NPROC_PER_NODE"], second["PET_NPROC_PER_NODE"]) == ("2", "1")
    for env in (first, second):
        assert env["PET_NNODES"] == env["GPUPOOL_NNODES"] == "2"
        assert env["GPUPOOL_NODES"] == "a,b"
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "10.1.0.5"
        assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == str(rendezvous_port("j-7"))


def test_the_peer_address_prefers_the_fabric_address() -> None:
    fabric = target_from_vars(
        "n1", {"ansible_host": "203.0.113.4", "gpupool_rendezvous_addr": "10.9.0.1"}
    )
    assert fabric.peer_address() == "10.9.0.1"
    assert target_from_vars("n1", {"ansible_host": "203.0.113.4"}).peer_address() == "203.0.113.4"
    assert target_from_vars("n1", {}).peer_address() == "n1"
    assert target_from_vars("n1", {"transport": "local"}).peer_address() == "127.0.0.1"


class RecordingNode:
    def __init__(self) -> None:
        self.launched: dict[str, dict[str, Any]] = {}

    def __call__(self, requests: list[tuple[Any, dict[str, Any]]]) -> list[HostResult]:
        out = []
        for target, request in requests:
            assert request["verb"] == "launch", request
            self.launched[target.name] = request["args"]
            out.append(HostResult(target.name, "ok", data={"pid": 100 + len(self.launched)}))
        return out


def test_launch_gives_each_node_its_env_and_the_jobs_own_env_wins(tmp_path: Path) -> None:
    slices = [
        {
            "id": f"{h}/gpu{i}",
            "host": h,
            "gpu": i,
            "kind": "gpu",
            "memory_mib": 40960,
            "uuid": f"GPU-{h}{i}",
            "devices": [f"GPU-{h}{i}"],
            "vendor": "nvidia",
            "model": "A100",
        }
        for h in ("n1", "n2")
        for i in range(2)
    ]
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False)
    ledger.refresh_slices(["n1", "n2"], slices)
    node = RecordingNode()
    targets = [
        target_from_vars(
            "n1", {"ansible_host": "192.0.2.1", "gpupool_rendezvous_addr": "10.0.0.1"}
        ),
        target_from_vars("n2", {"ansible_host": "192.0.2.2"}),
    ]
    jobs = Jobs(ledger, Nodes(targets, node), owner="amy")
    spec = JobSpec(
        argv=["torchrun", "t.py"],
        request=JobRequest(gpus=4, profile="gpu"),
        env={"PET_MASTER_PORT": "4242"},
    )
    outcome = submitting.submit(jobs, spec)
    assert outcome.state == "running"
    n1, n2 = node.launched["n1"]["env"], node.launched["n2"]["env"]
    assert (n1["PET_NODE_RANK"], n2["PET_NODE_RANK"]) == ("0", "1")
    assert n1["PET_MASTER_ADDR"] == n2["PET_MASTER_ADDR"] == "10.0.0.1"
    assert n1["PET_MASTER_PORT"] == n2["PET_MASTER_PORT"] == "4242"  # --env wins
    assert n1["MASTER_PORT"] == str(rendezvous_port(str(outcome.job_id)))
    # The ledger keeps the job's own env only; the rest is derived at each launch.
    recorded = ledger.read().state.jobs[str(outcome.job_id)]
    assert recorded["env"] == {"PET_MASTER_PORT": "4242"}
