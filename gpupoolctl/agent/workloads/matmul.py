"""The `matmul` workload: a standard GPU burn, repeated N x N matrix products for S seconds.

It uses PyTorch (torch.cuda, which ROCm builds of PyTorch also answer) or CuPy, whichever
imports, and reports the achieved TFLOP/s (2*N^3 floating-point operations per product). The
agent ships neither: on a node without them, or without a visible GPU, it says so on one line
and exits 3, so the harness can tell "this node cannot" from "the job failed".
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from gpupoolctl.agent.workloads import EXIT_OK, EXIT_UNFINISHED, EXIT_UNSUPPORTED

DTYPES = ("float16", "bfloat16", "float32")
MAX_SECONDS = 3600.0
MIN_SIZE, MAX_SIZE = 1, 65536  # 65536: three float16 matrices, 24 GiB, fit an 80 GB card
_GROW_BELOW_S = 0.05  # batch products between syncs until one batch takes this long


class Unsupported(Exception):
    """This node cannot run the burn (no library, no GPU, no such dtype): exit 3."""


def flops_per_product(size: int) -> float:
    return 2.0 * size**3  # N^2 outputs, N multiply-adds each


def timed_loop(
    step: Callable[[int], None],
    sync: Callable[[], None],
    seconds: float,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[int, float]:
    """Run `step(k)` (k products, queued) until `seconds` have passed; (products, elapsed).

    GPU calls return before the work is done, so time is read only after `sync`. The batch
    doubles while a batch is quick, so syncing does not dominate small sizes.
    """
    step(1)  # warm-up, not counted: library start-up, kernel choice, clocks ramping
    sync()
    batch, products = 1, 0
    start = clock()
    while True:
        began = clock()
        step(batch)
        sync()
        products += batch
        now = clock()
        if now - start >= seconds:
            return products, now - start
        if now - began < _GROW_BELOW_S:
            batch *= 2


def _import(name: str) -> Any | None:
    try:
        return importlib.import_module(name)
    except Exception:  # a broken install (missing CUDA libraries) is as good as none
        return None


def _no_gpu(library: str, detail: str) -> Unsupported:
    visible = {
        k: os.environ[k]
        for k in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
        if k in os.environ
    }
    shown = " ".join(f"{k}={v}" for k, v in visible.items()) or "no visibility variables set"
    return Unsupported(
        f"matmul: {library} sees no GPU on {socket.gethostname()} ({detail}; {shown}); "
        "use the sim/sleep workloads"
    )


def _burn_torch(torch: Any, seconds: float, size: int, dtype: str) -> dict[str, Any]:
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        raise _no_gpu("PyTorch", "torch.cuda.is_available() is false")
    device = torch.device("cuda", 0)
    kind = getattr(torch, dtype)
    a = torch.randn((size, size), device=device, dtype=kind)
    b = torch.randn((size, size), device=device, dtype=kind)
    c = torch.empty_like(a)

    def step(k: int) -> None:
        for _ in range(k):
            torch.matmul(a, b, out=c)

    products, elapsed = timed_loop(step, lambda: torch.cuda.synchronize(device), seconds)
    hip = getattr(getattr(torch, "version", None), "hip", None)
    return {
        "backend": "torch-rocm" if hip else "torch-cuda",
        "device": str(torch.cuda.get_device_name(device)),
        "products": products,
        "elapsed": elapsed,
    }


def _burn_cupy(cupy: Any, seconds: float, size: int, dtype: str) -> dict[str, Any]:
    if dtype == "bfloat16":
        raise Unsupported("matmul: CuPy has no bfloat16; use float16 or float32, or PyTorch")
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError when the driver finds no device
        raise _no_gpu("CuPy", str(exc).splitlines()[0] if str(exc) else "no device") from None
    if count < 1:
        raise _no_gpu("CuPy", "getDeviceCount() is 0")
    kind = getattr(cupy, dtype)
    a = cupy.random.standard_normal((size, size), dtype=cupy.float32).astype(kind)
    b = cupy.random.standard_normal((size, size), dtype=cupy.float32).astype(kind)
    c = cupy.empty_like(a)

    def step(k: int) -> None:
        for _ in range(k):
            cupy.matmul(a, b, out=c)

    products, elapsed = timed_loop(step, cupy.cuda.Device(0).synchronize, seconds)
    name = cupy.cuda.runtime.getDeviceProperties(0).get("name", b"")
    return {
        "backend": "cupy-rocm" if getattr(cupy.cuda.runtime, "is_hip", False) else "cupy-cuda",
        "device": name.decode(errors="replace") if isinstance(name, bytes) else str(name),
        "products": products,
        "elapsed": elapsed,
    }


def burn(seconds: float, size: int, dtype: str) -> dict[str, Any]:
    """The burn's report; raises Unsupported when this node cannot run it."""
    burners = (("torch", _burn_torch), ("cupy", _burn_cupy))
    reasons = []
    for module_name, burner in burners:
        module = _import(module_name)
        if module is None:
            continue
        try:
            result = burner(module, seconds, size, dtype)
        except Unsupported as exc:
            reasons.append(str(exc))  # the other library may still have a GPU
            continue
        products, elapsed = result["products"], result["elapsed"]
        return {
            "workload": "matmul",
            "backend": result["backend"],
            "device": result["device"],
            "dtype": dtype,
            "size": size,
            "products": products,
            "elapsed": round(elapsed, 6),
            "tflops": round(products * flops_per_product(size) / elapsed / 1e12, 3),
        }
    if reasons:
        raise Unsupported(reasons[0])
    raise Unsupported(
        f"matmul: neither PyTorch nor CuPy can be imported by {sys.executable} on "
        f"{socket.gethostname()}; install one, or use the sim/sleep workloads"
    )


def run(seconds: float, size: int, dtype: str, out: TextIO, err: TextIO) -> int:
    try:
        report = burn(seconds, size, dtype)
    except Unsupported as exc:
        err.write(f"{exc}\n")
        return EXIT_UNSUPPORTED
    except Exception as exc:  # the GPU failed mid-run (out of memory, a lost device)
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        err.write(f"matmul: the burn failed: {type(exc).__name__}: {first}\n")
        return EXIT_UNFINISHED
    out.write(json.dumps(report, sort_keys=True) + "\n")
    return EXIT_OK
