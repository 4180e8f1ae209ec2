"""The `train` workload on a real node: a small synthetic model trained with torch.distributed.

One process per node (its rank is the node's), on the first visible GPU (or the CPU with
gloo): NCCL on NVIDIA, RCCL on AMD (ROCm builds of PyTorch answer to the "nccl" backend name),
gloo without a GPU. Each step times the forward/backward pass (compute) and the all-reduce of
the flattened gradients (communication) for real, with the device synchronised before each
reading. The link class it reports is what the placement implies: "nic" across nodes, else
none (one rank: nothing to reduce).

The agent ships no PyTorch: without it, the job exits 3 with the reason, as `matmul` does.
"""

from __future__ import annotations

import importlib
import json
import socket
import time
from collections.abc import Mapping
from typing import Any, TextIO

from gpupoolctl.agent.workloads import EXIT_OK, EXIT_UNSUPPORTED


def _torch() -> Any:
    try:
        return importlib.import_module("torch")
    except Exception as exc:  # a broken install (missing CUDA libraries) is as good as none
        return exc


def run(options: Any, env: Mapping[str, str], out: TextIO, err: TextIO, why: str | None) -> int:
    from gpupoolctl.agent.workloads import report as report_file

    torch = _torch()
    if isinstance(torch, BaseException):
        err.write(
            f"train: PyTorch is not importable on {socket.gethostname()} ({torch}); this is "
            f"not a simulated node either ({why}). Install torch on the node, or use a sim "
            "node\n"
        )
        return EXIT_UNSUPPORTED
    import torch.distributed as dist  # type: ignore[import-not-found]

    rank = int(env.get("GPUPOOL_NODE_RANK") or 0)
    world = int(env.get("GPUPOOL_NNODES") or 1)
    address = env.get("GPUPOOL_MASTER_ADDR") or "127.0.0.1"
    port = int(env.get("GPUPOOL_MASTER_PORT") or 29500)
    on_gpu = bool(torch.cuda.is_available())
    device = torch.device("cuda:0" if on_gpu else "cpu")
    backend = "nccl" if on_gpu else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://{address}:{port}",
        rank=rank,
        world_size=world,
        timeout=__import__("datetime").timedelta(seconds=options.rendezvous_timeout),
    )
    try:
        width = max(8, int((options.params / 2) ** 0.5))  # two square layers ~ params
        model = torch.nn.Sequential(
            torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width)
        ).to(device)
        dtype = torch.bfloat16 if on_gpu else torch.float32
        model = model.to(dtype)
        data = torch.randn(options.batch, width, device=device, dtype=dtype)

        def sync() -> None:
            if on_gpu:
                torch.cuda.synchronize()

        compute_s = comm_s = 0.0
        for _ in range(options.steps):
            sync()
            t0 = time.perf_counter()
            model.zero_grad(set_to_none=True)
            model(data).float().pow(2).mean().backward()
            sync()
            t1 = time.perf_counter()
            flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            dist.all_reduce(flat)
            sync()
            t2 = time.perf_counter()
            compute_s += t1 - t0
            comm_s += t2 - t1
    finally:
        dist.destroy_process_group()
    link = "nic" if world > 1 else None
    report = {
        "v": 1,
        "workload": "train",
        "samples": options.steps * options.batch * world,
        "steps": options.steps,
        "compute_s": round(compute_s, 6),
        "comm_s": round(comm_s, 6),
        "comm_links": {link: round(comm_s, 6)} if link else {},
        "bound_by": link,
    }
    report_file.write(env, report)
    out.write(json.dumps({**report, "backend": backend, "device": str(device)}) + "\n")
    return EXIT_OK
