"""The train workload: the ring all-reduce against its closed form per link class, links
shared per peers folder, the nodes' rendezvous, the report's path to the harness, the torch
path's failure mode."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gpupoolctl.agent.jobs import control
from gpupoolctl.agent.workloads import EXIT_OK, EXIT_RENDEZVOUS, EXIT_UNSUPPORTED, report, train
from gpupoolctl.agent.workloads.train import (
    LATENCY_S,
    NVLINK_GBPS_BY_VERSION,
    PCIE_X16_GBPS,
    XGMI_GBPS,
    Link,
    LinkShares,
    Options,
    ring_allreduce,
)
from gpupoolctl.sim import templates
from gpupoolctl.stress.backend import Finished
from gpupoolctl.stress.pool_backend import finished_from

GB = 2e9  # 1e9 parameters' bf16 gradients

CLASSES = [
    ("nvlink", NVLINK_GBPS_BY_VERSION[4], LATENCY_S["nvlink"]),
    ("xgmi", XGMI_GBPS, LATENCY_S["xgmi"]),
    ("pcie", PCIE_X16_GBPS[4], LATENCY_S["pcie"]),
    ("nic", 400.0, LATENCY_S["nic"]),
    ("wan", 10 / 8, 0.075 / 2),
]


@pytest.mark.parametrize(("kind", "gbps", "latency"), CLASSES)
@pytest.mark.parametrize("ranks", [2, 4, 8, 16])
def test_ring_allreduce_matches_its_closed_form(kind, gbps, latency, ranks):
    seconds, bound = ring_allreduce(ranks, GB, [Link(kind, gbps, latency)])
    expected = 2 * (ranks - 1) / ranks * GB / (gbps * 1e9) + 2 * (ranks - 1) * latency
    assert seconds == pytest.approx(expected, rel=1e-12)
    assert bound == kind


def test_the_slowest_link_bounds_the_ring_and_the_largest_latency_counts():
    links = [Link("nvlink", 450, 3.4e-6), Link("nic", 400, 14e-6), Link("wan", 1.25, 0.0375)]
    seconds, bound = ring_allreduce(16, GB, links)
    assert bound == "wan"
    assert seconds == pytest.approx(2 * 15 / 16 * GB / 1.25e9 + 30 * 0.0375)
    assert ring_allreduce(16, GB, links[:2])[1] == "nic"
    assert ring_allreduce(1, GB, links) == (0.0, None)  # one rank: nothing to reduce


def test_datasheet_figures():
    assert NVLINK_GBPS_BY_VERSION[4] == 450.0  # H100 SXM: 900 GB/s both ways
    assert NVLINK_GBPS_BY_VERSION[3] == 300.0  # A100 SXM: 600 GB/s both ways
    assert PCIE_X16_GBPS[4] == pytest.approx(31.5, abs=0.1)
    assert PCIE_X16_GBPS[5] == pytest.approx(63.0, abs=0.1)


# -- the node from its sim state ---------------------------------------------------------------


def _state(template: str, tmp_path: Path, network: bool = True) -> tuple[Path, list[str]]:
    state = templates.build(template, "n")
    if not network:
        state.pop("network", None)
    path = tmp_path / f"{template}.json"
    path.write_text(json.dumps(state))
    vendor = "nvidia" if "nvidia" in state else "amd"
    return path, [g.get("uuid", str(g["index"])) for g in state[vendor]["gpus"]]


@pytest.mark.parametrize(
    ("template", "fabric", "gbps", "nic"),
    [
        ("dgx-h100", "nvlink", 450.0, 3200 / 8),
        ("a100-pcie-4", "pcie", PCIE_X16_GBPS[4], 200 / 8),
        ("l40s-4", "pcie", PCIE_X16_GBPS[4], 600 / 8),
    ],
)
def test_describe_node(tmp_path, template, fabric, gbps, nic):
    path, uuids = _state(template, tmp_path)
    state = json.loads(path.read_text())
    node = train.describe_node(state, {"CUDA_VISIBLE_DEVICES": ",".join(uuids[:2])})
    assert (node.gpus, node.fabric, node.fabric_gbps, node.nic_gbps) == (2, fabric, gbps, nic)


def test_mi300x_is_one_xgmi_island(tmp_path):
    path, _ = _state("mi300x-8", tmp_path)
    node = train.describe_node(json.loads(path.read_text()), {"HIP_VISIBLE_DEVICES": "0,1,2,3"})
    assert (node.fabric, node.fabric_gbps, node.tflops) == ("xgmi", XGMI_GBPS, 1307.4)


# -- shared links ------------------------------------------------------------------------------


@pytest.fixture
def other_process():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_a_shared_link_halves_per_job(tmp_path, other_process):
    path, uuids = _state("a100-pcie-4", tmp_path)
    node = train.describe_node(
        json.loads(path.read_text()), {"CUDA_VISIBLE_DEVICES": ",".join(uuids)}
    )
    root = tmp_path / "jobs" / "n0"
    root.mkdir(parents=True)
    mine = LinkShares(root / train.LINK_PEERS, tmp_path / "jobs" / train.LINK_PEERS)
    alone = {x.kind: x.gbps for x in train.node_links(node, mine, multi_node=True)}
    for key in ("pcie-hb0", "nic"):
        mine.join(key)
    assert {x.kind: x.gbps for x in train.node_links(node, mine, True)} == alone
    theirs = LinkShares(mine.node_root, mine.shared_root, pid=other_process)
    for key in ("pcie-hb0", "nic"):
        theirs.join(key)
    shared = {x.kind: x.gbps for x in train.node_links(node, mine, True)}
    assert shared == {"pcie": alone["pcie"] / 2, "nic": alone["nic"] / 2}
    # and the ring's time: the slowest link (the NIC, now 12.5 GB/s) bounds it
    ranks = 8
    seconds, bound = ring_allreduce(ranks, GB, train.node_links(node, mine, True))
    assert bound == "nic"
    assert seconds == pytest.approx(2 * 7 / 8 * GB / (alone["nic"] / 2 * 1e9) + 14 * 14e-6)
    theirs.leave()
    assert {x.kind: x.gbps for x in train.node_links(node, mine, True)} == alone
    mine.leave()


# -- runs --------------------------------------------------------------------------------------


def _env(tmp_path: Path, state: Path, uuids: list[str], rank: int = 0, nnodes: int = 1, **extra):
    job_dir = tmp_path / "jobs" / f"n{rank}" / "j-1"
    job_dir.mkdir(parents=True, exist_ok=True)
    env = {
        "GPUPOOL_SIM_STATE": str(state),
        "CUDA_VISIBLE_DEVICES": ",".join(uuids),
        "GPUPOOL_JOB_DIR": str(job_dir),
        "GPUPOOL_JOB_ID": "j-1",
        "GPUPOOL_NODE_RANK": str(rank),
        "GPUPOOL_NNODES": str(nnodes),
        "GPUPOOL_MASTER_ADDR": "127.0.0.1",
        "GPUPOOL_MASTER_PORT": str(extra.pop("port", 29999)),
    }
    env.update(extra)
    return env


def _run(options: Options, env: dict[str, str]) -> tuple[int, dict, str]:
    out, err = io.StringIO(), io.StringIO()
    code = train.run(options, env, out, err)
    return code, (json.loads(out.getvalue()) if out.getvalue() else {}), err.getvalue()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_meet_and_report_the_same_split(tmp_path):
    path, uuids = _state("dgx-h100", tmp_path)
    port = _free_port()
    options = Options(params=1e8, steps=4, rendezvous_timeout=10)
    results: dict[int, tuple] = {}

    def node(rank: int) -> None:
        results[rank] = _run(options, _env(tmp_path, path, uuids, rank, 2, port=port))

    threads = [threading.Thread(target=node, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results[0][0] == results[1][0] == EXIT_OK, (results[0][2], results[1][2])
    zero, one = results[0][1], results[1][1]
    assert zero["ranks"] == one["ranks"] == 16 and zero["samples"] == 4 * 4 * 16
    assert zero["bound_by"] == one["bound_by"] == "nic"
    written = json.loads((tmp_path / "jobs" / "n0" / "j-1" / "report.json").read_text())
    assert set(written) == {
        "v",
        "workload",
        "samples",
        "steps",
        "compute_s",
        "comm_s",
        "comm_links",
        "bound_by",
    }
    assert written["v"] == 1 and written["steps"] == 4


def test_a_peer_that_never_comes_is_exit_4(tmp_path):
    path, uuids = _state("dgx-h100", tmp_path)
    env = _env(tmp_path, path, uuids, 0, 2, port=_free_port())
    code, _, err = _run(Options(steps=2, rendezvous_timeout=0.5), env)
    assert code == EXIT_RENDEZVOUS
    assert "node(s) 1 of 2 never came" in err


def test_node_0_that_never_answers_is_exit_4(tmp_path):
    path, uuids = _state("dgx-h100", tmp_path)
    env = _env(tmp_path, path, uuids, 1, 2, port=_free_port())
    code, _, err = _run(Options(steps=2, rendezvous_timeout=0.5), env)
    assert code == EXIT_RENDEZVOUS and "node 0 never answered" in err


def test_a_multi_node_job_without_nics_fails_clearly(tmp_path):
    path, uuids = _state("dgx-h100", tmp_path, network=False)
    code, _, err = _run(Options(steps=2), _env(tmp_path, path, uuids, 0, 2))
    assert code == EXIT_UNSUPPORTED and "no network.nics section" in err


def test_checkpoint_resumes_from_the_step_saved(tmp_path):
    path, uuids = _state("dgx-h100", tmp_path)
    env = _env(tmp_path, path, uuids, GPUPOOL_CHECKPOINT_DIR=str(tmp_path / "ck"))
    (tmp_path / "ck").mkdir()
    options = Options(params=1e8, steps=6, checkpoint_every=2)
    (tmp_path / "ck" / "train.json").write_text(
        json.dumps({"workload": "train", "steps": 6, "params": 1e8, "step": 4})
    )
    code, summary, _ = _run(options, env)
    assert code == EXIT_OK and summary["resumed_from"] == 4 and summary["steps"] == 2
    saved = json.loads((tmp_path / "ck" / "train.json").read_text())
    assert saved["step"] == 6


def test_without_torch_on_a_real_node_exit_3_with_the_reason(tmp_path):
    # torch is not installed here; with it, tests/hardware covers the success path
    if any(Path(p, "torch").is_dir() for p in sys.path if p):
        pytest.skip("torch is installed here")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_")}
    done = subprocess.run(
        [sys.executable, "-m", "gpupoolctl.agent.workloads", "train", "--steps", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == EXIT_UNSUPPORTED, done.stderr
    assert "PyTorch is not importable" in done.stderr


# -- the report's way to the harness -----------------------------------------------------------


def _exited(tmp_path: Path, report_text: str | None) -> Path:
    folder = tmp_path / "root" / "j-9"
    folder.mkdir(parents=True)
    (folder / "exit.json").write_text(json.dumps({"exit_code": 0, "ended": 1.0}))
    if report_text is not None:
        (folder / "report.json").write_text(report_text)
    return folder.parent


GOOD = {
    "v": 1,
    "workload": "train",
    "samples": 64,
    "steps": 4,
    "compute_s": 0.5,
    "comm_s": 1.5,
    "comm_links": {"nic": 1.5, "bogus": 3},
    "bound_by": "nic",
}


def test_poll_hands_back_the_report_of_an_ended_job(tmp_path):
    root = _exited(tmp_path, json.dumps(GOOD))
    status = control.poll({"job_ids": ["j-9"]}, root)["jobs"]["j-9"]
    assert status["report"] == GOOD


@pytest.mark.parametrize(
    ("text", "note"),
    [
        ("not json", "not JSON"),
        ("[1]", "not a"),
        ("x" * (report.MAX_REPORT_BYTES + 1), "over"),
        (json.dumps({"v": 1, "workload": "train"}), "no samples"),
    ],
)
def test_a_malformed_report_is_left_out_with_a_note(tmp_path, text, note):
    status = control.status(_exited(tmp_path, text), "j-9")
    assert "report" not in status and note in status["report_note"]


def test_the_summary_keeps_known_numbers_only():
    summary = report.summary({**GOOD, "bound_by": "rm -rf /", "note": "user text"})
    assert summary == {
        "samples": 64,
        "steps": 4,
        "compute_s": 0.5,
        "comm_s": 1.5,
        "comm_links": {"nic": 1.5},
        "bound_by": None,
    }


def test_finished_from_a_record_with_a_report():
    record = {
        "state": "done",
        "nodes": [{"started": 10.0}],
        "ended": 12.0,
        "report": report.summary(GOOD),
    }
    finished = finished_from(record, 13.0)
    assert isinstance(finished, Finished)
    assert finished.phases == {"compute": 0.5, "comm": 1.5}
    assert (finished.work, finished.comm_links, finished.bound_by) == (64.0, {"nic": 1.5}, "nic")
    plain = finished_from({"state": "done", "nodes": [{"started": 10.0}], "ended": 12.0}, 13.0)
    assert plain.work is None and plain.phases == {} and plain.comm_links == {}


def test_node_env_names_sites_and_their_links():
    from gpupoolctl.hw.sites import SiteLink
    from gpupoolctl.jobs.rendezvous import node_env

    class T:
        def __init__(self, site):
            self.site = site
            self.site_links = (
                SiteLink(("dubai", "singapore"), 10.0, 75.0),
                SiteLink(("dubai", "tokyo"), 1.0, 99.0),
            )

    nodes = [{"host": "a", "slices": ["x"]}, {"host": "b", "slices": ["y"]}]
    env = node_env("j-1", nodes, 0, "127.0.0.1", {"a": T("singapore"), "b": T("dubai")})
    assert env["GPUPOOL_NODE_SITES"] == "singapore,dubai"
    assert json.loads(env["GPUPOOL_SITE_LINKS"]) == [
        {"sites": ["dubai", "singapore"], "gbps": 10.0, "rtt_ms": 75.0}
    ]
    assert "GPUPOOL_NODE_SITES" not in node_env("j-1", nodes, 0, "127.0.0.1")
