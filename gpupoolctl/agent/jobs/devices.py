"""Whether this node has the NVIDIA devices a launch is asked to expose. Stdlib only.

The workstation names a job's devices from its ledger; a card re-cut behind the ledger (an
interrupted `partition apply`) leaves it naming MIG instances that are gone. A job started
with such a CUDA_VISIBLE_DEVICES would see no GPU, or another one, so the launch is refused
with NoSuchDevice before anything starts: the workstation then requeues the job and reads
the node's slices again. The check runs inside the launch's own exec (no extra round
trip): NVML through pynvml (the simulator's on a simulated node), else `nvidia-smi -L`.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
from typing import Any

from gpupoolctl.agent.protocol import AgentError

NO_SUCH_DEVICE = "NoSuchDevice"
_SMI_TIMEOUT_S = 30
# `nvidia-smi -L`: "GPU 0: NVIDIA H100 (UUID: GPU-...)", "  MIG 1g.10gb Device 0: (UUID: MIG-...)"
_LISTED = re.compile(r"\(UUID: ((?:GPU|MIG)-[^)\s]+)\)")


def check_nvidia(uuids: list[str], *, allow_cli: bool) -> None:
    """NoSuchDevice unless every uuid is a GPU or MIG device of this node. `allow_cli`:
    nvidia-smi may answer where pynvml cannot (never on a simulated node)."""
    if not uuids:
        return
    present = _nvml_uuids(want_mig=any(u.startswith("MIG-") for u in uuids))
    if present is None and allow_cli:
        present = _smi_uuids()
    missing = [u for u in uuids if u not in (present or set())]
    if not missing:
        return
    why = (
        "its GPUs or MIG instances changed since the pool read them"
        if present
        else "no NVIDIA driver answers here"
    )
    raise AgentError(
        f"launch: no NVIDIA device {', '.join(missing)} on this node: {why}", NO_SUCH_DEVICE
    )


def _nvml_uuids(*, want_mig: bool) -> set[str] | None:
    """Every GPU uuid, and with `want_mig` every MIG device uuid, NVML lists; None when NVML
    is absent or cannot start."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    found: set[str] = set()
    try:
        for index in range(int(pynvml.nvmlDeviceGetCount())):
            try:  # one card fallen off the bus (GPU_IS_LOST) does not hide the others
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                found.add(_text(pynvml.nvmlDeviceGetUUID(handle)))
            except pynvml.NVMLError:
                continue
            if want_mig:
                found.update(_mig_uuids(pynvml, handle))
        return found
    except pynvml.NVMLError:  # not even the count
        return None
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _mig_uuids(nvml: Any, handle: Any) -> set[str]:
    """The MIG devices (compute instances) of one GPU; none when it has MIG off."""
    found: set[str] = set()
    try:
        total = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    except nvml.NVMLError:  # not MIG-capable
        return found
    for index in range(total):
        try:  # NOT_FOUND for unused indices; the populated ones are not necessarily first
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
            found.add(_text(nvml.nvmlDeviceGetUUID(mig)))
        except nvml.NVMLError:
            continue
    return found


def _smi_uuids() -> set[str] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run(
            [smi, "-L"], capture_output=True, text=True, timeout=_SMI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_list(done.stdout) if done.returncode == 0 else None


def parse_list(text: str) -> set[str]:
    """The GPU and MIG device uuids in `nvidia-smi -L` output."""
    return set(_LISTED.findall(text))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
