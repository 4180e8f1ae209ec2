"""What the real-GPU checks compare, as pure functions of recorded text and agent facts.

The hardware suite (tests/hardware) runs these on a GPU node against what nvidia-smi / amd-smi
print there; tests/unit/test_hardware_compare.py runs them here against recorded output, so the
comparison itself is tested before any GPU is at hand.

Standard library only, plus gpupoolctl.hw.catalog (stdlib too): a GPU node has python3,
pynvml, PyTorch, pyyaml and pytest, nothing of the workstation's.

A difference is a plain dict (JSON as it is):
    {"gpu": "GPU 3 0000:5d:00.0", "index": 3, "bus": "0000:5d:00.0", "field": "uuid",
     "agent": ..., "reference": ..., "source": "nvidia-smi -q -x", "note": ""}
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from typing import Any

Diff = dict[str, Any]

# Memory used moves between two reads (the driver, other processes); this much is not a finding.
USED_TOLERANCE_MIB = 256
# Datasheet dense FP16/BF16 tensor peaks (TFLOP/s), by the name the driver reports. Printed
# beside the matmul rate and used for a loose plausibility bound only, never for a pass mark.
DATASHEET_PEAK_TFLOPS: dict[str, float] = {
    "NVIDIA H100 80GB HBM3": 989.4,
    "NVIDIA H100 PCIe": 756.5,
    "NVIDIA H100 NVL": 835.5,
    "NVIDIA H200": 989.4,
    "NVIDIA H200 NVL": 835.5,
    "NVIDIA GH200 480GB": 989.4,
    "NVIDIA B200": 2250.0,
    "NVIDIA A100-SXM4-40GB": 312.0,
    "NVIDIA A100-SXM4-80GB": 312.0,
    "NVIDIA A100-PCIE-40GB": 312.0,
    "NVIDIA A100 80GB PCIe": 312.0,
    "NVIDIA A30": 165.0,
    "NVIDIA L40S": 362.05,
    "AMD Instinct MI300X": 1307.4,
    "AMD Instinct MI325X": 1307.4,
    "AMD Instinct MI250X": 383.0,
    "AMD Instinct MI210": 181.0,
}
# A rate above the datasheet peak is a measuring error; far below it, a broken path.
PLAUSIBLE_FRACTION = (0.05, 1.10)

_NA = {"", "n/a", "[n/a]", "none", "not supported", "[not supported]", "unknown error"}


# -- normalizing ---------------------------------------------------------------------------------

_BUS = re.compile(
    r"(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<device>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])"
)


def bus_key(raw: Any) -> str:
    """A PCI address in one form for comparing: lower case, the domain cut to its last 4 digits
    (`00000000:2A:00.0`, `0000:2a:00.0` and `2a:00.0` are all `0000:2a:00.0`). The project may
    change the form it reports; the comparison must not care. Not an address: as written."""
    text = "" if raw is None else str(raw).strip()
    match = _BUS.fullmatch(text)
    if match is None:
        return text.lower()
    domain = int(match["domain"] or "0", 16)
    return (
        f"{domain:04x}:{int(match['bus'], 16):02x}:{int(match['device'], 16):02x}."
        f"{match['function']}"
    )


def uuid_key(raw: Any) -> str:
    """A GPU/MIG uuid's hex digits only: `GPU-5d2a...`, `5d2a...` and CUDA's own spelling agree."""
    text = "" if raw is None else str(raw).strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text.replace("-", "")


def device_id_key(raw: Any) -> int | None:
    """`0x233010DE`, `233010DE` -> 0x233010DE; None when absent."""
    text = "" if raw is None else str(raw).strip()
    if text.lower() in _NA:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


def _text(raw: str | None) -> str | None:
    if raw is None:
        return None
    text = raw.strip()
    return None if text.lower() in _NA else text


def number(raw: str | None) -> float | None:
    """The leading number of `81559 MiB`, `69.70 W`, `32 C`; None for N/A."""
    text = _text(raw)
    if text is None:
        return None
    match = re.match(r"-?\d+(?:\.\d+)?", text)
    return float(match.group(0)) if match else None


def _int(raw: str | None) -> int | None:
    value = number(raw)
    return None if value is None else int(value)


def mode(raw: str | None) -> str | None:
    """`Enabled`/`Disabled` -> `enabled`/`disabled`; N/A -> None."""
    text = _text(raw)
    return None if text is None else text.lower()


# -- nvidia-smi -q -x ----------------------------------------------------------------------------


def _find(element: ET.Element, path: str) -> str | None:
    found = element.find(path)
    return None if found is None else (found.text or "")


def parse_nvidia_smi_xml(text: str) -> dict[str, Any]:
    """`nvidia-smi -q -x` -> {"driver_version", "cuda_version", "gpus": [...]}, GPUs in the
    order nvidia-smi lists them (its index order). Only fields the checks use, plus the health
    subtrees flattened as read."""
    root = ET.fromstring(text)
    gpus = []
    for position, gpu in enumerate(root.findall("gpu")):
        mig_devices = []
        for device in gpu.findall("mig_devices/mig_device"):
            mig_devices.append(
                {
                    "index": _int(_find(device, "index")),
                    "gi_id": _int(_find(device, "gpu_instance_id")),
                    "ci_id": _int(_find(device, "compute_instance_id")),
                    "uuid": _text(_find(device, "uuid")),
                    "sm_count": _int(
                        _find(device, "device_attributes/shared/multiprocessor_count")
                    ),
                    "memory_total_mib": _int(_find(device, "fb_memory_usage/total")),
                    "memory_used_mib": _int(_find(device, "fb_memory_usage/used")),
                }
            )
        processes = []
        for proc in gpu.findall("processes/process_info"):
            processes.append(
                {
                    "pid": _int(_find(proc, "pid")),
                    "type": _text(_find(proc, "type")),
                    "name": _text(_find(proc, "process_name")),
                    "used_memory_mib": _int(_find(proc, "used_memory")),
                    "gi_id": _int(_find(proc, "gpu_instance_id")),
                    "ci_id": _int(_find(proc, "compute_instance_id")),
                }
            )
        power = None
        for path in (
            "gpu_power_readings/instant_power_draw",
            "gpu_power_readings/power_draw",
            "power_readings/instant_power_draw",
            "power_readings/power_draw",
            "gpu_power_readings/average_power_draw",
        ):
            power = number(_find(gpu, path))
            if power is not None:
                break
        gpus.append(
            {
                "position": position,
                "minor_number": _int(_find(gpu, "minor_number")),
                "name": _text(_find(gpu, "product_name")),
                "uuid": _text(_find(gpu, "uuid")),
                "pci_bus_id": _text(_find(gpu, "pci/pci_bus_id")) or gpu.get("id"),
                "pci_device_id": _text(_find(gpu, "pci/pci_device_id")),
                "memory_total_mib": _int(_find(gpu, "fb_memory_usage/total")),
                "memory_reserved_mib": _int(_find(gpu, "fb_memory_usage/reserved")),
                "memory_used_mib": _int(_find(gpu, "fb_memory_usage/used")),
                "mig_current": mode(_find(gpu, "mig_mode/current_mig")),
                "mig_pending": mode(_find(gpu, "mig_mode/pending_mig")),
                "mig_devices": mig_devices,
                "processes": processes,
                "temperature_c": number(_find(gpu, "temperature/gpu_temp")),
                "power_draw_w": power,
                "health": xml_health(gpu),
            }
        )
    return {
        "driver_version": _text(_find(root, "driver_version")),
        "cuda_version": _text(_find(root, "cuda_version")),
        "gpus": gpus,
    }


# The subtrees the faults issue reads, under the names of R470..R575 (throttle reasons were
# renamed clocks_event_reasons in R535).
HEALTH_TREES = (
    "ecc_mode",
    "ecc_errors",
    "retired_pages",
    "remapped_rows",
    "clocks_event_reasons",
    "clocks_throttle_reasons",
    "temperature/gpu_temp",
    "gpu_power_readings/instant_power_draw",
)


def _flatten(element: ET.Element, prefix: str, out: dict[str, str]) -> None:
    children = list(element)
    if not children:
        out[prefix] = (element.text or "").strip()
        return
    for child in children:
        _flatten(child, f"{prefix}/{child.tag}", out)


def xml_health(gpu: ET.Element) -> dict[str, str]:
    """The health subtrees of one <gpu>, flattened to {"ecc_errors/volatile/dram_uncorrectable":
    "0", ...} exactly as printed."""
    out: dict[str, str] = {}
    for path in HEALTH_TREES:
        found = gpu.find(path)
        if found is not None:
            _flatten(found, path, out)
    return out


def active_event_reasons(health: dict[str, str]) -> list[str]:
    """Which clock event (throttle) reasons nvidia-smi shows as Active."""
    out = []
    for key, value in health.items():
        if key.startswith(("clocks_event_reasons/", "clocks_throttle_reasons/")) and (
            value.strip().lower() == "active"
        ):
            name = key.rsplit("/", 1)[1]
            for prefix in ("clocks_event_reason_", "clocks_throttle_reason_"):
                name = name.removeprefix(prefix)
            out.append(name)
    return sorted(out)


# NVML's bits (nvml.h nvmlClocksEventReason*), for decoding nvmlDeviceGetCurrentClocksEventReasons.
EVENT_REASON_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clocks_setting",
}


def decode_event_reasons(mask: int) -> list[str]:
    names = [name for bit, name in EVENT_REASON_BITS.items() if mask & bit]
    rest = mask & ~sum(EVENT_REASON_BITS)
    if rest:
        names.append(f"unknown_0x{rest:x}")
    return sorted(names)


# -- other nvidia-smi texts ----------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_topo(text: str) -> dict[str, Any]:
    """`nvidia-smi topo -m` -> {"labels": ["GPU0", ...], "matrix": [[...]], "numa": [int|None]}
    (GPU rows only; NIC rows and the legend are left out). Written apart from the smi driver's
    own parser on purpose: the check must not share the code it checks."""
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if re.search(r"\bGPU0\b", line)), None)
    if header_at is None:
        raise ValueError("nvidia-smi topo -m: no header row with GPU0")
    header = [cell.strip() for cell in lines[header_at].split("\t")]
    columns = {cell: i for i, cell in enumerate(header) if cell}
    gpu_columns = [i for i, cell in enumerate(header) if re.fullmatch(r"GPU\d+", cell)]
    numa_at = columns.get("NUMA Affinity")
    labels, matrix, numa = [], [], []
    for line in lines[header_at + 1 :]:
        cells = [cell.strip() for cell in line.split("\t")]
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            if labels:
                break
            continue
        labels.append(cells[0])
        matrix.append([cells[i] if i < len(cells) else "" for i in gpu_columns])
        raw = cells[numa_at] if numa_at is not None and numa_at < len(cells) else ""
        first = re.match(r"\d+", raw)
        numa.append(int(first.group(0)) if first else None)
    return {"labels": labels, "matrix": matrix, "numa": numa}


_LGIP_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<free>\d+)/(?P<total>\d+)\s+"
    r"(?P<gib>\d+(?:\.\d+)?)\s+(?P<p2p>\S+)\s+(?P<sm>\d+)\s+(?P<dec>\d+)\s+(?P<enc>\d+)\s*\|"
)
_LGIP_MORE = re.compile(r"^\|\s+(?P<ce>\d+)\s+(?P<jpeg>\d+)\s+(?P<ofa>\d+)\s*\|$")


def parse_lgip(text: str) -> dict[int, list[dict[str, Any]]]:
    """`nvidia-smi mig -lgip` -> {gpu index: [profile rows]} (MIG-enabled GPUs only)."""
    out: dict[int, list[dict[str, Any]]] = {}
    last: dict[str, Any] | None = None
    for line in text.splitlines():
        row = _LGIP_ROW.match(line.strip())
        if row:
            last = {
                "name": row["name"],
                "id": int(row["id"]),
                "free": int(row["free"]),
                "max_instances": int(row["total"]),
                "memory_gib": float(row["gib"]),
                "sm_count": int(row["sm"]),
            }
            out.setdefault(int(row["gpu"]), []).append(last)
            continue
        more = _LGIP_MORE.match(line.strip())
        if more and last is not None and "ce" not in last:
            last.update(ce=int(more["ce"]), jpeg=int(more["jpeg"]), ofa=int(more["ofa"]))
    return out


_LGIPP_ROW = re.compile(
    r"GPU\s+(?P<gpu>\d+)\s+Profile ID\s+(?P<id>\d+)\s+Placements?\s*:\s*"
    r"\{(?P<starts>[\d,\s]*)\}:(?P<size>\d+)"
)


def parse_lgipp(text: str) -> dict[int, dict[int, dict[str, Any]]]:
    """`nvidia-smi mig -lgipp` -> {gpu index: {profile id: {"placements", "size"}}}."""
    out: dict[int, dict[int, dict[str, Any]]] = {}
    for match in _LGIPP_ROW.finditer(text):
        starts = [int(s) for s in match["starts"].replace(" ", "").split(",") if s]
        out.setdefault(int(match["gpu"]), {})[int(match["id"])] = {
            "placements": starts,
            "size": int(match["size"]),
        }
    return out


def smi_profile_table(
    lgip: list[dict[str, Any]], lgipp: dict[int, dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """One GPU's -lgip rows joined with its -lgipp placements, in the shape of the agent's
    `mig.profiles` (memory in GiB as printed, not MiB)."""
    out = []
    for row in lgip:
        placed = (lgipp or {}).get(row["id"], {})
        out.append(
            {
                "id": row["id"],
                "name": row["name"],
                "memory_gib": row["memory_gib"],
                "sm_count": row["sm_count"],
                "max_instances": row["max_instances"],
                "placements": placed.get("placements"),
                "size": placed.get("size"),
            }
        )
    return out


def parse_bus_compute_cap(text: str) -> dict[str, str]:
    """`nvidia-smi --query-gpu=pci.bus_id,compute_cap --format=csv,noheader` -> {bus: "9.0"}."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 2 and _text(cells[1]) is not None:
            out[bus_key(cells[0])] = cells[1]
    return out


