"""AMD Instinct partitions through amdsmi, SR-IOV VFs through PCI sysfs.

One card is addressed by its physical function's BDF: a compute-partition change multiplies
or merges the card's logical GPUs (and their handles), so a handle is looked up again by BDF
before each call. Memory-partition changes reload the driver for the whole xGMI hive; the sim
and the hardware refuse them while any card of the hive is busy.

A VF count change removes every VF on the way through 0: before one, the card's VFs are read
from PCI sysfs (gpupoolctl.agent.sriov) and one held by a VM or a host driver refuses the card
like a running process does.

Snapshot shape: {"compute": "SPX", "memory": "NPS1", "sriov": null | <num_vfs>,
                 "peers": {"<bdf>": ["SPX", "NPS1"], ...}}
`peers` are the node's other AMD cards: a memory-partition change (or its undoing) moves every
card of the hive and may move their compute partitions with it, so a rollback puts them back
too.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import Any

from gpupoolctl.agent import sriov
from gpupoolctl.agent.drivers.amdsmi import (
    Sysfs,
    UnreadableProcess,
    _describe,
    _number,
    physical_bdf,
    process_entries,
)
from gpupoolctl.agent.partition.base import OpFailed


def _blank(value: Any) -> str | None:
    return None if value in (None, "", "N/A") else str(value)


class AmdCard:
    vendor = "amd"

    def __init__(self, lib: Any, sysfs: Sysfs, bdf: str, index: int, uuid: str) -> None:
        self._lib = lib
        self._sysfs = sysfs
        self.bdf = physical_bdf(bdf)
        self.index = index
        self.uuid = uuid

    # --- plumbing -------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # amdsmi raises its own exception family
            raise OpFailed(f"{what}: {_describe(exc)}") from None

    def _handle(self) -> Any:
        """The card's first logical GPU, looked up afresh (partition changes renew handles)."""
        lib = self._lib
        try:
            return lib.amdsmi_get_processor_handle_from_bdf(self.bdf)
        except Exception:
            # After a driver reload the library may need initialising again.
            self._call("re-initialising amdsmi", lib.amdsmi_shut_down)
            self._call("re-initialising amdsmi", lib.amdsmi_init, lib.AmdSmiInitFlags.INIT_AMD_GPUS)
            return self._call(
                f"finding the card at {self.bdf}",
                lib.amdsmi_get_processor_handle_from_bdf,
                self.bdf,
            )

    def _logical_handles(self) -> list[Any]:
        lib = self._lib
        out = []
        for handle in self._call("listing GPUs", lib.amdsmi_get_processor_handles):
            bdf = self._call("reading a BDF", lib.amdsmi_get_gpu_device_bdf, handle)
            if isinstance(bdf, str) and physical_bdf(bdf).lower() == self.bdf.lower():
                out.append(handle)
        return out

    def _sriov_path(self) -> str:
        return f"/sys/bus/pci/devices/{self.bdf}/sriov_numvfs"

    def _num_vfs(self) -> int | None:
        try:
            return int(self._sysfs.read_text(self._sriov_path()).strip())
        except (OSError, ValueError):
            return None  # no SR-IOV capability (or no PF driver support) on this card

    def _pci_root(self) -> str:
        # The simulator writes its cards' PCI sysfs out as files and says where; a node has
        # its own at "/". Either way sriov.py reads it the same way.
        simulated = getattr(self._lib, "gpupool_sim_pci_root", None)
        return str(simulated()) if callable(simulated) else "/"

    # --- reading --------------------------------------------------------------------------

    def _modes(self, handle: Any) -> tuple[str | None, str | None]:
        lib = self._lib
        compute = self._call(
            "reading the compute partition", lib.amdsmi_get_gpu_compute_partition, handle
        )
        memory = self._call(
            "reading the memory partition", lib.amdsmi_get_gpu_memory_partition, handle
        )
        return _blank(compute), _blank(memory)

    def _peers(self) -> dict[str, list[str | None]]:
        """(compute, memory) of the node's other cards, by physical BDF."""
        lib = self._lib
        out: dict[str, list[str | None]] = {}
        for handle in self._call("listing GPUs", lib.amdsmi_get_processor_handles):
            bdf = physical_bdf(
                str(self._call("reading a BDF", lib.amdsmi_get_gpu_device_bdf, handle))
            )
            if bdf.lower() != self.bdf.lower() and bdf not in out:
                out[bdf] = list(self._modes(handle))
        return out

    def snapshot(self) -> dict[str, Any]:
        compute, memory = self._modes(self._handle())
        return {
            "compute": compute,
            "memory": memory,
            "sriov": self._num_vfs(),
            "peers": self._peers(),
        }

    def blockers(self, ops: list[dict[str, Any]]) -> list[str]:
        if not ops:
            return []
        return self._process_blockers() + self._vf_blockers(ops)

    def _vf_blockers(self, ops: list[dict[str, Any]]) -> list[str]:
        """VFs in use (by a VM, or a host driver) that a VF count change would remove: the
        kernel removes them all on the way through 0, and a guest has no process here."""
        counts = [int(op["count"]) for op in ops if op["op"] == "set_sriov_vfs"]
        if not counts:
            return []
        try:
            now = int(self._sysfs.read_text(self._sriov_path()).strip())
        except FileNotFoundError:
            return []  # no SR-IOV here, so no VFs (the op itself says so)
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return [f"cannot tell whether its VFs are in use: sriov_numvfs: {why}"]
        if now == 0 or all(count == now for count in counts):
            return []  # no VF exists, or none would be removed
        return sriov.blockers(self.bdf, now, self._pci_root())

    def _process_blockers(self) -> list[str]:
        out = []
        try:
            handles = self._logical_handles()
        except OpFailed as exc:
            return [str(exc)]
        for partition, handle in enumerate(handles):
            try:
                listed = process_entries(self._lib, handle)
            except Exception as exc:
                # Not knowing is not the same as idle: only --force goes past this.
                return [f"cannot list the card's processes: {_describe(exc)}"]
            where = f" on partition {partition}" if len(handles) > 1 else ""
            for entry in listed:
                # A listed process that cannot be described still runs there.
                if isinstance(entry, UnreadableProcess):
                    out.append(f"{entry}{where}")
                    continue
                pid = _number(entry.get("pid"))
                if pid is None:
                    out.append(f"a process with no readable pid{where}")
                    continue
                name = _blank(entry.get("name"))
                out.append(f"pid {pid}" + (f" ({name})" if name else "") + where)
        return out

    # --- changing -------------------------------------------------------------------------

    def apply(self, op: dict[str, Any]) -> None:
        kind = op["op"]
        if kind == "set_memory_partition":
            self._set_memory(str(op["mode"]))
        elif kind == "set_compute_partition":
            self._set_compute(str(op["mode"]))
        elif kind == "set_sriov_vfs":
            self._set_vfs(int(op["count"]))
        else:
            raise OpFailed(f"{kind} is not an AMD operation")

    def _set_memory(self, mode: str) -> None:
        enum = self._lib.AmdSmiMemoryPartitionType
        if mode not in enum.__members__ or mode == "UNKNOWN":
            raise OpFailed(f"unknown memory partition {mode!r}")
        self._call(
            f"setting memory partition {mode}",
            self._lib.amdsmi_set_gpu_memory_partition,
            self._handle(),
            enum[mode],
        )

    def _set_compute(self, mode: str) -> None:
        enum = self._lib.AmdSmiComputePartitionType
        if mode not in enum.__members__ or mode == "INVALID":
            raise OpFailed(f"unknown compute partition {mode!r}")
        self._call(
            f"setting compute partition {mode}",
            self._lib.amdsmi_set_gpu_compute_partition,
            self._handle(),
            enum[mode],
        )

    def _set_vfs(self, count: int) -> None:
        current = self._num_vfs()
        if current is None:
            raise OpFailed(f"the card at {self.bdf} has no SR-IOV (no sriov_numvfs)")
        if count == current:
            return
        if count and current:
            # The kernel answers EBUSY; say what to do instead.
            raise OpFailed(f"{current} VFs are enabled: set 0 first, then {count}")
        try:
            self._sysfs.write_text(self._sriov_path(), f"{count}\n")
        except OSError as exc:
            name = errno.errorcode.get(exc.errno or 0, "error")
            raise OpFailed(f"writing {count} to sriov_numvfs: {name} ({exc.strerror})") from None
        now = self._num_vfs()
        if now != count:  # the PF driver may enable fewer than asked
            raise OpFailed(f"asked for {count} VFs, the driver enabled {now}")

    # --- restoring ------------------------------------------------------------------------

    def restore(self, snapshot: dict[str, Any]) -> list[str]:
        try:
            now = self.snapshot()
        except OpFailed as exc:
            return [f"reading the partition: {exc}"]
        problems: list[str] = []
        wanted_vfs = snapshot.get("sriov")
        # VFs hold the card: they go first and come back last.
        if now["sriov"] and now["sriov"] != wanted_vfs:
            self._attempt(problems, self._set_vfs, 0)
        if (now["compute"], now["memory"]) != (snapshot["compute"], snapshot["memory"]):
            self._restore_modes(problems, snapshot["compute"], snapshot["memory"])
        if wanted_vfs and self._num_vfs() != wanted_vfs:
            self._attempt(problems, self._set_vfs, 0)
            self._attempt(problems, self._set_vfs, int(wanted_vfs))
        # Cards our memory-partition change moved along (same hive). Our own card already
        # set the hive's memory mode back, so this is mostly their compute modes.
        try:
            peers = self._peers()
        except OpFailed as exc:
            return [*problems, f"reading the other cards: {exc}"]
        for bdf, (compute, memory) in (snapshot.get("peers") or {}).items():
            if bdf in peers and peers[bdf] != [compute, memory]:
                peer = AmdCard(self._lib, self._sysfs, bdf, -1, "")
                peer._restore_modes(problems, compute, memory)
        return problems

    def _restore_modes(self, problems: list[str], compute: str | None, memory: str | None) -> None:
        # Memory first works whenever the old pair was valid (the driver moves the compute
        # mode along to a compatible one); compute first is the fallback.
        for order in ((memory, compute), (compute, memory)):
            attempt: list[str] = []
            for mode in order:
                if mode is None:
                    continue
                setter = self._set_memory if mode.startswith("NPS") else self._set_compute
                self._attempt(attempt, setter, mode)
            try:
                state = self._modes(self._handle())
            except OpFailed as exc:
                problems.append(str(exc))
                return
            if state == (compute, memory):
                return
            last = attempt
        where = f"card {self.bdf}: " if self.index < 0 else ""
        problems.extend(f"{where}{p}" for p in (last or [f"partition is {state[0]}/{state[1]}"]))

    def _attempt(self, problems: list[str], fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except OpFailed as exc:
            problems.append(str(exc))

    def differences(self, snapshot: dict[str, Any]) -> list[str]:
        """Differences from `snapshot`, including the other cards when it lists them."""
        now = self.snapshot()
        labels = {"compute": "compute partition", "memory": "memory partition", "sriov": "VFs"}
        out = [
            f"{labels[key]} is {now[key]}, was {snapshot.get(key)}"
            for key in ("compute", "memory", "sriov")
            if now[key] != snapshot.get(key)
        ]
        for bdf, modes in (snapshot.get("peers") or {}).items():
            if now["peers"].get(bdf, modes) != modes:
                out.append(
                    f"card {bdf} is {'/'.join(map(str, now['peers'][bdf]))}, was "
                    f"{'/'.join(map(str, modes))}"
                )
        return out
