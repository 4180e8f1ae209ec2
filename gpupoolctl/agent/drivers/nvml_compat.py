"""pynvml calls that must work whatever the ages of the node's binding and libnvidia-ml.

Shared by the `nvml` facts driver and the MIG partitioner, which must see the same processes
and the same profiles: the partitioner's "is this GPU busy?" check is only as good as this.
Stdlib only; `nvml` is the pynvml module (real or simulated).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The node's pynvml may be older than its driver (nvidia-ml-py 11.515 has 8 GPU instance
# profiles and 12 NVLinks; 13.615 has 0x12, 0x9 and 36), so enumerations run at least this far
# and stop where the library answers INVALID_ARGUMENT (nvml.h: enumerate profiles "until the
# API returns NVML_ERROR_INVALID_ARGUMENT").
KNOWN_GI_PROFILES = 0x12
KNOWN_CI_PROFILES = 0x9
KNOWN_NVLINKS = 36

COMPUTE_PROCESSES = "nvmlDeviceGetComputeRunningProcesses"
GRAPHICS_PROCESSES = "nvmlDeviceGetGraphicsRunningProcesses"


class ListerFailed(Exception):
    """No version of a process lister answered; `error` is the last one's exception."""

    def __init__(self, function: str, error: Exception, note: str = "") -> None:
        self.function = function
        self.error = error
        super().__init__(f"{function}{note}: {error}")


def mismatch_errors(nvml: Any) -> tuple[type[Exception], ...]:
    """nvidia-ml-py 13 raises NVMLLibraryMismatchError (not an NVMLError) from its unversioned
    process listers when libnvidia-ml lacks their _v3 symbol; older bindings have no such class."""
    found = getattr(nvml, "NVMLLibraryMismatchError", None)
    return (found,) if isinstance(found, type) and issubclass(found, Exception) else ()


def running_processes(nvml: Any, name: str, handle: Any) -> list[Any]:
    """nvml.<name>(handle), falling back to <name>_v2 where libnvidia-ml has no _v3 symbol (a
    driver older than the binding): nvidia-ml-py 13 then raises NVMLLibraryMismatchError and
    names _v2 as the way out; a binding without that wrapper lets FunctionNotFound through.

    Raises ListerFailed when neither answers; AttributeError when the binding has no `name`."""
    lister = getattr(nvml, name)
    try:
        return list(lister(handle) or [])
    except (nvml.NVMLError, *mismatch_errors(nvml)) as exc:
        not_found = getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", None)
        if isinstance(exc, nvml.NVMLError) and exc.value != not_found:
            raise ListerFailed(name, exc) from None
        first = exc
    older = getattr(nvml, f"{name}_v2", None)
    if older is None:
        raise ListerFailed(name, first, " (and this pynvml has no _v2 of it)")
    try:
        return list(older(handle) or [])
    except (nvml.NVMLError, *mismatch_errors(nvml)) as exc:
        raise ListerFailed(f"{name}_v2", exc, " (libnvidia-ml has no _v3 of it)") from None


def scan_profiles(
    nvml: Any,
    fn: Callable[..., Any],
    binding: int,
    floor: int,
    owner: Any,
    *rest: Any,
    failed: Callable[[Any], None] | None = None,
) -> list[Any]:
    """fn(owner, index, *rest) for each profile index the card offers: every index the
    binding knows (an NVMLError skips that one and goes to `failed`), then on up to `floor`
    until the library answers INVALID_ARGUMENT. Profiles with no instances are left out."""
    infos = []
    for index in range(max(int(binding), floor)):
        try:
            info = fn(owner, index, *rest)
        except nvml.NVMLError as exc:
            if index >= binding and exc.value == nvml.NVML_ERROR_INVALID_ARGUMENT:
                break  # past the library's last profile
            if failed is not None:
                failed(exc)
            continue
        if info.instanceCount:
            infos.append(info)
    return infos


def gpu_instance_profiles(
    nvml: Any, handle: Any, *version: int, failed: Callable[[Any], None] | None = None
) -> list[Any]:
    """The GPU instance profile infos of one GPU (`version` as nvmlDeviceGetGpuInstanceProfileInfo
    takes it; omitted: the binding's default)."""
    return scan_profiles(
        nvml,
        nvml.nvmlDeviceGetGpuInstanceProfileInfo,
        nvml.NVML_GPU_INSTANCE_PROFILE_COUNT,
        KNOWN_GI_PROFILES,
        handle,
        *version,
        failed=failed,
    )


def compute_instance_profiles(
    nvml: Any, gi: Any, failed: Callable[[Any], None] | None = None
) -> list[Any]:
    """The compute instance profile infos (shared engines) of one GPU instance."""
    return scan_profiles(
        nvml,
        nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo,
        nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT,
        KNOWN_CI_PROFILES,
        gi,
        nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
        failed=failed,
    )