# -- differences ---------------------------------------------------------------------------------


def _where(gpu: dict[str, Any]) -> tuple[str, int | None, str]:
    bus = bus_key(gpu.get("pci_bus_id"))
    index = gpu.get("index")
    return f"GPU {index} {bus}", index, bus


def _diff(
    gpu: dict[str, Any], field: str, agent: Any, reference: Any, source: str, note: str = ""
) -> Diff:
    label, index, bus = _where(gpu)
    return {
        "gpu": label,
        "index": index,
        "bus": bus,
        "field": field,
        "agent": agent,
        "reference": reference,
        "source": source,
        "note": note,
    }


def _node_diff(field: str, agent: Any, reference: Any, source: str, note: str = "") -> Diff:
    return {
        "gpu": "node",
        "index": None,
        "bus": "",
        "field": field,
        "agent": agent,
        "reference": reference,
        "source": source,
        "note": note,
    }


def pair_gpus(
    agent_gpus: list[dict[str, Any]], reference: list[dict[str, Any]]
) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Pair GPUs by PCI address, else by uuid: (pairs, agent-only, reference-only). Pairing by
    address lets a wrong uuid show as one wrong field rather than a missing and an extra GPU."""
    left = list(agent_gpus)
    right = list(reference)
    pairs = []
    for key in (lambda g: bus_key(g.get("pci_bus_id")), lambda g: uuid_key(g.get("uuid"))):
        index = {}
        for g in right:
            if key(g):
                index.setdefault(key(g), g)
        still = []
        for g in left:
            match = index.get(key(g)) if key(g) else None
            if match is not None and match in right:
                pairs.append((g, match))
                right.remove(match)
            else:
                still.append(g)
        left = still
    pairs.sort(key=lambda p: (p[0].get("index") is None, p[0].get("index") or 0))
    return pairs, left, right


def bus_form_diffs(facts: dict[str, Any], vendor: str, source: str) -> list[Diff]:
    """Every GPU of `vendor` whose bus id is an address not written in the sysfs form the drivers
    promise (`0000:18:00.0`: gpupoolctl/hw/pci.py). The comparisons above normalize both sides,
    so only this says whether the facts themselves carry that form."""
    out = []
    for gpu in facts.get("gpus", []):
        raw = gpu.get("pci_bus_id")
        if gpu.get("vendor") != vendor or not isinstance(raw, str) or not _BUS.fullmatch(raw):
            continue
        if raw != bus_key(raw):
            out.append(_diff(gpu, "pci_bus_id form", raw, bus_key(raw), source, "sysfs form"))
    return out


def _same_text(a: Any, b: Any) -> bool:
    return (a or None) == (b or None)


def compare_facts_to_smi(
    facts: dict[str, Any],
    snapshots: dict[str, Any] | list[dict[str, Any]],
    extras: Iterable[dict[str, Any]] = (),
    used_tolerance_mib: int = USED_TOLERANCE_MIB,
    source: str = "nvidia-smi -q -x",
    mig_instances: bool = True,
) -> list[Diff]:
    """The agent's NVIDIA facts against parsed `nvidia-smi -q -x` output.

    `snapshots`: one parse, or several taken around the agent's run (before, after): static
    fields are read from the first; memory used may lie anywhere between the snapshots' values
    (± tolerance); a process must be in the facts if every snapshot shows it, and may be if any
    does. `extras`: more references for fields the XML lacks, each
    {"bus", "field" ("compute_capability" | "compute_units"), "value", "source"}.
    `mig_instances=False` leaves MIG instances out (the smi driver does not report them, by
    design: see gpupoolctl/agent/drivers/smi_nvidia.py).
    """
    shots = [snapshots] if isinstance(snapshots, dict) else list(snapshots)
    if not shots:
        raise ValueError("no nvidia-smi snapshot to compare against")
    first = shots[0]
    agent_gpus = [g for g in facts.get("gpus", []) if g.get("vendor") == "nvidia"]
    diffs: list[Diff] = []
    pairs, agent_only, smi_only = pair_gpus(agent_gpus, first["gpus"])
    for gpu in agent_only:
        diffs.append(_diff(gpu, "present", gpu.get("uuid"), None, source, "not in nvidia-smi"))
    for ref in smi_only:
        diffs.append(
            _node_diff(
                "present", None, f"{ref['uuid']} {ref['pci_bus_id']}", source, "not in facts"
            )
        )
    by_uuid = [{uuid_key(g["uuid"]): g for g in shot["gpus"]} for shot in shots]
    for gpu, ref in pairs:
        refs = [index.get(uuid_key(ref["uuid"])) or ref for index in by_uuid]
        diffs.extend(_compare_one(gpu, ref, refs, used_tolerance_mib, source, mig_instances))
    extra_by_bus: dict[str, list[dict[str, Any]]] = {}
    for extra in extras:
        extra_by_bus.setdefault(bus_key(extra["bus"]), []).append(extra)
    for gpu in agent_gpus:
        for extra in extra_by_bus.get(bus_key(gpu.get("pci_bus_id")), []):
            value = gpu.get(extra["field"])
            if extra["value"] is not None and str(value) != str(extra["value"]):
                diffs.append(_diff(gpu, extra["field"], value, extra["value"], extra["source"]))
    return diffs


def _compare_one(
    gpu: dict[str, Any],
    ref: dict[str, Any],
    refs: list[dict[str, Any]],
    tolerance: int,
    source: str,
    mig_instances: bool = True,
) -> list[Diff]:
    out: list[Diff] = []

    def check(field: str, agent: Any, reference: Any, note: str = "") -> None:
        out.append(_diff(gpu, field, agent, reference, source, note))

    if not _same_text(gpu.get("model"), ref["name"]):
        check("model", gpu.get("model"), ref["name"])
    if uuid_key(gpu.get("uuid")) != uuid_key(ref["uuid"]):
        check("uuid", gpu.get("uuid"), ref["uuid"])
    if bus_key(gpu.get("pci_bus_id")) != bus_key(ref["pci_bus_id"]):
        check("pci_bus_id", gpu.get("pci_bus_id"), ref["pci_bus_id"], "compared normalized")
    if device_id_key(gpu.get("pci_device_id")) != device_id_key(ref["pci_device_id"]):
        check("pci_device_id", gpu.get("pci_device_id"), ref["pci_device_id"])
    if (
        ref["memory_total_mib"] is not None
        and gpu.get("memory_total_mib") != ref["memory_total_mib"]
    ):
        check("memory_total_mib", gpu.get("memory_total_mib"), ref["memory_total_mib"])
    out.extend(_compare_used(gpu, refs, tolerance, source))
    mig = gpu.get("mig") or {}
    agent_mode = None if mig.get("mode") in (None, "n/a") else mig.get("mode")
    if agent_mode != ref["mig_current"]:
        check("mig.mode", mig.get("mode"), ref["mig_current"])
    if ref["mig_current"] is not None and mig.get("pending") != ref["mig_pending"]:
        check("mig.pending", mig.get("pending"), ref["mig_pending"])
    if ref["mig_current"] == "enabled" and mig_instances:
        out.extend(_compare_mig_devices(gpu, ref, source))
    out.extend(_compare_processes(gpu, refs, tolerance, source))
    return out


def _compare_used(
    gpu: dict[str, Any], refs: list[dict[str, Any]], tolerance: int, source: str
) -> list[Diff]:
    agent = gpu.get("memory_used_mib")
    values = [r["memory_used_mib"] for r in refs if r["memory_used_mib"] is not None]
    if not values or agent is None:
        return []  # nvidia-smi shows N/A (the parent of a MIG GPU on newer drivers)
    low, high = min(values), max(values)
    if low - tolerance <= agent <= high + tolerance:
        return []
    # NVML's v1 memory info counts the driver's reserved memory as used; nvidia-smi does not.
    reserved = [r["memory_reserved_mib"] for r in refs if r["memory_reserved_mib"] is not None]
    if reserved and low + min(reserved) - tolerance <= agent <= high + max(reserved) + tolerance:
        return []
    shown = f"{low}" if low == high else f"{low}..{high}"
    return [
        _diff(
            gpu,
            "memory_used_mib",
            agent,
            shown,
            source,
            f"tolerance {tolerance} MiB, also tried used + reserved",
        )
    ]


def _compare_mig_devices(gpu: dict[str, Any], ref: dict[str, Any], source: str) -> list[Diff]:
    out: list[Diff] = []
    instances = (gpu.get("mig") or {}).get("instances") or []
    agent_cis = {}
    for gi in instances:
        for ci in gi.get("compute_instances") or []:
            agent_cis[(gi["gi_id"], ci["ci_id"])] = (gi, ci)
    smi_cis = {(d["gi_id"], d["ci_id"]): d for d in ref["mig_devices"]}
    if set(agent_cis) != set(smi_cis):
        out.append(
            _diff(
                gpu,
                "mig.instances",
                sorted(agent_cis),
                sorted(smi_cis),
                source,
                "(gpu instance id, compute instance id) pairs",
            )
        )
    for key in sorted(set(agent_cis) & set(smi_cis)):
        gi, ci = agent_cis[key]
        device = smi_cis[key]
        where = f"mig.gi{key[0]}.ci{key[1]}"
        full_ci = len(gi.get("compute_instances") or []) == 1 and ci.get("profile") == gi.get(
            "profile"
        )
        if full_ci and device["sm_count"] is not None and gi.get("sm_count") != device["sm_count"]:
            out.append(
                _diff(gpu, f"{where}.sm_count", gi.get("sm_count"), device["sm_count"], source)
            )
        total = device["memory_total_mib"]
        if total is not None and gi.get("memory_mib") != total:
            out.append(_diff(gpu, f"{where}.memory_mib", gi.get("memory_mib"), total, source))
        if device["uuid"] and uuid_key(ci.get("uuid")) != uuid_key(device["uuid"]):
            out.append(_diff(gpu, f"{where}.uuid", ci.get("uuid"), device["uuid"], source))
    return out


def _basename(name: Any) -> str | None:
    if not name:
        return None
    return str(name).split()[0].rsplit("/", 1)[-1] or None


def _compare_processes(
    gpu: dict[str, Any], refs: list[dict[str, Any]], tolerance: int, source: str
) -> list[Diff]:
    """Compute processes only: the agent lists what NVML's compute lister returns; nvidia-smi
    also shows graphics ("G") processes."""
    out: list[Diff] = []
    agent = {p["pid"]: p for p in gpu.get("processes") or []}
    shots = [
        {p["pid"]: p for p in r["processes"] if p["pid"] is not None and "C" in (p["type"] or "C")}
        for r in refs
    ]
    required = set.intersection(*(set(s) for s in shots)) if shots else set()
    allowed = set.union(*(set(s) for s in shots)) if shots else set()
    missing = sorted(required - set(agent))
    extra = sorted(set(agent) - allowed)
    if missing or extra:
        out.append(
            _diff(
                gpu,
                "processes",
                sorted(agent),
                sorted(required),
                source,
                f"missing from facts {missing}, not in nvidia-smi {extra}",
            )
        )
    for pid in sorted(required & set(agent)):
        mine = agent[pid]
        theirs = [s[pid] for s in shots]
        used = [t["used_memory_mib"] for t in theirs if t["used_memory_mib"] is not None]
        if (
            used
            and mine.get("used_memory_mib") is not None
            and not (min(used) - tolerance <= mine["used_memory_mib"] <= max(used) + tolerance)
        ):
            out.append(
                _diff(
                    gpu, f"process {pid}.used_memory_mib", mine["used_memory_mib"], used[0], source
                )
            )
        name, ref_name = _basename(mine.get("name")), _basename(theirs[0]["name"])
        if name and ref_name and name != ref_name:
            out.append(
                _diff(gpu, f"process {pid}.name", mine.get("name"), theirs[0]["name"], source)
            )
        for field, ref_field in (("gpu_instance_id", "gi_id"), ("compute_instance_id", "ci_id")):
            if theirs[0][ref_field] is not None and mine.get(field) != theirs[0][ref_field]:
                out.append(
                    _diff(
                        gpu, f"process {pid}.{field}", mine.get(field), theirs[0][ref_field], source
                    )
                )
    return out


# -- two drivers ----------------------------------------------------------------------------------

# Fields both drivers of a vendor report (the NVIDIA smi driver has no MIG instances or profile
# table: its module docstring says so): exact, but memory used within the tolerance and
# bandwidth within 0.5 GB/s.
AGREE_FIELDS = (
    "model",
    "uuid",
    "pci_bus_id",
    "pci_device_id",
    "numa_node",
    "memory_total_mib",
    "memory_used_mib",
    "bandwidth_gbps",
    "bandwidth_class",
    "compute_units",
    "compute_capability",
    "gfx_target",
    "mig.mode",
    "mig.pending",
    "partition",
    "processes",
)


def _field(gpu: dict[str, Any], name: str) -> Any:
    if name == "mig.mode":
        return (gpu.get("mig") or {}).get("mode")
    if name == "mig.pending":
        return (gpu.get("mig") or {}).get("pending")
    if name == "processes":
        return sorted(p["pid"] for p in gpu.get("processes") or [])
    if name == "pci_bus_id":
        return bus_key(gpu.get("pci_bus_id"))
    if name == "uuid":
        return uuid_key(gpu.get("uuid"))
    if name == "pci_device_id":
        return device_id_key(gpu.get("pci_device_id"))
    return gpu.get(name)


def compare_drivers(
    a: dict[str, Any],
    b: dict[str, Any],
    used_tolerance_mib: int = USED_TOLERANCE_MIB,
    vendor: str | None = None,
) -> list[Diff]:
    """Two facts answers of the same node (say nvml and smi) field by field; `agent` is a's
    value, `reference` b's, `source` names b's driver. The link matrices are compared too."""
    name_a = ",".join(sorted(set((a.get("drivers") or {}).values()))) or "a"
    name_b = ",".join(sorted(set((b.get("drivers") or {}).values()))) or "b"
    source = f"{name_a} vs {name_b}"
    gpus_a = [g for g in a.get("gpus", []) if vendor is None or g.get("vendor") == vendor]
    gpus_b = [g for g in b.get("gpus", []) if vendor is None or g.get("vendor") == vendor]
    pairs, only_a, only_b = pair_gpus(gpus_a, gpus_b)
    diffs = [_diff(g, "present", g.get("uuid"), None, source, f"only in {name_a}") for g in only_a]
    diffs += [_diff(g, "present", None, g.get("uuid"), source, f"only in {name_b}") for g in only_b]
    for x, y in pairs:
        for field in AGREE_FIELDS:
            left, right = _field(x, field), _field(y, field)
            if field == "memory_used_mib":
                if (
                    left is not None
                    and right is not None
                    and abs(left - right) > used_tolerance_mib
                ):
                    diffs.append(
                        _diff(x, field, left, right, source, f"tolerance {used_tolerance_mib} MiB")
                    )
                continue
            if field == "bandwidth_gbps":
                if (left is None) != (right is None) or (
                    left is not None and abs(left - right) > 0.5
                ):
                    diffs.append(_diff(x, field, left, right, source))
                continue
            if left != right:
                diffs.append(_diff(x, field, left, right, source))
    diffs.extend(_compare_matrices(a, b, pairs, source))
    return diffs


def _matrix_of(facts: dict[str, Any]) -> dict[tuple[str, str], str]:
    topology = facts.get("topology") or {}
    order = [uuid_key(u) for u in topology.get("gpus") or []]
    matrix = topology.get("matrix") or []
    out = {}
    for i, row in enumerate(matrix):
        for j, level in enumerate(row):
            if i < len(order) and j < len(order):
                out[(order[i], order[j])] = level
    return out


def _compare_matrices(
    a: dict[str, Any],
    b: dict[str, Any],
    pairs: list[tuple[dict[str, Any], dict[str, Any]]],
    source: str,
) -> list[Diff]:
    ma, mb = _matrix_of(a), _matrix_of(b)
    out = []
    for i, (x, y) in enumerate(pairs):
        for x2, y2 in pairs[i + 1 :]:
            left = ma.get((uuid_key(x["uuid"]), uuid_key(x2["uuid"])))
            right = mb.get((uuid_key(y["uuid"]), uuid_key(y2["uuid"])))
            if left != right:
                out.append(_diff(x, f"link to GPU {x2.get('index')}", left, right, source))
    return out


# -- topology ------------------------------------------------------------------------------------


def compare_topology(
    facts: dict[str, Any], topo: dict[str, Any], source: str = "nvidia-smi topo -m"
) -> list[Diff]:
    """The facts' link matrix and NUMA nodes against `nvidia-smi topo -m` (GPUn = nvidia-smi
    index n, which is the nvml driver's index and the smi driver's)."""
    gpus = [g for g in facts.get("gpus", []) if g.get("vendor") == "nvidia"]
    matrix = _matrix_of(facts)
    labels = topo["labels"]
    out: list[Diff] = []
    if len(labels) != len(gpus):
        out.append(_node_diff("topology.size", len(gpus), len(labels), source))
    row_of = {int(label[3:]): i for i, label in enumerate(labels)}
    for gpu in gpus:
        i = row_of.get(gpu.get("index"))
        if i is None:
            continue
        numa = topo["numa"][i]
        if numa is not None and gpu.get("numa_node") != numa:
            out.append(_diff(gpu, "numa_node", gpu.get("numa_node"), numa, source))
        for other in gpus:
            j = row_of.get(other.get("index"))
            if j is None or other.get("index") <= gpu.get("index"):
                continue
            mine = matrix.get((uuid_key(gpu["uuid"]), uuid_key(other["uuid"])))
            theirs = topo["matrix"][i][j]
            if mine != theirs:
                out.append(_diff(gpu, f"link to GPU {other.get('index')}", mine, theirs, source))
    return out


# -- MIG profile tables --------------------------------------------------------------------------


def catalog_table(model: Any) -> list[dict[str, Any]]:
    """A catalog model's GPU instance profiles in the shape of the agent's `mig.profiles`, with
    each row's `inferred` fields."""
    if model is None or model.mig is None:
        return []
    return [
        {
            "id": p.id,
            "name": p.name,
            "slices": p.compute_slices,
            "memory_mib": p.memory_mib,
            "sm_count": p.sm_count,
            "max_instances": p.max_instances,
            "placements": list(p.placement_starts),
            "size": p.placement_size,
            "inferred": list(p.inferred),
        }
        for p in model.mig.profiles
    ]


