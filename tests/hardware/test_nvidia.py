"""Read-only checks against a real NVIDIA GPU; skipped, with the reason, where there is none.

    PYTHONPATH=. python3 -m pytest tests/hardware -x

Everything is read once by the `nvidia` fixture (tests/hardware/survey.py) and written to
$GPUPOOL_HARDWARE_OUT/nvidia before any test judges it. Nothing here changes the GPU: no MIG
mode, no instances, no reset, no clocks or power limits.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.hardware import hwcheck

pytestmark = pytest.mark.hardware


def _no_error(survey: dict[str, Any], *parts: str) -> None:
    failed = {p: survey["errors"][p] for p in parts if p in survey["errors"]}
    assert not failed, f"survey parts failed (see {survey['out']}/error-*.txt): {failed}"


def _no_diffs(survey: dict[str, Any], name: str) -> None:
    diffs = survey["differences"].get(name)
    assert diffs is not None, f"{name} was not compared (errors: {survey['errors']})"
    assert not diffs, f"{len(diffs)} difference(s):\n{hwcheck.render(diffs)}"


def test_agent_answers_facts_through_both_drivers(nvidia):
    _no_error(nvidia, "nvidia_smi_before", "facts_nvml", "facts_smi")
    assert nvidia["facts"]["nvml"]["drivers"].get("nvidia") == "nvml"
    assert nvidia["facts"]["smi"]["drivers"].get("nvidia") == "smi", (
        "with pynvml hidden the agent did not fall back to nvidia-smi"
    )
    assert nvidia["hidden_binding_met"], "the agent never imported the hidden pynvml stand-in"
    count = len(nvidia["nvidia_smi"]["gpus"])
    for name in ("nvml", "smi"):
        gpus = [g for g in nvidia["facts"][name]["gpus"] if g["vendor"] == "nvidia"]
        assert len(gpus) == count, f"{name}: {len(gpus)} GPUs, nvidia-smi lists {count}"


def test_facts_through_nvml_match_nvidia_smi(nvidia):
    _no_error(nvidia, "facts_nvml", "judge")
    _no_diffs(nvidia, "facts_nvml_vs_nvidia_smi")


def test_facts_through_the_smi_fallback_match_nvidia_smi(nvidia):
    _no_error(nvidia, "facts_smi", "judge")
    _no_diffs(nvidia, "facts_smi_vs_nvidia_smi")


def test_nvml_and_smi_drivers_agree(nvidia):
    _no_error(nvidia, "facts_nvml", "facts_smi", "judge")
    _no_diffs(nvidia, "nvml_vs_smi_driver")


def test_facts_write_bus_ids_in_the_sysfs_form(nvidia):
    _no_error(nvidia, "judge")
    _no_diffs(nvidia, "bus_id_form")


def test_link_matrix_matches_nvidia_smi_topo(nvidia):
    _no_error(nvidia, "topology", "judge")
    _no_diffs(nvidia, "topology_nvml_vs_topo")
    _no_diffs(nvidia, "topology_smi_vs_topo")


def _capable(nvidia: dict[str, Any]) -> list[dict[str, Any]]:
    gpus = [g for g in nvidia["facts"]["nvml"]["gpus"] if g["vendor"] == "nvidia"]
    return [g for g in gpus if (g.get("mig") or {}).get("capable")]


def test_mig_profile_table_matches_the_catalog(nvidia):
    _no_error(nvidia, "facts_nvml", "mig", "judge")
    capable = _capable(nvidia)
    if not capable:
        pytest.skip("no MIG-capable GPU on this node: no profile table to compare")
    unknown = [g["model"] for g in capable if not hwcheck.catalog_table(_model(g))]
    assert not unknown, f"MIG-capable GPUs the catalog has no MIG table for: {unknown}"
    _no_diffs(nvidia, "mig_agent_vs_catalog")
    _no_diffs(nvidia, "mig_nvml_vs_catalog")


def _model(gpu: dict[str, Any]) -> Any:
    from gpupoolctl.hw import catalog

    return catalog.find_nvidia_model(gpu.get("pci_device_id") or None, gpu.get("model"))


def test_mig_placements_were_read(nvidia):
    """Placements settle the catalog rows marked `inferred`; NVML may refuse them with MIG off."""
    _no_error(nvidia, "mig")
    capable = _capable(nvidia)
    if not capable:
        pytest.skip("no MIG-capable GPU on this node")
    rows = [
        row
        for entry in nvidia["mig"]["gpus"]
        for row in (entry.get("nvml") or {}).get("table") or []
    ]
    placed = [row for row in rows if row.get("placements")]
    if not placed:
        refusals = sorted({row.get("placement_error", "none given") for row in rows})
        modes = sorted({(g.get("mig") or {}).get("mode") for g in capable})
        pytest.skip(
            f"MIG is {'/'.join(modes)} and NVML gave no placements ({'; '.join(refusals)}); "
            "this suite never enables MIG"
        )
    assert len(placed) == len(rows), "NVML gave placements for some profiles only"


def test_nvidia_smi_mig_listing_matches_the_catalog(nvidia):
    _no_error(nvidia, "mig", "judge")
    enabled = [g for g in _capable(nvidia) if g["mig"]["mode"] == "enabled"]
    if not enabled:
        pytest.skip(
            "MIG is disabled on every GPU: nvidia-smi mig -lgip/-lgipp list nothing, and this "
            "suite never enables MIG"
        )
    assert nvidia["mig"].get("lgip") is not None, nvidia["mig"].get("lgip_error")
    assert nvidia["mig"].get("lgipp") is not None, nvidia["mig"].get("lgipp_error")
    _no_diffs(nvidia, "mig_nvidia_smi_vs_catalog")


def test_health_fields_are_readable_or_reported_unsupported(nvidia):
    """Shown as read (health.json, the summary); only a call that neither answered nor was
    refused by NVML fails: a binding without it, or a Python error."""
    _no_error(nvidia, "health")
    broken = [
        f"GPU {gpu['index']} {field}: {entry.get('missing') or entry.get('failed')}"
        for gpu in nvidia["health"]["gpus"]
        for field, entry in gpu["nvml"].items()
        if "missing" in entry or "failed" in entry
    ]
    assert not broken, "\n".join(broken)


def test_matmul_runs_at_a_plausible_rate(nvidia):
    _no_error(nvidia, "workload")
    matmul = nvidia["workload"]["matmul"]
    if matmul is None:
        pytest.skip("no GPU this suite may run work on (MIG enabled without compute instances)")
    assert not matmul["problems"], f"{matmul['problems']}; job: {matmul['job']}"


def test_train_runs_data_parallel_over_every_whole_gpu(nvidia):
    from tests.hardware.survey import TRAIN_STEPS

    _no_error(nvidia, "workload")
    train = nvidia["workload"].get("train")
    if train is None:
        pytest.skip("no whole GPU this suite may run work on")
    if train["job"]["exit_code"] == 3:
        pytest.skip(f"PyTorch is not usable on this node: {train['job']['stderr']}")
    assert not train["problems"], f"{train['problems']}; job: {train['job']}"
    report = train["report"]
    assert report["workers"] == report["ranks"] == train["gpus"], report
    assert report["backend"] == "nccl" and report["steps"] == TRAIN_STEPS, report
    assert report["compute_s"] > 0 and report["samples"] > 0, report
    # One rank has nothing to reduce; several name the link between them.
    assert report["bound_by"] in ((None,) if train["gpus"] == 1 else ("nvlink", "pcie")), report


def test_cuda_visible_devices_as_launch_sets_it_selects_that_gpu(nvidia):
    _no_error(nvidia, "workload")
    probes = nvidia["workload"]["probes"]
    if not probes:
        pytest.skip("no GPU this suite may run work on (MIG enabled without compute instances)")
    bad = [
        f"GPU {p['index']} {p['asked']}: {'; '.join(p['problems'])}"
        for p in probes
        if p["problems"]
    ]
    assert not bad, "\n".join(bad)


def test_the_survey_fits_in_five_minutes(nvidia):
    from tests.hardware.survey import BUDGET_S

    assert nvidia["elapsed_s"] < BUDGET_S, nvidia["timings"]
