"""Read-only checks against a real AMD GPU; skipped, with the reason, where there is none.

The same shape as test_nvidia.py: the `amd` fixture reads `amd-smi static/metric/list/topology
--json`, the agent's facts through amdsmi and through the smi fallback (amdsmi hidden), runs the
matmul workload and a visibility probe through the agent's launch, and writes it all to
$GPUPOOL_HARDWARE_OUT/amd. Nothing here changes partitions, resets or power settings.
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


def test_agent_answers_facts_through_both_drivers(amd):
    _no_error(amd, "amd_smi", "facts_amdsmi", "facts_smi")
    assert amd["facts"]["amdsmi"]["drivers"].get("amd") == "amdsmi"
    assert amd["facts"]["smi"]["drivers"].get("amd") == "smi", (
        "with amdsmi hidden the agent did not fall back to amd-smi"
    )
    assert amd["hidden_binding_met"], "the agent never imported the hidden amdsmi stand-in"


def test_facts_through_amdsmi_match_amd_smi(amd):
    _no_error(amd, "facts_amdsmi", "judge")
    _no_diffs(amd, "facts_amdsmi_vs_amd_smi")


def test_facts_through_the_smi_fallback_match_amd_smi(amd):
    _no_error(amd, "facts_smi", "judge")
    _no_diffs(amd, "facts_smi_vs_amd_smi")


def test_amdsmi_and_smi_drivers_agree(amd):
    _no_error(amd, "facts_amdsmi", "facts_smi", "judge")
    _no_diffs(amd, "amdsmi_vs_smi_driver")


def test_facts_write_bus_ids_in_the_sysfs_form(amd):
    _no_error(amd, "judge")
    _no_diffs(amd, "bus_id_form")


def test_xgmi_links_match_amd_smi_topology(amd):
    _no_error(amd, "judge")
    if "topology_amdsmi_vs_amd_smi" not in amd["differences"]:
        pytest.skip("amd-smi topology --json gave nothing to compare (older ROCm)")
    _no_diffs(amd, "topology_amdsmi_vs_amd_smi")
    _no_diffs(amd, "topology_smi_vs_amd_smi")


def test_health_fields_are_readable_or_reported_unsupported(amd):
    _no_error(amd, "health")
    bad_pages = amd["health"]["bad_pages"]
    assert bad_pages["rc"] == 0 or "support" in bad_pages["first_line"].lower(), bad_pages


def test_matmul_runs_at_a_plausible_rate(amd):
    _no_error(amd, "workload")
    matmul = amd["workload"]["matmul"]
    assert matmul is not None, "no AMD GPU with a uuid to run on"
    assert not matmul["problems"], f"{matmul['problems']}; job: {matmul['job']}"


def test_visibility_as_launch_sets_it_selects_that_gpu(amd):
    _no_error(amd, "workload")
    bad = [
        f"GPU {p['index']} {p['asked']}: {'; '.join(p['problems'])}"
        for p in amd["workload"]["probes"]
        if p["problems"]
    ]
    assert not bad, "\n".join(bad)


def test_the_survey_fits_in_five_minutes(amd):
    from tests.hardware.survey import BUDGET_S

    assert amd["elapsed_s"] < BUDGET_S, amd["timings"]