_PROFILE_FIELDS = (
    "name",
    "slices",
    "memory_mib",
    "sm_count",
    "max_instances",
    "placements",
    "size",
)


def compare_profile_tables(
    reported: list[dict[str, Any]],
    expected: list[dict[str, Any]],
    gpu: dict[str, Any],
    source: str,
) -> list[Diff]:
    """A driver's profile table (`reported`: the agent's mig.profiles, NVML read directly, or
    nvidia-smi -lgip/-lgipp) against `expected` (catalog_table). `agent` is the driver's value,
    `reference` the catalog's. A field the driver did not report (None: a name NVML gives only
    with MIG on, placements it refuses with MIG off) is left out, not counted as a difference;
    memory in GiB (-lgip) is compared at its printed precision."""
    out: list[Diff] = []
    mine = {p["id"]: p for p in reported}
    theirs = {p["id"]: p for p in expected}
    for pid in sorted(set(mine) - set(theirs)):
        out.append(
            _diff(gpu, f"profile {pid} ({mine[pid].get('name')})", "offered", None, source,
                  "not in the catalog")
        )  # fmt: skip
    for pid in sorted(set(theirs) - set(mine)):
        out.append(
            _diff(gpu, f"profile {pid} ({theirs[pid]['name']})", None, "in catalog", source,
                  "the driver does not offer it")
        )  # fmt: skip
    for pid in sorted(set(mine) & set(theirs)):
        got, want = mine[pid], theirs[pid]
        label = f"profile {pid} ({want['name']})"
        inferred = set(want.get("inferred") or ())
        for field in _PROFILE_FIELDS:
            value = got.get(field)
            if field == "name" and got.get("name_source") not in (None, "driver"):
                continue  # named from the catalog by the agent: nothing to compare
            if field == "memory_mib" and value is None and got.get("memory_gib") is not None:
                if abs(want["memory_mib"] / 1024 - got["memory_gib"]) > 0.006:
                    out.append(
                        _diff(gpu, f"{label}.memory_gib", got["memory_gib"],
                              round(want["memory_mib"] / 1024, 3), source,
                              _inferred_note("memory_mib", inferred))
                    )  # fmt: skip
                continue
            if value is None or (field == "placements" and value == []):
                continue
            if field == "name":
                value = str(value).removeprefix("MIG ")
            if value != want[field]:
                out.append(
                    _diff(gpu, f"{label}.{field}", value, want[field], source,
                          _inferred_note(field, inferred))
                )  # fmt: skip
    return out


