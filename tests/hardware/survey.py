"""One pass over a GPU node: gather everything the hardware suite judges, compare it, and write
it to the output folder before any test asserts anything.

A borrowed GPU node may be at hand for minutes, and `pytest -x` stops at the first failure, so
the survey runs once per session (a fixture in conftest.py) and saves every reading and every
difference first; each test then judges one part. Each part catches its own failure, so one
broken reading never costs the others.

`node` is anything with the shape of nodeprobe.Node: `.agent` (nodeprobe.Agent), `.smi(*args,
timeout=)` (the vendor tool), `.nvml()` (pynvml, initialised) and `.python`. The unit tests
drive this module with a simulated node and recorded nvidia-smi output.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gpupoolctl.hw import catalog
from tests.hardware import hwcheck, nodeprobe

MATMUL_SECONDS = 20.0
BUDGET_S = 300.0  # the whole suite on one GPU, as the issue asks


class Survey:
    def __init__(self, out: Path, log: Callable[[str], None]) -> None:
        self.out = out
        self.log = log
        self.data: dict[str, Any] = {"out": str(out), "errors": {}, "timings": {}}
        self.started = time.monotonic()
        out.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        try:
            yield
        except Exception as exc:
            self.data["errors"][name] = f"{type(exc).__name__}: {exc}"
            (self.out / f"error-{name}.txt").write_text(traceback.format_exc())
            self.log(f"{name}: FAILED {type(exc).__name__}: {exc}")
        finally:
            self.data["timings"][name] = round(time.monotonic() - began, 3)

    def save(self, name: str, value: Any) -> None:
        path = self.out / name
        if isinstance(value, str):
            path.write_text(value)
        else:
            path.write_text(json.dumps(value, indent=1, sort_keys=True, default=str) + "\n")

    def finish(self) -> dict[str, Any]:
        self.data["elapsed_s"] = round(time.monotonic() - self.started, 3)
        self.save("timings.json", {**self.data["timings"], "total": self.data["elapsed_s"]})
        diffs = self.data.get("differences") or {}
        self.save("differences.json", diffs)
        self.save("differences.txt", render_differences(diffs))
        self.save("summary.txt", summary(self.data))
        return self.data


def render_differences(diffs: dict[str, list[dict[str, Any]]]) -> str:
    blocks = []
    for name in sorted(diffs):
        items = diffs[name]
        text = hwcheck.render(items) if items else "(none)"
        blocks.append(f"== {name}: {len(items)} difference(s)\n{text}")
    return "\n\n".join(blocks) + "\n"


def _model_for(gpu: dict[str, Any]) -> Any:
    try:
        return catalog.find_nvidia_model(gpu.get("pci_device_id") or None, gpu.get("model"))
    except catalog.CatalogError:
        return None


def _facts(envelope: dict[str, Any], what: str) -> dict[str, Any]:
    if not envelope.get("ok"):
        error = envelope.get("error") or {}
        raise RuntimeError(f"{what}: {error.get('type')}: {error.get('message')}")
    return envelope["data"]


def _job_id(kind: str, n: int) -> str:
    return f"hwcheck-{os.getpid()}-{int(time.time())}-{kind}-{n}"


# -- NVIDIA --------------------------------------------------------------------------------------


def survey_nvidia(
    node: Any,
    out: Path,
    log: Callable[[str], None] = print,
    matmul_seconds: float = MATMUL_SECONDS,
) -> dict[str, Any]:
    s = Survey(out, log)
    d = s.data
    d["vendor"] = "nvidia"
    d["facts"] = {}
    d["differences"] = {}
    snapshots: list[dict[str, Any]] = []

    with s.part("nvidia_smi_before"):
        shot = node.smi("-q", "-x", timeout=90)
        s.save("nvidia-smi-q-before.xml", shot.stdout)
        if not shot.ok:
            raise RuntimeError(f"nvidia-smi -q -x exited {shot.rc}: {shot.first_line()}")
        snapshots.append(hwcheck.parse_nvidia_smi_xml(shot.stdout))
        d["nvidia_smi"] = snapshots[0]
    with s.part("facts_nvml"):
        envelope = node.agent.request("facts", timeout=120)
        s.save("facts-nvml.json", envelope)
        d["facts"]["nvml"] = _facts(envelope, "facts through nvml")
        log(f"facts (nvml driver): {envelope.get('elapsed_s')} s")
    # Each facts run between two snapshots: what moves (memory used, processes) is judged
    # against the range the snapshots around it show.
    with s.part("nvidia_smi_middle"):
        shot = node.smi("-q", "-x", timeout=90)
        s.save("nvidia-smi-q-middle.xml", shot.stdout)
        if shot.ok:
            snapshots.append(hwcheck.parse_nvidia_smi_xml(shot.stdout))
    with s.part("facts_smi"):
        envelope = node.agent.request("facts", hide=("pynvml",), timeout=180)
        s.save("facts-smi.json", envelope)
        d["hidden_binding_met"] = node.agent.hidden_was_met(("pynvml",))
        d["facts"]["smi"] = _facts(envelope, "facts through the smi fallback")
        log(f"facts (smi fallback, pynvml hidden): {envelope.get('elapsed_s')} s")
    with s.part("nvidia_smi_after"):
        shot = node.smi("-q", "-x", timeout=90)
        s.save("nvidia-smi-q-after.xml", shot.stdout)
        if shot.ok:
            snapshots.append(hwcheck.parse_nvidia_smi_xml(shot.stdout))
    extras: list[dict[str, Any]] = []
    with s.part("compute_cap"):
        query = node.smi("--query-gpu=pci.bus_id,compute_cap", "--format=csv,noheader", timeout=60)
        s.save("nvidia-smi-compute-cap.csv", query.stdout + query.stderr)
        if query.ok:
            for bus, cc in hwcheck.parse_bus_compute_cap(query.stdout).items():
                extras.append(
                    {
                        "bus": bus,
                        "field": "compute_capability",
                        "value": cc,
                        "source": "nvidia-smi --query-gpu=compute_cap",
                    }
                )
    with s.part("topology"):
        topo = node.smi("topo", "-m", timeout=60)
        s.save("nvidia-smi-topo.txt", topo.stdout + topo.stderr)
        d["topo"] = hwcheck.parse_topo(topo.stdout) if topo.ok else None
        if not topo.ok:
            raise RuntimeError(f"nvidia-smi topo -m exited {topo.rc}: {topo.first_line()}")
    with s.part("mig"):
        d["mig"] = _mig_readings(node, d, s)
    with s.part("health"):
        d["health"] = _health_readings(node, d, s)
    with s.part("workload"):
        d["workload"] = _workload(node, d, s, matmul_seconds)
        for probe in d["workload"].get("probes", []):
            extras.extend(probe.get("extras", []))
    with s.part("judge"):
        _judge_nvidia(d, snapshots, extras)
    return s.finish()


def _nvml_gpus(facts: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [g for g in (facts or {}).get("gpus", []) if g.get("vendor") == "nvidia"]


def _mig_readings(node: Any, d: dict[str, Any], s: Survey) -> dict[str, Any]:
    gpus = _nvml_gpus(d["facts"].get("nvml"))
    readings: dict[str, Any] = {"gpus": [], "lgip": None, "lgipp": None}
    enabled = [g for g in gpus if (g.get("mig") or {}).get("mode") == "enabled"]
    nvml = node.nvml()
    try:
        for gpu in gpus:
            entry: dict[str, Any] = {
                "index": gpu["index"],
                "uuid": gpu["uuid"],
                "mode": (gpu.get("mig") or {}).get("mode"),
                "catalog_model": getattr(_model_for(gpu), "key", None),
            }
            if (gpu.get("mig") or {}).get("capable"):
                handle = nodeprobe.handle_by_uuid(nvml, gpu["uuid"])
                entry["nvml"] = nodeprobe.nvml_profiles(nvml, handle)
            readings["gpus"].append(entry)
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    if enabled:
        lgip = node.smi("mig", "-lgip", timeout=60)
        lgipp = node.smi("mig", "-lgipp", timeout=60)
        s.save("nvidia-smi-mig-lgip.txt", lgip.stdout + lgip.stderr)
        s.save("nvidia-smi-mig-lgipp.txt", lgipp.stdout + lgipp.stderr)
        readings["lgip"] = hwcheck.parse_lgip(lgip.stdout) if lgip.ok else None
        readings["lgipp"] = hwcheck.parse_lgipp(lgipp.stdout) if lgipp.ok else None
        if not lgip.ok:
            readings["lgip_error"] = f"exit {lgip.rc}: {lgip.first_line()}"
        if not lgipp.ok:
            readings["lgipp_error"] = f"exit {lgipp.rc}: {lgipp.first_line()}"
    s.save("mig.json", readings)
    return readings


def _health_readings(node: Any, d: dict[str, Any], s: Survey) -> dict[str, Any]:
    gpus = _nvml_gpus(d["facts"].get("nvml"))
    by_uuid = {
        hwcheck.uuid_key(g["uuid"]): g for g in (d.get("nvidia_smi") or {"gpus": []})["gpus"]
    }
    readings = []
    nvml = node.nvml()
    try:
        for gpu in gpus:
            handle = nodeprobe.handle_by_uuid(nvml, gpu["uuid"])
            xml = by_uuid.get(hwcheck.uuid_key(gpu["uuid"])) or {}
            entry = {
                "index": gpu["index"],
                "uuid": gpu["uuid"],
                "nvml": nodeprobe.nvml_health(nvml, handle),
                "nvidia_smi": xml.get("health") or {},
                "nvidia_smi_active_event_reasons": hwcheck.active_event_reasons(
                    xml.get("health") or {}
                ),
            }
            mask = entry["nvml"]["clocks_event_reasons"].get("value")
            if isinstance(mask, int):
                entry["nvml_active_event_reasons"] = hwcheck.decode_event_reasons(mask)
            readings.append(entry)
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    s.save("health.json", readings)
    return {"gpus": readings}


def _workload(node: Any, d: dict[str, Any], s: Survey, seconds: float) -> dict[str, Any]:
    gpus = _nvml_gpus(d["facts"].get("nvml"))
    result: dict[str, Any] = {"probes": [], "matmul": None}
    targets = []
    for gpu in gpus:
        mig = gpu.get("mig") or {}
        if mig.get("mode") != "enabled":
            targets.append((gpu, gpu["uuid"], False))
            continue
        cis = [ci for gi in mig.get("instances") or [] for ci in gi.get("compute_instances") or []]
        if cis and cis[0].get("uuid"):
            targets.append((gpu, cis[0]["uuid"], True))
        else:
            result.setdefault("not_probed", []).append(
                f"GPU {gpu['index']}: MIG enabled without a compute instance (nothing can run)"
            )
    jobs = [
        {
            "job_id": _job_id("probe", n),
            "argv": [node.python, "-c", nodeprobe.PROBE],
            "devices": {"vendor": "nvidia", "uuids": [uuid]},
        }
        for n, (_, uuid, _) in enumerate(targets)
    ]
    ran = node.agent.run_jobs(jobs, timeout=180)
    for (gpu, uuid, is_mig), job in zip(targets, ran, strict=True):
        report = nodeprobe.last_json_line(job["stdout"])
        problems, evidence = hwcheck.judge_visibility(
            uuid, None if is_mig else gpu["pci_bus_id"], report
        )
        if not job["launch"].get("ok"):
            problems.insert(0, f"launch refused: {job['launch'].get('error')}")
        probe: dict[str, Any] = {
            "index": gpu["index"],
            "asked": uuid,
            "mig": is_mig,
            "visible": ((job["launch"].get("data") or {}).get("visible")),
            "report": report,
            "problems": problems,
            "evidence": evidence,
            "job": {k: job[k] for k in ("state", "exit_code", "stderr")},
            "extras": [],
        }
        device = ((report or {}).get("devices") or [{}])[0]
        if not problems and not is_mig and device:
            cuda = "CUDA in a launched child (torch.cuda.get_device_properties)"
            probe["extras"] = [
                {
                    "bus": gpu["pci_bus_id"],
                    "field": "compute_units",
                    "value": device.get("multi_processor_count"),
                    "source": cuda,
                },
                {
                    "bus": gpu["pci_bus_id"],
                    "field": "compute_capability",
                    "value": f"{device.get('major')}.{device.get('minor')}",
                    "source": cuda,
                },
            ]
        result["probes"].append(probe)
    if targets:
        whole = [t for t in targets if not t[2]]
        gpu, uuid, is_mig = (whole or targets)[0]  # a whole GPU when there is one
        argv = ["gpupoolctl-workload", "matmul", "--seconds", f"{seconds:g}"]
        job = node.agent.run_jobs(
            [
                {
                    "job_id": _job_id("matmul", 0),
                    "argv": argv,
                    "devices": {"vendor": "nvidia", "uuids": [uuid]},
                }
            ],
            timeout=seconds + 150,
        )[0]
        report = nodeprobe.last_json_line(job["stdout"])
        peak = None if is_mig else hwcheck.peak_tflops(gpu.get("model"))
        problems = [] if job["exit_code"] == 0 else [f"exit {job['exit_code']} ({job['state']})"]
        problems += hwcheck.judge_matmul(report, peak)
        result["matmul"] = {
            "index": gpu["index"],
            "asked": uuid,
            "mig": is_mig,
            "argv": argv,
            "report": report,
            "peak_tflops": peak,
            "fraction_of_peak": round(report["tflops"] / peak, 3)
            if peak and report and isinstance(report.get("tflops"), int | float)
            else None,
            "problems": problems,
            "job": {k: job.get(k) for k in ("state", "exit_code", "stderr", "elapsed_s")},
        }
        whole_uuids = [uuid for _, uuid, is_mig in targets if not is_mig]
        if whole_uuids:
            try:  # its own verdict: a fault here must not fail the matmul and probe checks
                result["train"] = _train(node, whole_uuids)
            except Exception as exc:
                result["train"] = {
                    "gpus": len(whole_uuids),
                    "report": None,
                    "problems": [f"the survey could not run it: {exc!r}"],
                    "job": {"exit_code": None},
                }
    s.save("workload.json", result)
    return result


TRAIN_STEPS = 20


def _train(node: Any, uuids: list[str]) -> dict[str, Any]:
    """The `train` workload's PyTorch path, data-parallel over every whole GPU (NCCL)."""
    argv = ["gpupoolctl-workload", "train", "--steps", str(TRAIN_STEPS), "--params", "1e7"]
    job = node.agent.run_jobs(
        [
            {
                "job_id": _job_id("train", 0),
                "argv": argv,
                "devices": {"vendor": "nvidia", "uuids": uuids},
            }
        ],
        timeout=240,
    )[0]
    problems = [] if job["exit_code"] == 0 else [f"exit {job['exit_code']} ({job['state']})"]
    return {
        "gpus": len(uuids),
        "argv": argv,
        "report": nodeprobe.last_json_line(job["stdout"]),
        "problems": problems,
        "job": {k: job.get(k) for k in ("state", "exit_code", "stderr", "elapsed_s")},
    }


