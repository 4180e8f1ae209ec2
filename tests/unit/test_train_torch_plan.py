"""The PyTorch path of the `train` workload, without PyTorch: which ranks and devices a node
runs, and which link class bounds its all-reduce (the node's real driver, on the sim)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.agent import main as agent_main
from gpupoolctl.agent.workloads import EXIT_RENDEZVOUS, EXIT_UNSUPPORTED
from gpupoolctl.agent.workloads import train_torch as tt
from gpupoolctl.sim import deactivate


def _env(rank: int, counts: list[int], **more: str) -> dict[str, str]:
    return {
        "GPUPOOL_NODE_RANK": str(rank),
        "GPUPOOL_NNODES": str(len(counts)),
        "GPUPOOL_GPUS_ON_NODE": str(counts[rank]),
        "GPUPOOL_GPUS_PER_NODE": ",".join(map(str, counts)),
        **more,
    }


@given(st.lists(st.integers(1, 8), min_size=1, max_size=6))
def test_every_global_rank_is_run_by_exactly_one_node(counts: list[int]) -> None:
    ranks: list[int] = []
    for node in range(len(counts)):
        plan = tt.plan_node(_env(node, counts))
        assert plan.world == sum(counts)
        assert len(plan.devices) == counts[node]
        ranks.extend(range(plan.first_rank, plan.first_rank + len(plan.devices)))
    assert ranks == list(range(sum(counts)))  # node 0 holds rank 0, the rendezvous point


def test_each_worker_sees_only_its_own_gpu() -> None:
    uuids = ["GPU-a", "GPU-b", "GPU-c"]
    plan = tt.plan_node(_env(1, [8, 3], CUDA_VISIBLE_DEVICES=",".join(uuids)))
    assert plan.first_rank == 8 and plan.world == 11
    assert [v for v, _ in plan.devices] == [{"CUDA_VISIBLE_DEVICES": u} for u in uuids]
    assert {index for _, index in plan.devices} == {0}
    amd = tt.plan_node(_env(0, [2], ROCR_VISIBLE_DEVICES="5,7", HIP_VISIBLE_DEVICES="0,1"))
    assert [v for v, _ in amd.devices] == [
        {"ROCR_VISIBLE_DEVICES": "5", "HIP_VISIBLE_DEVICES": "0"},
        {"ROCR_VISIBLE_DEVICES": "7", "HIP_VISIBLE_DEVICES": "0"},
    ]
    # No visibility variables (the CPU, or a GPU run by hand): worker i takes device i.
    assert [i for _, i in tt.plan_node(_env(0, [3])).devices] == [0, 1, 2]


def test_without_every_nodes_count_every_node_is_taken_to_be_like_this_one() -> None:
    env = _env(2, [4, 4, 4])
    del env["GPUPOOL_GPUS_PER_NODE"]
    plan = tt.plan_node(env)
    assert (plan.first_rank, plan.world, len(plan.devices)) == (8, 12, 4)


@pytest.mark.parametrize(
    ("env", "code", "words"),
    [
        (_env(0, [2], CUDA_VISIBLE_DEVICES="GPU-a"), EXIT_UNSUPPORTED, "names 1"),
        ({**_env(0, [1, 1]), "GPUPOOL_GPUS_PER_NODE": "1"}, EXIT_RENDEZVOUS, "2 nodes"),
        ({**_env(0, [1]), "GPUPOOL_NODE_RANK": "x"}, EXIT_RENDEZVOUS, "not a count"),
        ({**_env(0, [1]), "GPUPOOL_NODE_RANK": "1"}, EXIT_RENDEZVOUS, "not one of"),
        (_env(0, [0]), EXIT_UNSUPPORTED, "expected 1 to"),
        (_env(0, [tt.MAX_WORKERS + 1]), EXIT_UNSUPPORTED, "expected 1 to"),
    ],
)
def test_a_node_that_cannot_run_its_share_is_refused_with_the_reason(
    env: dict[str, str], code: int, words: str
) -> None:
    with pytest.raises(tt.Refused) as refused:
        tt.plan_node(env)
    assert refused.value.code == code and words in str(refused.value)


def test_the_slowest_link_class_names_the_bound() -> None:
    assert tt.link_class(["NV18", "NV4"]) == "nvlink"
    assert tt.link_class(["XGMI"]) == "xgmi"
    assert tt.link_class(["NV18", "SYS"]) == "pcie"
    assert tt.link_class(["PIX", "NODE"]) == "pcie"
    assert tt.link_class([]) is None


@pytest.fixture
def sim_node(tmp_path: Path) -> Iterator[Any]:
    def facts(template: str) -> list[dict[str, Any]]:
        folder = tmp_path / template
        folder.mkdir()
        request = {"template": template, "state_dir": str(folder)}
        answer = agent_main.handle({"v": 1, "verb": "facts", "host": "h", "sim": request})
        assert answer["ok"], answer
        return list(answer["data"]["gpus"])

    yield facts
    deactivate()


@pytest.mark.parametrize(
    ("template", "want"),
    [("dgx-h100", "nvlink"), ("a100-pcie-4", "pcie"), ("l40s-4", "pcie"), ("mi300x-8", "xgmi")],
)
def test_the_link_inside_a_node_comes_from_its_driver(sim_node: Any, template: str, want: str):
    gpus = sim_node(template)
    if gpus[0]["vendor"] == "nvidia":
        env = {"CUDA_VISIBLE_DEVICES": ",".join(g["uuid"] for g in gpus[:3])}
    else:
        env = {"ROCR_VISIBLE_DEVICES": "0,1,2"}
    assert tt.intra_node_link(env) == want


def test_mig_instances_or_one_gpu_leave_the_link_unknown(sim_node: Any) -> None:
    sim_node("dgx-h100-mig")
    assert tt.intra_node_link({"CUDA_VISIBLE_DEVICES": "MIG-a,MIG-b"}) is None
    assert tt.intra_node_link({"CUDA_VISIBLE_DEVICES": "GPU-x"}) is None
    assert tt.intra_node_link({"CUDA_VISIBLE_DEVICES": "GPU-x,GPU-y"}) is None  # not here


@given(st.floats(1e6, 1e12), st.integers(1, 64))
def test_a_models_memory_is_three_copies_of_its_parameters_and_the_batch(
    params: float, batch: int
) -> None:
    # Weights, gradients and their flattened copy; the two square layers hold ~params.
    width = tt.model_width(params)
    weights = 2 * (width * width + width)
    assert 0.99 * params <= weights <= 1.01 * params
    for element in (2, 4):
        assert tt.model_bytes(params, batch, element) == element * (3 * weights + 4 * batch * width)


def test_a_model_too_big_for_its_device_is_one_line_naming_what_it_needs() -> None:
    need = tt.model_bytes(2e10, 32, 2)  # ~112 GiB in bf16: more than an 80 GB H100
    free = 79 * 2**30
    refused = tt.too_big(need, free, "cuda:0", 2e10)
    assert refused is not None and "\n" not in refused
    assert refused.startswith("train: --params 2e+10 needs ~111.8 GiB per worker on cuda:0")
    assert "which has 79.0 GiB free" in refused
    assert tt.too_big(need, need, "cuda:0", 2e10) is None  # just fits
    assert tt.too_big(need, None, "cuda:0", 2e10) is None  # unknown: let it try