def _inferred_note(field: str, inferred: set[str]) -> str:
    linked = {"placements": "placement_starts", "size": "placement_size"}.get(field, field)
    return "the catalog marks this inferred" if linked in inferred else ""


# -- AMD -----------------------------------------------------------------------------------------


def amd_entries(document: Any) -> list[dict[str, Any]]:
    if isinstance(document, dict):
        for key in ("gpu_data", "gpu_list"):
            if isinstance(document.get(key), list):
                return document[key]
    return document if isinstance(document, list) else []


def _amd_number(raw: Any) -> float | None:
    if isinstance(raw, dict):
        raw = raw.get("value")
    if isinstance(raw, bool) or raw is None:
        return None
    if isinstance(raw, int | float):
        return float(raw)
    return number(str(raw))


def _amd_mib(raw: Any) -> int | None:
    value = _amd_number(raw)
    if value is None:
        return None
    unit = (raw.get("unit") if isinstance(raw, dict) else "MB") or "MB"
    factor = {"B": 1 / 2**20, "KB": 1 / 1024, "MB": 1, "MIB": 1, "GB": 1024, "GIB": 1024}.get(
        str(unit).upper(), 1
    )
    return int(value * factor)


def _amd_text(raw: Any) -> str | None:
    return None if raw is None else _text(str(raw))