def _judge_nvidia(
    d: dict[str, Any], snapshots: list[dict[str, Any]], extras: list[dict[str, Any]]
) -> None:
    diffs = d["differences"]
    nvml, smi = d["facts"].get("nvml"), d["facts"].get("smi")
    notes = d.setdefault("notes", [])
    if snapshots and nvml:
        around = snapshots[:2]
        diffs["facts_nvml_vs_nvidia_smi"] = hwcheck.compare_facts_to_smi(nvml, around, extras)
    if snapshots and smi:
        around = snapshots[1:] or snapshots
        diffs["facts_smi_vs_nvidia_smi"] = hwcheck.compare_facts_to_smi(
            smi, around, extras, mig_instances=False
        )
        if any(g["mig_current"] == "enabled" for g in snapshots[0]["gpus"]):
            notes.append(
                "the smi driver reports no MIG instances (by design, smi_nvidia.py): "
                "its facts were not compared with nvidia-smi's mig_devices"
            )
    if nvml and smi:
        diffs["nvml_vs_smi_driver"] = hwcheck.compare_drivers(nvml, smi, vendor="nvidia")
    diffs["bus_id_form"] = [
        diff
        for name, facts in (("nvml", nvml), ("smi", smi))
        if facts
        for diff in hwcheck.bus_form_diffs(facts, "nvidia", f"agent facts ({name}) pci_bus_id")
    ]
    if d.get("topo"):
        if nvml:
            diffs["topology_nvml_vs_topo"] = hwcheck.compare_topology(nvml, d["topo"])
        if smi:
            diffs["topology_smi_vs_topo"] = hwcheck.compare_topology(smi, d["topo"])
    mig = d.get("mig")
    if mig and nvml:
        agent_diffs, direct_diffs, smi_diffs = [], [], []
        by_index = {g["index"]: g for g in _nvml_gpus(nvml)}
        for entry in mig["gpus"]:
            gpu = by_index[entry["index"]]
            expected = hwcheck.catalog_table(_model_for(gpu))
            if not (gpu.get("mig") or {}).get("capable"):
                continue
            agent_table = (gpu.get("mig") or {}).get("profiles") or []
            agent_diffs += hwcheck.compare_profile_tables(
                agent_table, expected, gpu, "agent facts (nvml) mig.profiles vs catalog"
            )
            direct = (entry.get("nvml") or {}).get("table") or []
            direct_diffs += hwcheck.compare_profile_tables(
                direct, expected, gpu, "NVML profile/placement queries vs catalog"
            )
            listed = (mig.get("lgip") or {}).get(gpu["index"])
            if listed is not None:
                table = hwcheck.smi_profile_table(
                    listed, (mig.get("lgipp") or {}).get(gpu["index"])
                )
                smi_diffs += hwcheck.compare_profile_tables(
                    table, expected, gpu, "nvidia-smi mig -lgip/-lgipp vs catalog"
                )
        diffs["mig_agent_vs_catalog"] = agent_diffs
        diffs["mig_nvml_vs_catalog"] = direct_diffs
        if mig.get("lgip") is not None:
            diffs["mig_nvidia_smi_vs_catalog"] = smi_diffs


