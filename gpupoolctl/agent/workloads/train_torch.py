"""The `train` workload on a real node: a small synthetic model trained data-parallel with
torch.distributed over every GPU the job holds, on one node or several.

The process `submit` starts on each node starts one worker process per GPU of the job there,
as torchrun would, each confined to its own device (one entry of CUDA_VISIBLE_DEVICES on
NVIDIA, of ROCR_VISIBLE_DEVICES on AMD; with MIG, CUDA uses only the first instance a
process sees, so one per process is also the only way to use several). Without a GPU, one
gloo worker per slice of the job runs on the CPU. Global ranks follow the job's placement:
node k's workers come after those of nodes 0..k-1 (GPUPOOL_GPUS_PER_NODE), and rank 0, on
node 0, is the rendezvous point (GPUPOOL_MASTER_ADDR/PORT). NCCL on NVIDIA, RCCL on AMD
(ROCm builds of PyTorch answer to the "nccl" name), gloo on the CPU.

Each worker times every step's forward/backward pass (compute) and the all-reduce of the
flattened gradients (communication) for real, the device synchronised before each reading;
the node reports the mean over its workers. The link class that bounded the all-reduce: the
NICs when the job spans nodes; inside one node, the slowest link between the job's GPUs as
the node's driver sees it (NVLink, xGMI, else PCIe); none on the CPU. Global rank 0 keeps
the step reached in the job's checkpoint folder, as the simulated path does.

The agent ships no PyTorch: without it, the job exits 3 with the reason, as `matmul` does.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import importlib.util
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Any, TextIO

from gpupoolctl.agent.workloads import (
    EXIT_OK,
    EXIT_RENDEZVOUS,
    EXIT_UNFINISHED,
    EXIT_UNSUPPORTED,
    Stopped,
    raise_stopped,
)
from gpupoolctl.agent.workloads import report as report_file
from gpupoolctl.agent.workloads.train_checkpoint import Checkpoint

WORKER_ENV = "GPUPOOL_TRAIN_WORKER"  # a worker's orders (JSON), set by its node's process
MAX_WORKERS = 64  # per node: more slices than any node has GPUs is a mistake, not a job
_POLL_S = 0.05
_STOP_GRACE_S = 5.0
_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class Refused(Exception):
    """This node cannot run its part of the job: `code` says how (3 or 4)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class NodePlan:
    """What this node runs: its workers' global ranks and each one's device."""

    node_rank: int
    nnodes: int
    first_rank: int
    world: int
    # Per local worker: the visibility variables that confine it to its device ({} on the
    # CPU), and the device index it then uses.
    devices: tuple[tuple[dict[str, str], int], ...]