def parse_amd_smi(static: Any, metric: Any = None, listing: Any = None) -> list[dict[str, Any]]:
    """`amd-smi static --json`, `metric --json` and `list --json` (already json.loads'ed) ->
    one reference dict per GPU, in amd-smi's order. Written apart from the smi driver's own
    parser: the check must not share the code it checks."""
    metrics = {e.get("gpu"): e for e in amd_entries(metric)}
    listed = {e.get("gpu"): e for e in amd_entries(listing)}
    out = []
    for entry in amd_entries(static):
        gpu = entry.get("gpu")
        asic = entry.get("asic") or {}
        part = entry.get("partition") or {}
        usage = (metrics.get(gpu) or {}).get("mem_usage") or {}
        device = device_id_key(asic.get("device_id"))
        vendor = device_id_key(asic.get("vendor_id")) or 0x1002
        compute = part.get("accelerator_partition", part.get("compute_partition"))
        out.append(
            {
                "index": gpu,
                "name": _amd_text(asic.get("market_name")),
                "uuid": _amd_text((listed.get(gpu) or {}).get("uuid")),
                "pci_bus_id": _amd_text((entry.get("bus") or {}).get("bdf"))
                or _amd_text((listed.get(gpu) or {}).get("bdf")),
                "pci_device_id": None if device is None else f"0x{device << 16 | vendor:08X}",
                "memory_total_mib": _amd_mib(usage.get("total_vram"))
                or _amd_mib((entry.get("vram") or {}).get("size")),
                "memory_reserved_mib": None,
                "memory_used_mib": _amd_mib(usage.get("used_vram")),
                "compute_units": _amd_number(asic.get("num_compute_units")),
                "gfx_target": _amd_text(asic.get("target_graphics_version")),
                "compute_partition": (_amd_text(compute) or "").rstrip("*").upper() or None,
                "memory_partition": (_amd_text(part.get("memory_partition")) or "")
                .rstrip("*")
                .upper()
                or None,
            }
        )
    return out