# -- AMD -----------------------------------------------------------------------------------------


def _json(text: str) -> Any:
    start = min([i for i in (text.find("["), text.find("{")) if i >= 0], default=-1)
    return json.loads(text[start:]) if start >= 0 else None


def survey_amd(
    node: Any,
    out: Path,
    log: Callable[[str], None] = print,
    matmul_seconds: float = MATMUL_SECONDS,
) -> dict[str, Any]:
    s = Survey(out, log)
    d = s.data
    d["vendor"] = "amd"
    d["facts"] = {}
    d["differences"] = {}
    docs: dict[str, Any] = {}
    with s.part("amd_smi"):
        for command in ("static", "metric", "list", "topology", "process"):
            done = node.smi(command, "--json", timeout=120)
            s.save(f"amd-smi-{command}.json", done.stdout + done.stderr)
            docs[command] = _json(done.stdout) if done.ok else None
            if command == "static" and not done.ok:
                raise RuntimeError(f"amd-smi static exited {done.rc}: {done.first_line()}")
        d["amd_smi"] = hwcheck.parse_amd_smi(docs["static"], docs["metric"], docs["list"])
    with s.part("facts_amdsmi"):
        envelope = node.agent.request("facts", timeout=180)
        s.save("facts-amdsmi.json", envelope)
        d["facts"]["amdsmi"] = _facts(envelope, "facts through amdsmi")
    with s.part("facts_smi"):
        envelope = node.agent.request("facts", hide=("amdsmi",), timeout=240)
        s.save("facts-smi.json", envelope)
        d["hidden_binding_met"] = node.agent.hidden_was_met(("amdsmi",))
        d["facts"]["smi"] = _facts(envelope, "facts through the smi fallback")
    with s.part("health"):
        done = node.smi("bad-pages", "--json", timeout=120)
        s.save("amd-smi-bad-pages.json", done.stdout + done.stderr)
        metric = hwcheck.amd_entries(docs.get("metric"))
        d["health"] = {
            "bad_pages": {"rc": done.rc, "first_line": done.first_line()},
            "gpus": [
                {k: e.get(k) for k in ("gpu", "ecc", "ecc_blocks", "throttle", "temperature")}
                for e in metric
            ],
        }
        s.save("health.json", d["health"])
    with s.part("workload"):
        d["workload"] = _amd_workload(node, d, s, matmul_seconds)
    with s.part("judge"):
        diffs = d["differences"]
        ref = d.get("amd_smi")
        for name, facts in d["facts"].items():
            if ref is not None:
                diffs[f"facts_{name}_vs_amd_smi"] = hwcheck.compare_amd_facts(facts, ref)
            if docs.get("topology") is not None:
                links = hwcheck.amd_link_types(docs["topology"])
                diffs[f"topology_{name}_vs_amd_smi"] = hwcheck.compare_amd_topology(facts, links)
        if "amdsmi" in d["facts"] and "smi" in d["facts"]:
            diffs["amdsmi_vs_smi_driver"] = hwcheck.compare_drivers(
                d["facts"]["amdsmi"], d["facts"]["smi"], vendor="amd"
            )
        diffs["bus_id_form"] = [
            diff
            for name, facts in d["facts"].items()
            for diff in hwcheck.bus_form_diffs(facts, "amd", f"agent facts ({name}) pci_bus_id")
        ]
    return s.finish()


