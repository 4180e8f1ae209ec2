"""Jobs as processes on simulated GPUs: what the `launch` verb adds to the simulator.

A job launched on a simulated node is a real local process; it also appears in the state
file as a process on its simulated GPU or MIG instance (NVIDIA) or logical GPU (AMD), so
`inventory` counts it and `partition apply` refuses that GPU as busy, like a real one.
Such entries carry "job": <job id> next to the vendor's usual process fields, and
`prune_ended_jobs` (gpupoolctl.sim.statefile, run on every load) drops them once their pid
has ended: the simulated driver, like the real one, stops listing a process that has
exited. Entries without "job" (put there by tests with sim_add_process) are never pruned.
Stdlib only.
"""

from __future__ import annotations

from typing import Any

from gpupoolctl.sim.state import SimState

JOB_MEMORY_MIB = 256  # what a simulated job shows as using: little, but not nothing


def register_job(
    state: SimState, vendor: str | None, uuids: list[str], pid: int, job_id: str, name: str
) -> int:
    """Show `pid` on every simulated device in `uuids`; returns how many were found."""
    found = 0
    with state.mutate() as data:
        wanted = {u.lower() for u in uuids}
        if vendor == "nvidia" and isinstance(data.get("nvidia"), dict):
            for gpu in data["nvidia"].get("gpus") or []:
                for gi_id, ci_id in _nvidia_places(gpu, wanted):
                    gpu.setdefault("processes", []).append(
                        {
                            "pid": pid,
                            "name": name,
                            "used_memory_mib": JOB_MEMORY_MIB,
                            "gpu_instance_id": gi_id,
                            "compute_instance_id": ci_id,
                            "job": job_id,
                        }
                    )
                    found += 1
        if vendor == "amd" and isinstance(data.get("amd"), dict):
            import gpupoolctl.sim.amdsmi as fake

            for gpu in data["amd"].get("gpus") or []:
                for partition in range(fake._partitions(gpu)):
                    if fake._uuid(gpu, partition).lower() in wanted:
                        gpu.setdefault("processes", []).append(
                            {
                                "pid": pid,
                                "name": name,
                                "vram_mb": JOB_MEMORY_MIB,
                                "partition": partition,
                                "gfx": 0,
                                "job": job_id,
                            }
                        )
                        found += 1
    return found


def _nvidia_places(gpu: dict[str, Any], wanted: set[str]) -> list[tuple[int | None, int | None]]:
    if str(gpu.get("uuid", "")).lower() in wanted:
        return [(None, None)]
    places: list[tuple[int | None, int | None]] = []
    for gi in (gpu.get("mig") or {}).get("gpu_instances") or []:
        for ci in gi.get("compute_instances") or []:
            if str(ci.get("uuid", "")).lower() in wanted:
                places.append((gi["id"], ci["id"]))
    return places
