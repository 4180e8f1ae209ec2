"""NVIDIA MIG through pynvml: read a GPU's layout, run one op, restore a snapshot.

Runs unchanged on the real pynvml and on gpupoolctl.sim.pynvml. Profiles are looked up on
the node's own driver (ids vary by device: 14 is 2g.10gb on A100 but 1g.6gb on A30) and
every GPU instance is created at an explicit placement, never at the driver's choice.

Snapshot shape (JSON-able, ids are informational: a recreated instance gets a new id):
    {"mig": null | {"current": 0|1, "pending": 0|1},
     "gpu_instances": [{"id", "profile_id", "profile", "start", "size",
                        "compute_instances": [{"id", "profile_id", "profile", "start", "size"}]}]}
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpupoolctl.agent.drivers import nvml_compat
from gpupoolctl.agent.partition.base import OpFailed, ResetPending


@dataclass(frozen=True)
class _Profile:
    id: int
    name: str
    slices: int
    instances: int


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _name(raw: Any) -> str:
    return _text(raw).removeprefix("MIG ").strip()


def _key(instance: dict[str, Any]) -> tuple[int, int]:
    """What identifies an instance across a destroy and a re-create: profile and placement."""
    return int(instance["profile_id"]), int(instance["start"])


def _where(instance: dict[str, Any]) -> str:
    return f"{instance['profile']}@{instance['start']}:{instance['size']}"


def _mode_word(mode: int) -> str:
    return "enabled" if mode == 1 else "disabled"


class NvidiaCard:
    vendor = "nvidia"

    def __init__(self, nvml: Any, handle: Any, index: int, uuid: str, bus_id: str) -> None:
        self._nvml = nvml
        self._h = handle
        self.index = index
        self.uuid = uuid
        self.bus_id = bus_id
        self._gi_table: dict[int, _Profile] | None = None
        self._ci_tables: dict[int, list[_Profile]] = {}

    # --- plumbing -------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            raise OpFailed(f"{what}: {exc}") from None

    def _modes(self) -> tuple[int, int] | None:
        nvml = self._nvml
        try:
            current, pending = nvml.nvmlDeviceGetMigMode(self._h)
        except nvml.NVMLError as exc:
            if exc.value == nvml.NVML_ERROR_NOT_SUPPORTED:
                return None
            raise OpFailed(f"reading the MIG mode: {exc}") from None
        return int(current), int(pending)

    def _gi_profiles(self) -> dict[int, _Profile]:
        """GPU instance profiles by id, as this node's driver reports them (MIG must be on)."""
        if self._gi_table:
            return self._gi_table
        table: dict[int, _Profile] = {}
        # NotSupported / InvalidArgument below the binding's count: no such profile here.
        for info in nvml_compat.gpu_instance_profiles(self._nvml, self._h):
            table[int(info.id)] = _Profile(
                int(info.id), _name(info.name), int(info.sliceCount), int(info.instanceCount)
            )
        self._gi_table = table or None
        return table

    def _ci_profiles(self, gi: Any, gi_profile_id: int) -> list[_Profile]:
        if gi_profile_id in self._ci_tables:
            return self._ci_tables[gi_profile_id]
        table = [
            _Profile(int(info.id), _name(info.name), int(info.sliceCount), int(info.instanceCount))
            for info in nvml_compat.compute_instance_profiles(self._nvml, gi)
        ]
        self._ci_tables[gi_profile_id] = table
        return table

    def _gi_handle(self, gi_id: int) -> Any:
        return self._call(
            f"GPU instance {gi_id}", self._nvml.nvmlDeviceGetGpuInstanceById, self._h, gi_id
        )

    # --- reading --------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        nvml = self._nvml
        modes = self._modes()
        if modes is None:
            return {"mig": None, "gpu_instances": []}
        instances: list[dict[str, Any]] = []
        if modes[0] == nvml.NVML_DEVICE_MIG_ENABLE:
            for profile in self._gi_profiles().values():
                array = (nvml.c_nvmlGpuInstance_t * profile.instances)()
                count = ctypes.c_uint(0)
                self._call(
                    f"listing {profile.name} instances",
                    nvml.nvmlDeviceGetGpuInstances,
                    self._h,
                    profile.id,
                    array,
                    ctypes.byref(count),
                )
                for slot in range(count.value):
                    gi = array[slot]
                    info = self._call("reading a GPU instance", nvml.nvmlGpuInstanceGetInfo, gi)
                    instances.append(
                        {
                            "id": int(info.id),
                            "profile_id": profile.id,
                            "profile": profile.name,
                            "start": int(info.placement.start),
                            "size": int(info.placement.size),
                            "compute_instances": self._compute_instances(gi, profile.id),
                        }
                    )
        instances.sort(key=lambda gi: (gi["start"], gi["id"]))
        return {"mig": {"current": modes[0], "pending": modes[1]}, "gpu_instances": instances}

    def _compute_instances(self, gi: Any, gi_profile_id: int) -> list[dict[str, Any]]:
        nvml = self._nvml
        out = []
        for profile in self._ci_profiles(gi, gi_profile_id):
            array = (nvml.c_nvmlComputeInstance_t * profile.instances)()
            count = ctypes.c_uint(0)
            self._call(
                f"listing {profile.name} compute instances",
                nvml.nvmlGpuInstanceGetComputeInstances,
                gi,
                profile.id,
                array,
                ctypes.byref(count),
            )
            for slot in range(count.value):
                info = self._call(
                    "reading a compute instance", nvml.nvmlComputeInstanceGetInfo, array[slot]
                )
                out.append(
                    {
                        "id": int(info.id),
                        "profile_id": profile.id,
                        "profile": profile.name,
                        "start": int(info.placement.start),
                        "size": int(info.placement.size),
                    }
                )
        out.sort(key=lambda ci: (ci["start"], ci["id"]))
        return out

    def _processes(self) -> list[tuple[int, int | None, str | None]]:
        """(pid, GPU instance id or None, name) of every compute/graphics process."""
        nvml = self._nvml
        sources: list[tuple[Any, int | None]] = [(self._h, None)]
        modes = self._modes()
        if modes is not None and modes[0] == nvml.NVML_DEVICE_MIG_ENABLE:
            # The parent handle does not always attribute MIG processes; MIG devices do.
            total = self._call("counting MIG devices", nvml.nvmlDeviceGetMaxMigDeviceCount, self._h)
            for position in range(int(total)):
                try:
                    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(self._h, position)
                    sources.append((mig, int(nvml.nvmlDeviceGetGpuInstanceId(mig))))
                except nvml.NVMLError:
                    continue  # NOT_FOUND: unused index
        listers = [nvml_compat.COMPUTE_PROCESSES]
        if hasattr(nvml, nvml_compat.GRAPHICS_PROCESSES):
            listers.append(nvml_compat.GRAPHICS_PROCESSES)
        found: dict[int, tuple[int, int | None, str | None]] = {}
        for handle, gi_hint in sources:
            for lister in listers:
                try:
                    procs = nvml_compat.running_processes(nvml, lister, handle)
                except nvml_compat.ListerFailed as exc:
                    if handle is self._h and not self._no_such_list(lister, exc):
                        # Not knowing is not the same as idle: only --force goes past this.
                        kind = "compute" if lister == nvml_compat.COMPUTE_PROCESSES else "graphics"
                        raise OpFailed(f"cannot list the GPU's {kind} processes: {exc}") from None
                    continue  # a MIG device the parent's list already covers
                for proc in procs:
                    gi = getattr(proc, "gpuInstanceId", None)
                    gi = gi_hint if gi is None or int(gi) == 0xFFFFFFFF else int(gi)
                    pid = int(proc.pid)
                    if pid not in found or found[pid][1] is None:
                        found[pid] = (pid, gi, None)
        out = []
        for pid, gi, _ in found.values():
            try:
                name: str | None = _text(nvml.nvmlSystemGetProcessName(pid)) or None
            except nvml.NVMLError:
                name = None
            out.append((pid, gi, name))
        return sorted(out)

    def _no_such_list(self, lister: str, failed: nvml_compat.ListerFailed) -> bool:
        """A card that has no graphics engine answers NOT_SUPPORTED for its graphics list:
        there is nothing to run there, unlike any other failure."""
        nvml = self._nvml
        return (
            lister == nvml_compat.GRAPHICS_PROCESSES
            and isinstance(failed.error, nvml.NVMLError)
            and failed.error.value == nvml.NVML_ERROR_NOT_SUPPORTED
        )

    def blockers(self, ops: list[dict[str, Any]]) -> list[str]:
        names = {op["op"] for op in ops}
        whole_card = False
        if "set_mig_mode" in names:
            # Setting the mode the card already has only cancels a pending change: no reset,
            # nothing running is touched.
            try:
                modes = self._modes()
            except OpFailed as exc:
                return [str(exc)]
            current = None if modes is None else modes[0]
            whole_card = any(
                op["op"] == "set_mig_mode" and int(bool(op["enabled"])) != current for op in ops
            )
        destroyed = {int(op["gi"]) for op in ops if op["op"] in ("destroy_gi", "destroy_ci")}
        if not whole_card and not destroyed:
            return []  # only creating in free slots: running jobs elsewhere are not touched
        try:
            processes = self._processes()
        except OpFailed as exc:
            return [str(exc)]
        out = []
        for pid, gi, name in processes:
            # A process not attributed to an instance could be on any of them.
            if whole_card or gi is None or gi in destroyed:
                label = f"pid {pid}" + (f" ({name})" if name else "")
                out.append(label + (f" on GPU instance {gi}" if gi is not None else ""))
        return out

    # --- changing -------------------------------------------------------------------------

    def apply(self, op: dict[str, Any]) -> None:
        kind = op["op"]
        if kind == "destroy_ci":
            gi = self._gi_handle(int(op["gi"]))
            ci = self._call(
                f"compute instance {op['gi']}/{op['ci']}",
                self._nvml.nvmlGpuInstanceGetComputeInstanceById,
                gi,
                int(op["ci"]),
            )
            self._call("destroying it", self._nvml.nvmlComputeInstanceDestroy, ci)
        elif kind == "destroy_gi":
            gi = self._gi_handle(int(op["gi"]))
            self._call("destroying it", self._nvml.nvmlGpuInstanceDestroy, gi)
        elif kind == "set_mig_mode":
            self._set_mode(1 if op["enabled"] else 0)
        elif kind == "create_gi":
            self._create_gi(
                int(op["profile_id"]),
                str(op["profile"]),
                int(op["start"]),
                int(op["size"]),
                op.get("compute_instances"),
            )
        else:
            raise OpFailed(f"{kind} is not an NVIDIA operation")

    def _set_mode(self, mode: int) -> None:
        nvml = self._nvml
        status = self._call("setting the MIG mode", nvml.nvmlDeviceSetMigMode, self._h, mode)
        self._gi_table = None  # profiles read with MIG off are not the ones with MIG on
        self._ci_tables.clear()
        modes = self._modes()
        if modes is None:
            raise OpFailed("the GPU stopped reporting a MIG mode")
        current, pending = modes
        if current == mode:
            return
        if status == nvml.NVML_ERROR_IN_USE:
            raise OpFailed(
                "the GPU is in use (processes, or daemons such as nvsm or dcgm holding it); "
                f"MIG stays {_mode_word(current)}"
            )
        if pending == mode:
            raise ResetPending(
                f"MIG {_mode_word(mode)} is pending until the GPU is reset "
                f"(nvidia-smi -r -i {self.bus_id}, or a reboot)"
            )
        raise OpFailed(f"MIG is still {_mode_word(current)} (activation status {status})")

    def _create_gi(
        self, profile_id: int, name: str, start: int, size: int, ci_names: list[str] | None
    ) -> Any:
        nvml = self._nvml
        profiles = self._gi_profiles()
        profile = profiles.get(profile_id)
        if profile is None:
            known = ", ".join(f"{p.name} (id {p.id})" for p in profiles.values()) or "none"
            raise OpFailed(
                f"this GPU has no GPU instance profile id {profile_id} ({name}); "
                f"its profiles: {known}"
            )
        if profile.name != name:
            raise OpFailed(
                f"profile id {profile_id} is {profile.name} on this GPU, not {name}: "
                "plan again from this node's run-time profiles"
            )
        placement = nvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = start, size
        gi = self._call(
            f"creating {name} at {start}:{size}",
            nvml.nvmlDeviceCreateGpuInstanceWithPlacement,
            self._h,
            profile_id,
            ctypes.byref(placement),
        )
        for ci_profile in self._wanted_cis(gi, profile, ci_names):
            self._call(
                f"creating compute instance {ci_profile.name}",
                nvml.nvmlGpuInstanceCreateComputeInstance,
                gi,
                ci_profile.id,
            )
        return gi

    def _wanted_cis(self, gi: Any, profile: _Profile, names: list[str] | None) -> list[_Profile]:
        available = self._ci_profiles(gi, profile.id)
        full = next((p for p in available if p.slices == profile.slices), None)
        if names is None:
            if full is None:
                raise OpFailed(f"{profile.name} offers no compute instance spanning it")
            return [full]  # what `nvidia-smi mig -cgi ... -C` creates
        wanted = []
        for name in names:
            found = next((p for p in available if p.name == name), None)
            if found is None and name == profile.name:
                found = full
            if found is None:
                known = ", ".join(p.name for p in available)
                raise OpFailed(f"no compute instance profile {name!r} in {profile.name}: {known}")
            wanted.append(found)
        return wanted

    # --- restoring ------------------------------------------------------------------------

    def restore(self, snapshot: dict[str, Any]) -> list[str]:
        problems: list[str] = []
        saved = snapshot.get("mig")
        if saved is None:
            return problems  # not a MIG card: nothing here could have changed
        enable = self._nvml.NVML_DEVICE_MIG_ENABLE
        want_on = saved["current"] == enable
        wanted = {_key(gi): gi for gi in snapshot["gpu_instances"]} if want_on else {}
        try:
            now = self.snapshot()
        except OpFailed as exc:
            return [f"reading the layout: {exc}"]
        # 1. Take away what was not there (compute instances before their GPU instance).
        for gi in now["gpu_instances"]:
            target = wanted.get(_key(gi))
            keep = {_key(ci) for ci in target["compute_instances"]} if target else set()
            for ci in gi["compute_instances"]:
                if _key(ci) not in keep:
                    self._attempt(
                        problems, self.apply, {"op": "destroy_ci", "gi": gi["id"], "ci": ci["id"]}
                    )
            if target is None:
                self._attempt(problems, self.apply, {"op": "destroy_gi", "gi": gi["id"]})
        # 2. The mode.
        modes = self._modes()
        if modes is not None and modes[0] != saved["current"]:
            self._attempt(problems, self._set_mode, saved["current"])
            modes = self._modes()
        # 3. Put back what was there, at the same placements.
        if want_on and modes is not None and modes[0] == enable:
            try:
                present = {_key(gi): gi for gi in self.snapshot()["gpu_instances"]}
            except OpFailed as exc:
                return [*problems, f"reading the layout: {exc}"]
            for gi in snapshot["gpu_instances"]:
                self._attempt(problems, self._rebuild, gi, present.get(_key(gi)))
        # 4. A pending mode the card had (Ampere, before a reset).
        modes = self._modes()
        if modes is not None and modes[1] != saved["pending"]:
            try:
                self._set_mode(saved["pending"])
            except ResetPending:
                pass  # pending again, as it was
            except OpFailed as exc:
                problems.append(f"pending MIG mode: {exc}")
        return problems

    def _attempt(self, problems: list[str], fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except (OpFailed, ResetPending) as exc:
            problems.append(str(exc))

    def _rebuild(self, saved: dict[str, Any], present: dict[str, Any] | None) -> None:
        nvml = self._nvml
        if present is None:
            placement = nvml.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = saved["start"], saved["size"]
            gi = self._call(
                f"re-creating {_where(saved)}",
                nvml.nvmlDeviceCreateGpuInstanceWithPlacement,
                self._h,
                int(saved["profile_id"]),
                ctypes.byref(placement),
            )
            existing: set[tuple[int, int]] = set()
        else:
            gi = self._gi_handle(int(present["id"]))
            existing = {_key(ci) for ci in present["compute_instances"]}
        for ci in saved["compute_instances"]:
            if _key(ci) not in existing:
                self._create_ci_at(gi, ci)

    def _create_ci_at(self, gi: Any, ci: dict[str, Any]) -> None:
        nvml = self._nvml
        with_placement = getattr(nvml, "nvmlGpuInstanceCreateComputeInstanceWithPlacement", None)
        struct = getattr(nvml, "c_nvmlComputeInstancePlacement_t", None)
        what = f"re-creating compute instance {ci['profile']}@{ci['start']}"
        if with_placement is None or struct is None:
            self._call(what, nvml.nvmlGpuInstanceCreateComputeInstance, gi, int(ci["profile_id"]))
            return
        placement = struct()
        placement.start, placement.size = ci["start"], ci["size"]
        self._call(what, with_placement, gi, int(ci["profile_id"]), ctypes.byref(placement))

    def differences(self, snapshot: dict[str, Any]) -> list[str]:
        now = self.snapshot()
        out = []
        before, after = snapshot.get("mig"), now.get("mig")
        if (before or {}).get("current") != (after or {}).get("current"):
            out.append(
                f"MIG is {_mode_word((after or {}).get('current', 0))}, "
                f"was {_mode_word((before or {}).get('current', 0))}"
            )
        elif (before or {}).get("pending") != (after or {}).get("pending"):
            out.append(f"MIG pending mode is {_mode_word((after or {}).get('pending', 0))}")
        had = {_key(gi): gi for gi in snapshot["gpu_instances"]}
        has = {_key(gi): gi for gi in now["gpu_instances"]}
        out += [f"{_where(gi)} is missing" for key, gi in had.items() if key not in has]
        out += [f"{_where(gi)} was not there" for key, gi in has.items() if key not in had]
        for key, gi in had.items():
            if key in has and sorted(map(_key, gi["compute_instances"])) != sorted(
                map(_key, has[key]["compute_instances"])
            ):
                out.append(f"{_where(gi)} has other compute instances")
        return out