def _amd_workload(node: Any, d: dict[str, Any], s: Survey, seconds: float) -> dict[str, Any]:
    facts = d["facts"].get("amdsmi") or d["facts"].get("smi") or {}
    gpus = [g for g in facts.get("gpus", []) if g.get("vendor") == "amd" and g.get("uuid")]
    result: dict[str, Any] = {"probes": [], "matmul": None}
    jobs = [
        {
            "job_id": _job_id("probe", n),
            "argv": [node.python, "-c", nodeprobe.PROBE],
            "devices": {"vendor": "amd", "uuids": [g["uuid"]]},
        }
        for n, g in enumerate(gpus)
    ]
    for gpu, job in zip(gpus, node.agent.run_jobs(jobs, timeout=240), strict=True):
        report = nodeprobe.last_json_line(job["stdout"])
        problems, evidence = hwcheck.judge_visibility(
            gpu["uuid"], gpu["pci_bus_id"], report, prefer=("pci_bus_id",)
        )
        if not job["launch"].get("ok"):
            problems.insert(0, f"launch refused: {job['launch'].get('error')}")
        result["probes"].append(
            {
                "index": gpu["index"],
                "asked": gpu["uuid"],
                "visible": (job["launch"].get("data") or {}).get("visible"),
                "report": report,
                "problems": problems,
                "evidence": evidence,
                "job": {k: job[k] for k in ("state", "exit_code", "stderr")},
            }
        )
    if gpus:
        gpu = gpus[0]
        argv = ["gpupoolctl-workload", "matmul", "--seconds", f"{seconds:g}"]
        job = node.agent.run_jobs(
            [
                {
                    "job_id": _job_id("matmul", 0),
                    "argv": argv,
                    "devices": {"vendor": "amd", "uuids": [gpu["uuid"]]},
                }
            ],
            timeout=seconds + 150,
        )[0]
        report = nodeprobe.last_json_line(job["stdout"])
        peak = hwcheck.peak_tflops(gpu.get("model"))
        problems = [] if job["exit_code"] == 0 else [f"exit {job['exit_code']} ({job['state']})"]
        problems += hwcheck.judge_matmul(report, peak)
        result["matmul"] = {
            "index": gpu["index"],
            "asked": gpu["uuid"],
            "argv": argv,
            "report": report,
            "peak_tflops": peak,
            "problems": problems,
            "job": {k: job.get(k) for k in ("state", "exit_code", "stderr", "elapsed_s")},
        }
    s.save("workload.json", result)
    return result