def _entries(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def _count(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise Refused(f"train: {what}={text!r} is not a count", EXIT_RENDEZVOUS)
    return value


def plan_node(env: Mapping[str, str]) -> NodePlan:
    """This node's share of the job, from the variables `submit` sets. A node holding more
    GPUs of the job than its visibility variables name cannot confine one worker per GPU:
    refused (exit 3). Malformed rendezvous variables: exit 4, as the simulated path."""
    node_rank = _count(env.get("GPUPOOL_NODE_RANK") or "0", "GPUPOOL_NODE_RANK")
    nnodes = _count(env.get("GPUPOOL_NNODES") or "1", "GPUPOOL_NNODES")
    if nnodes < 1 or node_rank >= nnodes:
        raise Refused(
            f"train: node rank {node_rank} is not one of GPUPOOL_NNODES={nnodes}", EXIT_RENDEZVOUS
        )
    cuda = _entries(env.get("CUDA_VISIBLE_DEVICES"))
    rocr = _entries(env.get("ROCR_VISIBLE_DEVICES"))
    visible = cuda or rocr
    here_text = env.get("GPUPOOL_GPUS_ON_NODE") or str(len(visible) or 1)
    here = _count(here_text, "GPUPOOL_GPUS_ON_NODE")
    per_node_text = env.get("GPUPOOL_GPUS_PER_NODE")
    if per_node_text:
        counts = [_count(c, "GPUPOOL_GPUS_PER_NODE") for c in per_node_text.split(",")]
        if len(counts) != nnodes:
            raise Refused(
                f"train: GPUPOOL_GPUS_PER_NODE={per_node_text!r} does not name {nnodes} nodes",
                EXIT_RENDEZVOUS,
            )
    else:  # set by older admin sides: every node like this one, as torchrun assumes
        counts = [here] * nnodes
    local = counts[node_rank]
    if not 1 <= local <= MAX_WORKERS:
        raise Refused(
            f"train: {local} GPUs of the job on this node; expected 1 to {MAX_WORKERS}",
            EXIT_UNSUPPORTED,
        )
    if visible and len(visible) < local:
        name = "CUDA_VISIBLE_DEVICES" if cuda else "ROCR_VISIBLE_DEVICES"
        raise Refused(
            f"train: the job holds {local} GPUs on this node but {name} names {len(visible)}",
            EXIT_UNSUPPORTED,
        )
    devices: list[tuple[dict[str, str], int]] = []
    for index in range(local):
        if cuda:
            devices.append(({"CUDA_VISIBLE_DEVICES": cuda[index]}, 0))
        elif rocr:
            # ROCr narrows to one logical GPU; HIP then numbers what it sees from 0.
            devices.append(({"ROCR_VISIBLE_DEVICES": rocr[index], "HIP_VISIBLE_DEVICES": "0"}, 0))
        else:
            devices.append(({}, index))
    return NodePlan(
        node_rank=node_rank,
        nnodes=nnodes,
        first_rank=sum(counts[:node_rank]),
        world=sum(counts),
        devices=tuple(devices),
    )


def link_class(words: Iterable[str]) -> str | None:
    """The slowest of the links named by a driver's link matrix (nvidia-smi's words): all
    NVLink -> "nvlink", all xGMI -> "xgmi", anything else on the way -> "pcie"."""
    seen = set(words)
    if not seen:
        return None
    if all(word.startswith("NV") for word in seen):
        return "nvlink"
    if seen == {"XGMI"}:
        return "xgmi"
    return "pcie"


def intra_node_link(env: Mapping[str, str]) -> str | None:
    """The link class between the job's GPUs on this node, from the node's driver (NVLink,
    xGMI or PCIe); None when it cannot be told: fewer than two GPUs, MIG instances (they
    share one card), no driver."""
    cuda = _entries(env.get("CUDA_VISIBLE_DEVICES"))
    rocr = _entries(env.get("ROCR_VISIBLE_DEVICES"))
    if len(cuda) < 2 and len(rocr) < 2:
        return None
    from gpupoolctl.agent.drivers import open_drivers

    try:
        drivers, _ = open_drivers(allow_cli=False)
    except Exception:  # a broken stack: the split is still measured, its class unknown
        return None
    try:
        for driver in drivers:
            indexes = _driver_indexes(driver, cuda, rocr)
            if indexes is None:
                continue
            matrix = driver.link_matrix()
            return link_class(matrix[i][j] for i, j in itertools.combinations(indexes, 2))
    except (LookupError, ValueError, TypeError):
        return None
    finally:
        for driver in drivers:
            with contextlib.suppress(Exception):
                driver.close()
    return None


def _driver_indexes(driver: Any, cuda: list[str], rocr: list[str]) -> list[int] | None:
    if driver.vendor == "nvidia" and len(cuda) >= 2:
        if not all(entry.startswith("GPU-") for entry in cuda):
            return None  # MIG instances, or indexes whose order CUDA may have changed
        uuids = [str(gpu.get("uuid") or "") for gpu in driver.gpus()]
        return [uuids.index(entry) for entry in cuda]
    if driver.vendor == "amd" and len(rocr) >= 2:
        return [int(entry) for entry in rocr]  # ROCr's logical numbers: amdsmi's order
    return None


# -- the node's process ------------------------------------------------------------------------


def run(options: Any, env: Mapping[str, str], out: TextIO, err: TextIO, why: str | None) -> int:
    if importlib.util.find_spec("torch") is None:
        err.write(
            f"train: PyTorch is not importable on {socket.gethostname()} (no module named "
            f"'torch'); this is not a simulated node either ({why}). Install torch on the "
            "node, or use a sim node\n"
        )
        return EXIT_UNSUPPORTED
    try:
        plan = plan_node(env)
    except Refused as exc:
        err.write(f"{exc}\n")
        return exc.code
    link = "nic" if plan.nnodes > 1 else intra_node_link(env)
    try:
        with tempfile.TemporaryDirectory(prefix="gpupool-train-") as folder:
            code, results = _supervise(options, env, plan, folder, err)
    except Stopped as stopped:  # die of the signal, as the simulated path does
        err.flush()
        signal.signal(stopped.signum, signal.SIG_DFL)
        os.kill(os.getpid(), stopped.signum)
        raise
    if code != EXIT_OK:
        return code
    if any(r is None for r in results):
        err.write("train: a worker ended without its report\n")
        return EXIT_UNSUPPORTED
    done = [r for r in results if r is not None]
    steps = min(int(r["steps"]) for r in done)
    compute_s = sum(float(r["compute_s"]) for r in done) / len(done)
    comm_s = sum(float(r["comm_s"]) for r in done) / len(done)
    bound = link if plan.world > 1 else None
    report = {
        "v": 1,
        "workload": "train",
        "samples": steps * options.batch * plan.world,
        "steps": steps,
        "compute_s": round(compute_s, 6),
        "comm_s": round(comm_s, 6),
        "comm_links": {bound: round(comm_s, 6)} if bound else {},
        "bound_by": bound,
    }
    report_file.write(env, report)
    summary = {
        **report,
        "node_rank": plan.node_rank,
        "nnodes": plan.nnodes,
        "ranks": plan.world,
        "workers": len(done),
        "backend": done[0].get("backend"),
        "devices": [r.get("device") for r in done],
        "resumed_from": min(int(r.get("start") or 0) for r in done),
    }
    out.write(json.dumps(summary, sort_keys=True) + "\n")
    out.flush()
    return EXIT_OK


Worker = tuple[subprocess.Popen[bytes], IO[bytes], IO[bytes]]


def _supervise(
    options: Any, env: Mapping[str, str], plan: NodePlan, folder: str, err: TextIO
) -> tuple[int, list[dict[str, Any] | None]]:
    """Start the node's workers and wait for them: (exit code, each worker's result). A
    signal to this process, from the moment the first worker starts, goes to them all."""
    workers: list[Worker] = []
    stopped: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        stopped.append(signum)
        for process, _, _ in workers:
            with contextlib.suppress(OSError):
                process.send_signal(signum)

    previous = {}
    with contextlib.suppress(ValueError):  # not the main thread: no handlers
        for signum in _SIGNALS:
            previous[signum] = signal.signal(signum, forward)
    try:
        _start_workers(options, env, plan, folder, workers)
        code = _wait(workers, err)
        if stopped:
            raise Stopped(stopped[0])
        return code, [_result(stdout) for _, stdout, _ in workers]
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for _, stdout, stderr in workers:
            stdout.close()
            stderr.close()


def _start_workers(
    options: Any, env: Mapping[str, str], plan: NodePlan, folder: str, workers: list[Worker]
) -> None:
    """One worker per entry of `plan.devices`, appended to `workers` as each starts."""
    base = dict(env)
    for local, (visibility, device) in enumerate(plan.devices):
        orders = {
            "rank": plan.first_rank + local,
            "world": plan.world,
            "device": device,
            "address": env.get("GPUPOOL_MASTER_ADDR") or "127.0.0.1",
            "port": int(env.get("GPUPOOL_MASTER_PORT") or 29500),
            "params": options.params,
            "batch": options.batch,
            "local": len(plan.devices),
            "steps": options.steps,
            "timeout": options.rendezvous_timeout,
            "checkpoint_every": options.checkpoint_every,
        }
        stdout = open(os.path.join(folder, f"{local}.out"), "w+b")  # noqa: SIM115
        stderr = open(os.path.join(folder, f"{local}.err"), "w+b")  # noqa: SIM115
        process = subprocess.Popen(
            [sys.executable, "-c", "from gpupoolctl.agent.workloads import train_torch as t; "
             "raise SystemExit(t.worker())"],
            env={**base, **visibility, WORKER_ENV: json.dumps(orders)},
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )  # fmt: skip
        workers.append((process, stdout, stderr))


def _wait(workers: list[Worker], err: TextIO) -> int:
    """Wait for every worker; the first to fail stops the rest (they would wait for it in
    their next all-reduce until the time-out). Returns the first failure's exit code, with
    its stderr, or EXIT_OK."""
    failed: Worker | None = None
    while failed is None and any(p.poll() is None for p, _, _ in workers):
        failed = next((w for w in workers if w[0].returncode not in (None, 0)), None)
        if failed is None:
            time.sleep(_POLL_S)
    if failed is None:
        failed = next((w for w in workers if w[0].returncode != 0), None)
    if failed is None:
        return EXIT_OK
    _stop(workers)
    process, _, stderr = failed
    stderr.seek(0)
    err.write(stderr.read().decode("utf-8", "replace"))
    code = process.returncode
    return code if code > 0 else 128 - code


def _stop(workers: list[Worker]) -> None:
    for process, _, _ in workers:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + _STOP_GRACE_S
    for process, _, _ in workers:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _result(stdout: IO[bytes]) -> dict[str, Any] | None:
    stdout.seek(0)
    lines = stdout.read().decode("utf-8", "replace").strip().splitlines()
    try:
        value = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# -- one worker: one rank ----------------------------------------------------------------------


def model_width(params: float) -> int:
    """The synthetic model is two square layers of this width: ~`params` parameters."""
    return max(8, int((params / 2) ** 0.5))


def model_bytes(params: float, batch: int, element_bytes: int) -> int:
    """What one worker holds at its peak: the weights, their gradients and the flattened
    copy all-reduced in place (3 x the parameters), and the batch's input and activations
    (~4 x batch x width)."""
    width = model_width(params)
    weights = 2 * (width * width + width)
    return element_bytes * (3 * weights + 4 * batch * width)


def too_big(need: int, free: int | None, where: str, params: float) -> str | None:
    """The one-line refusal when the model cannot fit in `free` bytes (None: unknown)."""
    if free is None or need <= free:
        return None
    return (
        f"train: --params {params:g} needs ~{need / 2**30:.1f} GiB per worker on {where}, "
        f"which has {free / 2**30:.1f} GiB free; use a smaller --params (or --batch)"
    )


def _free_bytes(torch: Any, on_gpu: bool, device: int, local_workers: int) -> int | None:
    """Memory this worker may fill: its GPU's free memory, or on the CPU its share of the
    node's available memory (each of the node's workers holds its own model)."""
    try:
        if on_gpu:
            return int(torch.cuda.mem_get_info(device)[0])
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // max(1, local_workers)
    except (OSError, ValueError, RuntimeError):
        return None
    return None


def worker() -> int:
    """One rank's training, on the orders in $GPUPOOL_TRAIN_WORKER; prints one JSON line."""
    orders = json.loads(os.environ[WORKER_ENV])
    try:
        torch = importlib.import_module("torch")
        import torch.distributed as dist  # type: ignore[import-not-found]
    except Exception as exc:  # a broken install (missing CUDA libraries) is as good as none
        sys.stderr.write(f"train: PyTorch is not importable on {socket.gethostname()} ({exc})\n")
        return EXIT_UNSUPPORTED
    rank, world = int(orders["rank"]), int(orders["world"])
    index, params = int(orders["device"]), float(orders["params"])
    on_gpu = bool(torch.cuda.is_available())
    if on_gpu:
        torch.cuda.set_device(index)
    device = torch.device("cuda", index) if on_gpu else torch.device("cpu")
    # Before meeting the others: a model that cannot fit is one line, not an OOM traceback.
    refused = too_big(
        model_bytes(params, int(orders["batch"]), 2 if on_gpu else 4),
        _free_bytes(torch, on_gpu, index, int(orders.get("local", 1))),
        str(device),
        params,
    )
    if refused:
        sys.stderr.write(refused + "\n")
        return EXIT_UNSUPPORTED
    checkpoint = Checkpoint.for_job(os.environ) if rank == 0 else None
    try:
        dist.init_process_group(
            "nccl" if on_gpu else "gloo",
            init_method=f"tcp://{orders['address']}:{int(orders['port'])}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=float(orders["timeout"])),
        )
    except Exception as exc:  # the others never came, or the port is taken
        sys.stderr.write(f"train: rank {rank} of {world} could not meet the others: {exc}\n")
        return EXIT_RENDEZVOUS
    for signum in _SIGNALS:  # from here a stop saves the step reached (rank 0)
        signal.signal(signum, raise_stopped)
    reached = [0]
    try:
        result = _train(torch, dist, orders, device, on_gpu, checkpoint, reached)
    except Stopped as stopped:
        if checkpoint is not None and reached[0]:
            with contextlib.suppress(OSError):
                checkpoint.save(int(orders["steps"]), params, reached[0])
        signal.signal(stopped.signum, signal.SIG_DFL)
        os.kill(os.getpid(), stopped.signum)
        raise
    except Exception as exc:  # out of memory despite the estimate, a peer gone: one line
        first = (str(exc).strip().splitlines() or [""])[0]
        sys.stderr.write(f"train: rank {rank} of {world} failed: {type(exc).__name__}: {first}\n")
        return EXIT_UNFINISHED
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    sys.stdout.write(json.dumps({**result, "backend": "nccl" if on_gpu else "gloo"}) + "\n")
    return EXIT_OK


def _train(
    torch: Any,
    dist: Any,
    orders: Mapping[str, Any],
    device: Any,
    on_gpu: bool,
    checkpoint: Checkpoint | None,
    reached: list[int],
) -> dict[str, Any]:
    """The steps from rank 0's checkpoint on; `reached[0]`: the step reached so far."""
    steps, params = int(orders["steps"]), float(orders["params"])
    start = torch.zeros(1, dtype=torch.int64, device=device)
    if checkpoint is not None:
        step, note = checkpoint.load(steps, params)
        if note:
            sys.stderr.write(f"train: {note}\n")
        start[0] = step
    dist.broadcast(start, src=0)  # every rank resumes where rank 0's checkpoint says
    first = int(start.item())
    width = model_width(params)
    dtype = torch.bfloat16 if on_gpu else torch.float32
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width)
    ).to(device, dtype)
    data = torch.randn(int(orders["batch"]), width, device=device, dtype=dtype)

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize()

    compute_s = comm_s = 0.0
    reached[0] = first
    every = max(1, int(orders["checkpoint_every"]))
    for _ in range(first, steps):
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
        reached[0] += 1
        if checkpoint is not None and reached[0] % every == 0:
            checkpoint.save(steps, params, reached[0])
    if checkpoint is not None:
        checkpoint.save(steps, params, reached[0])
    return {
        "steps": reached[0] - first,
        "start": first,
        "compute_s": compute_s,
        "comm_s": comm_s,
        "device": str(device),
    }