def compare_amd_facts(
    facts: dict[str, Any],
    reference: list[dict[str, Any]],
    used_tolerance_mib: int = USED_TOLERANCE_MIB,
    source: str = "amd-smi static/metric/list --json",
) -> list[Diff]:
    """The agent's AMD facts against parse_amd_smi()."""
    gpus = [g for g in facts.get("gpus", []) if g.get("vendor") == "amd"]
    pairs, agent_only, smi_only = pair_gpus(gpus, reference)
    diffs = [_diff(g, "present", g.get("uuid"), None, source, "not in amd-smi") for g in agent_only]
    diffs += [
        _node_diff("present", None, f"{r['uuid']} {r['pci_bus_id']}", source, "not in facts")
        for r in smi_only
    ]
    for gpu, ref in pairs:

        def check(field: str, agent: Any, want: Any, gpu: dict[str, Any] = gpu) -> None:
            diffs.append(_diff(gpu, field, agent, want, source))

        if ref["name"] is not None and not _same_text(gpu.get("model"), ref["name"]):
            check("model", gpu.get("model"), ref["name"])
        if ref["uuid"] is not None and uuid_key(gpu.get("uuid")) != uuid_key(ref["uuid"]):
            check("uuid", gpu.get("uuid"), ref["uuid"])
        if bus_key(gpu.get("pci_bus_id")) != bus_key(ref["pci_bus_id"]):
            check("pci_bus_id", gpu.get("pci_bus_id"), ref["pci_bus_id"])
        if ref["pci_device_id"] and device_id_key(gpu.get("pci_device_id")) != device_id_key(
            ref["pci_device_id"]
        ):
            check("pci_device_id", gpu.get("pci_device_id"), ref["pci_device_id"])
        if (
            ref["memory_total_mib"] is not None
            and gpu.get("memory_total_mib") != ref["memory_total_mib"]
        ):
            check("memory_total_mib", gpu.get("memory_total_mib"), ref["memory_total_mib"])
        used = gpu.get("memory_used_mib")
        if (
            ref["memory_used_mib"] is not None
            and used is not None
            and abs(used - ref["memory_used_mib"]) > used_tolerance_mib
        ):
            check("memory_used_mib", used, ref["memory_used_mib"])
        if ref["compute_units"] is not None and gpu.get("compute_units") != ref["compute_units"]:
            check("compute_units", gpu.get("compute_units"), int(ref["compute_units"]))
        if ref["gfx_target"] is not None and gpu.get("gfx_target") != ref["gfx_target"]:
            check("gfx_target", gpu.get("gfx_target"), ref["gfx_target"])
        partition = gpu.get("partition") or {}
        for field, key in (("compute", "compute_partition"), ("memory", "memory_partition")):
            if ref[key] is not None and partition.get(field) != ref[key]:
                check(f"partition.{field}", partition.get(field), ref[key])
    return diffs