# -- the summary ---------------------------------------------------------------------------------


def summary(d: dict[str, Any]) -> str:
    """What a person reads first (and pastes into the issue note)."""
    lines = [f"hardware survey ({d.get('vendor')}): {d.get('elapsed_s')} s, written to {d['out']}"]
    for name, error in sorted(d["errors"].items()):
        lines.append(f"  part {name} FAILED: {error}")
    lines.extend(f"  note: {note}" for note in d.get("notes", []))
    for name, items in sorted((d.get("differences") or {}).items()):
        lines.append(f"  {name}: {len(items)} difference(s)")
        lines.extend(f"    {line}" for line in hwcheck.render(items).splitlines())
    work = d.get("workload") or {}
    matmul = work.get("matmul")
    if matmul:
        report = matmul.get("report") or {}
        peak = matmul.get("peak_tflops")
        if report:
            shown = (
                f"{report.get('tflops')} TFLOP/s ({report.get('dtype')}, n={report.get('size')})"
            )
        else:
            shown = "no report"
        if peak and report:
            shown += f" beside a datasheet peak of {peak} ({matmul.get('fraction_of_peak')})"
        if matmul["problems"]:
            shown += f"; problems: {'; '.join(matmul['problems'])}"
        lines.append(f"  matmul on GPU {matmul['index']} ({matmul['asked']}): {shown}")
    for probe in work.get("probes", []):
        verdict = "; ".join(probe["problems"]) or f"sees exactly it (by {probe['evidence']})"
        lines.append(f"  visibility GPU {probe['index']} {probe['asked']}: {verdict}")
    for gpu in (d.get("health") or {}).get("gpus", []):
        if "nvml" in gpu:
            lines.append(f"  health GPU {gpu['index']}: {_health_line(gpu)}")
    timings = ", ".join(f"{k} {v}s" for k, v in d["timings"].items())
    lines.append(f"  timings: {timings}")
    return "\n".join(lines) + "\n"


