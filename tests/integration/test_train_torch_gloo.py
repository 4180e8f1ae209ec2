"""The `train` workload's PyTorch path for real: torch.distributed with gloo on the CPU, one
worker per slice, one or two "nodes" on this machine. Skipped where PyTorch is not installed
(the GPU suite in tests/hardware runs the same path with NCCL/RCCL)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.agent.workloads import (
    EXIT_OK,
    EXIT_RENDEZVOUS,
    EXIT_UNFINISHED,
    EXIT_UNSUPPORTED,
    train_torch,
)

pytest.importorskip("torch")

TRAIN = [sys.executable, "-m", "gpupoolctl.agent.workloads", "train", "--params", "2e4"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _node_env(tmp_path: Path, rank: int, counts: list[int], port: int, **more: str) -> dict:
    job = tmp_path / f"node{rank}"
    job.mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "CUDA_"))}
    return {
        **base,
        "CUDA_VISIBLE_DEVICES": "",  # the CPU, even on a machine with a GPU
        "GPUPOOL_NODE_RANK": str(rank),
        "GPUPOOL_NNODES": str(len(counts)),
        "GPUPOOL_GPUS_ON_NODE": str(counts[rank]),
        "GPUPOOL_GPUS_PER_NODE": ",".join(map(str, counts)),
        "GPUPOOL_MASTER_ADDR": "127.0.0.1",
        "GPUPOOL_MASTER_PORT": str(port),
        "GPUPOOL_JOB_DIR": str(job),
        **more,
    }


def _start(env: dict, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*TRAIN, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _finish(process: subprocess.Popen[str]) -> tuple[int, dict[str, Any] | None, str]:
    out, err = process.communicate(timeout=120)
    lines = out.strip().splitlines()
    return process.returncode, (json.loads(lines[-1]) if lines else None), err


def test_one_node_trains_on_every_slice_it_holds(tmp_path: Path) -> None:
    env = _node_env(tmp_path, 0, [3], _free_port())
    code, summary, err = _finish(_start(env, "--steps", "4", "--batch", "2"))
    assert code == EXIT_OK, err
    assert summary is not None
    assert (summary["ranks"], summary["workers"], summary["backend"]) == (3, 3, "gloo")
    assert summary["samples"] == 4 * 2 * 3
    assert summary["compute_s"] > 0 and summary["comm_s"] > 0
    assert summary["bound_by"] is None  # the CPU: no GPU link to name
    report = json.loads((tmp_path / "node0" / "report.json").read_text())
    assert report["samples"] == summary["samples"] and report["comm_s"] == summary["comm_s"]


def test_two_nodes_meet_with_global_ranks_from_the_placement(tmp_path: Path) -> None:
    port = _free_port()
    one = _start(_node_env(tmp_path, 1, [2, 1], port), "--steps", "3")
    zero = _start(_node_env(tmp_path, 0, [2, 1], port), "--steps", "3")
    results = [_finish(zero), _finish(one)]
    for code, _, err in results:
        assert code == EXIT_OK, err
    (_, first, _), (_, second, _) = results
    assert first is not None and second is not None
    assert (first["workers"], second["workers"]) == (2, 1)
    assert first["ranks"] == second["ranks"] == 3
    assert first["samples"] == second["samples"] == 3 * 4 * 3  # steps x batch x ranks
    assert first["bound_by"] == second["bound_by"] == "nic"
    assert first["comm_links"] == {"nic": first["comm_s"]}


def test_a_model_too_big_for_the_memory_is_refused_in_one_line_before_the_rendezvous(
    tmp_path: Path,
) -> None:
    # 1e13 parameters (the most --params takes): ~100 TiB in fp32, on any machine. Refused
    # before the workers meet, so the peer that never comes (node 1) is not waited for.
    env = _node_env(tmp_path, 0, [2, 1], _free_port())
    began = time.monotonic()
    code, summary, err = _finish(_start(env, "--params", "1e13", "--rendezvous-timeout", "60"))
    assert code == EXIT_UNSUPPORTED and summary is None, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("train: --params 1e+13 needs ~") and "GiB free" in err, err
    assert time.monotonic() - began < 50


def test_a_rank_that_fails_mid_run_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    orders = {
        "rank": 0, "world": 1, "device": 0, "address": "127.0.0.1", "port": _free_port(),
        "params": 2e4, "batch": 2, "steps": "four", "timeout": 30, "checkpoint_every": 1,
    }  # fmt: skip
    monkeypatch.setenv(train_torch.WORKER_ENV, json.dumps(orders))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("GPUPOOL_JOB_DIR", str(tmp_path))
    assert train_torch.worker() == EXIT_UNFINISHED
    err = capsys.readouterr().err
    assert err.startswith("train: rank 0 of 1 failed: ValueError: ") and err.count("\n") == 1


def test_a_peer_that_never_comes_is_exit_4_within_the_rendezvous_time(tmp_path: Path) -> None:
    env = _node_env(tmp_path, 0, [1, 1], _free_port())
    began = time.monotonic()
    code, summary, err = _finish(_start(env, "--steps", "2", "--rendezvous-timeout", "2"))
    assert code == EXIT_RENDEZVOUS and summary is None
    assert "rank 0 of 2 could not meet the others" in err
    assert time.monotonic() - began < 60


def test_a_stopped_run_keeps_its_step_and_takes_its_workers_with_it(tmp_path: Path) -> None:
    checkpoints = tmp_path / "ck"
    marker = f"gpupool-test-{os.getpid()}-{_free_port()}"
    env = _node_env(
        tmp_path, 0, [2], _free_port(), GPUPOOL_CHECKPOINT_DIR=str(checkpoints), MARK=marker
    )
    node = _start(env, "--steps", "1000000", "--checkpoint-every", "1")
    saved = checkpoints / "train.json"
    deadline = time.monotonic() + 60
    while not saved.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert saved.exists(), "no checkpoint within 60 s"
    node.send_signal(signal.SIGTERM)
    code, _, err = _finish(node)
    assert code == -signal.SIGTERM, err
    assert 0 < json.loads(saved.read_text())["step"] < 1000000
    assert not _workers_left(marker)


def test_the_next_try_resumes_from_the_checkpoints_step(tmp_path: Path) -> None:
    checkpoints = tmp_path / "ck"
    env = _node_env(tmp_path, 0, [2], _free_port(), GPUPOOL_CHECKPOINT_DIR=str(checkpoints))
    code, summary, err = _finish(_start(env, "--steps", "5"))
    assert code == EXIT_OK, err
    saved = checkpoints / "train.json"
    assert json.loads(saved.read_text())["step"] == 5
    # As a try stopped at step 3 would have left it.
    saved.write_text(json.dumps({**json.loads(saved.read_text()), "step": 3}))
    env["GPUPOOL_MASTER_PORT"] = str(_free_port())
    code, summary, err = _finish(_start(env, "--steps", "5", "--batch", "2"))
    assert code == EXIT_OK, err
    assert summary is not None
    assert (summary["resumed_from"], summary["steps"], summary["samples"]) == (3, 2, 2 * 2 * 2)
    assert json.loads(saved.read_text())["step"] == 5


def _workers_left(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if f"MARK={marker}".encode() in environ.split(b"\0"):
            found.append(int(entry.name))
    return found