def amd_link_types(topology: Any) -> dict[tuple[int, int], str]:
    """`amd-smi topology --json` -> {(gpu, peer): "XGMI" | "PCIE" | ...} (both shapes)."""
    out: dict[tuple[int, int], str] = {}
    for entry in amd_entries(topology):
        gpu = entry.get("gpu")
        if isinstance(entry.get("links"), list):
            for link in entry["links"]:
                if isinstance(link, dict) and _amd_text(link.get("link_type")):
                    out[(gpu, link.get("gpu"))] = str(link["link_type"]).upper()
        elif isinstance(entry.get("link_type"), dict):
            for key, kind in entry["link_type"].items():
                match = re.fullmatch(r"gpu_(\d+)", str(key))
                if match and _amd_text(kind):
                    out[(gpu, int(match.group(1)))] = str(kind).upper()
    return out


def compare_amd_topology(
    facts: dict[str, Any], links: dict[tuple[int, int], str], source: str = "amd-smi topology"
) -> list[Diff]:
    """xGMI where amd-smi says XGMI, and never where it does not."""
    gpus = [g for g in facts.get("gpus", []) if g.get("vendor") == "amd"]
    matrix = _matrix_of(facts)
    out = []
    for gpu in gpus:
        for other in gpus:
            if other["index"] <= gpu["index"]:
                continue
            kind = links.get((gpu["index"], other["index"])) or links.get(
                (other["index"], gpu["index"])
            )
            if kind is None:
                continue
            mine = matrix.get((uuid_key(gpu["uuid"]), uuid_key(other["uuid"])))
            if (mine == "XGMI") != (kind == "XGMI"):
                out.append(_diff(gpu, f"link to GPU {other['index']}", mine, kind, source))
    return out