def _shown(entry: dict[str, Any]) -> str:
    if "value" in entry:
        return str(entry["value"])
    reason = entry.get("nvml_error") or entry.get("missing") or entry.get("failed")
    return f"n/a ({reason})"


def _health_line(gpu: dict[str, Any]) -> str:
    """NVML's readings, with nvidia-smi's beside temperature, power and event reasons."""
    nvml, smi = gpu["nvml"], gpu.get("nvidia_smi") or {}
    power = nvml["power_mw"].get("value")
    parts = [
        f"temperature {_shown(nvml['temperature_c'])} C"
        f" (nvidia-smi {smi.get('temperature/gpu_temp', 'n/a')})",
        f"power {power / 1000:.1f} W"
        if isinstance(power, int | float)
        else f"power {_shown(nvml['power_mw'])}",
    ]
    parts[-1] += f" (nvidia-smi {smi.get('gpu_power_readings/instant_power_draw', 'n/a')})"
    for name in (
        "ecc_mode",
        "ecc_volatile_uncorrected",
        "ecc_aggregate_uncorrected",
        "remapped_rows",
        "retired_pages_single_bit",
        "retired_pages_double_bit",
        "retired_pages_pending",
    ):
        parts.append(f"{name} {_shown(nvml[name])}")
    reasons = gpu.get("nvml_active_event_reasons")
    shown = ",".join(reasons) if reasons is not None else _shown(nvml["clocks_event_reasons"])
    smi_reasons = ",".join(gpu.get("nvidia_smi_active_event_reasons") or []) or "none"
    parts.append(f"event reasons {shown or 'none'} (nvidia-smi {smi_reasons})")
    return "; ".join(parts)