# -- the workload --------------------------------------------------------------------------------


def peak_tflops(model: str | None) -> float | None:
    return DATASHEET_PEAK_TFLOPS.get(model or "")


def judge_matmul(report: dict[str, Any] | None, peak: float | None) -> list[str]:
    """Problems with a matmul workload report (empty: it ran at a plausible rate)."""
    if not report:
        return ["the workload printed no report"]
    problems = []
    rate = report.get("tflops")
    if not isinstance(rate, int | float) or rate <= 0:
        problems.append(f"rate {rate!r} is not a positive number")
        return problems
    if not report.get("products"):
        problems.append("no product was counted")
    if peak is not None:
        low, high = PLAUSIBLE_FRACTION
        if rate > peak * high:
            problems.append(f"{rate} TFLOP/s is above the datasheet peak {peak} (x{high})")
        if rate < peak * low:
            problems.append(f"{rate} TFLOP/s is below {low:.0%} of the datasheet peak {peak}")
    return problems


def judge_visibility(
    asked_uuid: str,
    asked_bus: str | None,
    probe: dict[str, Any] | None,
    prefer: tuple[str, ...] = ("uuid", "pci_bus_id"),
) -> tuple[list[str], str]:
    """Did a child launched with the visibility variables for `asked_uuid` see exactly that
    GPU? (problems, evidence): the evidence is the first of `prefer` that the child's runtime
    reported for its device 0: its uuid (CUDA) or its PCI address (CUDA and ROCm, whose HIP
    uuid is spelled unlike amd-smi's)."""
    if not probe:
        return ["the probe printed nothing"], "none"
    if probe.get("error"):
        return [f"the probe failed: {probe['error']}"], "none"
    problems = []
    if probe.get("device_count") != 1:
        problems.append(f"the child sees {probe.get('device_count')} devices, not 1")
    device = (probe.get("devices") or [{}])[0]
    for evidence in prefer:
        if evidence == "uuid" and device.get("uuid"):
            if uuid_key(device["uuid"]) != uuid_key(asked_uuid):
                problems.append(f"device 0 is {device['uuid']}, not {asked_uuid}")
            return problems, "uuid"
        if evidence == "pci_bus_id" and device.get("pci_bus_id") and asked_bus:
            if bus_key(device["pci_bus_id"]) != bus_key(asked_bus):
                problems.append(f"device 0 is at {device['pci_bus_id']}, not {asked_bus}")
            return problems, "pci bus id"
    problems.append("the runtime reported neither a uuid nor a PCI address for device 0")
    return problems, "none"


# -- text ----------------------------------------------------------------------------------------


def render(diffs: list[Diff]) -> str:
    """One line per difference, for people and for the issue note."""
    lines = []
    for d in diffs:
        note = f"  ({d['note']})" if d.get("note") else ""
        lines.append(
            f"{d['gpu']}: {d['field']}: agent {d['agent']!r} vs {d['source']} {d['reference']!r}"
            f"{note}"
        )
    return "\n".join(lines)
