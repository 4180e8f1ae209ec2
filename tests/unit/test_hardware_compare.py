"""The real-GPU checks' comparison logic, tested here against recorded output.

tests/hardware runs only on a GPU node; what it compares (nvidia-smi XML, topo -m, mig -lgip /
-lgipp and amd-smi JSON against the agent's facts and the catalog) is tested here, with the
simulated DGX-H100-MIG node `sg-dgx02` (inventories/sim.yaml) and output recorded in its shape
under tests/fixtures/nvidia-smi/. The agent is run as the hardware suite runs it: a child
`python3 -c` calling gpupoolctl.agent.main.main() with a JSON request on stdin.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# `tests` importable however pytest was started, as tests/integration/conftest.py does.
_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from gpupoolctl.agent.drivers import smi_amd  # noqa: E402
from gpupoolctl.hw import catalog  # noqa: E402
from tests.hardware import hwcheck, nodeprobe, survey  # noqa: E402

NVIDIA = _REPO / "tests" / "fixtures" / "nvidia-smi"
AMD = _REPO / "tests" / "fixtures" / "amd-smi" / "mi300x-8-rocm7"
HOST, TEMPLATE = "sg-dgx02", "dgx-h100-mig"
BUSES = [f"0000:{b:02x}:00.0" for b in (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)]


def xml_text() -> str:
    return (NVIDIA / "dgx-h100-mig.q.xml").read_text()


def parsed(text: str | None = None) -> dict[str, Any]:
    return hwcheck.parse_nvidia_smi_xml(text if text is not None else xml_text())


def keys(diffs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(d["bus"], d["field"]) for d in diffs}


@pytest.fixture(scope="module")
def sim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sim")


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory, sim_dir: Path) -> dict[str, Any]:
    """The simulated node's facts through the nvml driver, the agent run as a child."""
    agent = nodeprobe.Agent(
        tmp_path_factory.mktemp("agent"),
        sim={"template": TEMPLATE, "state_dir": str(sim_dir)},
        host=HOST,
    )
    envelope = agent.request("facts", timeout=120)
    assert envelope["ok"], envelope["error"]
    assert envelope["data"]["drivers"] == {"nvidia": "nvml"}
    return envelope["data"]


def fresh(facts: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(facts)


# -- normalizing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("00000000:2A:00.0", "0000:2a:00.0"),
        ("0000:2a:00.0", "0000:2a:00.0"),
        ("2A:00.0", "0000:2a:00.0"),
        (" 00000001:c5:1f.7 ", "0001:c5:1f.7"),
        ("00010000:01:00.0", "10000:01:00.0"),  # a VMD domain keeps its digits
        ("not an address", "not an address"),
        (None, ""),
    ],
)
def test_bus_ids_compare_in_one_form(raw, key):
    assert hwcheck.bus_key(raw) == key


def test_uuids_compare_by_their_digits():
    assert hwcheck.uuid_key("GPU-5D2A7C9E-8b1f-4c36") == hwcheck.uuid_key("5d2a7c9e8b1f4c36")
    assert hwcheck.uuid_key("MIG-ab-cd") == "abcd"


# -- nvidia-smi -q -x ----------------------------------------------------------------------------


def test_the_recorded_xml_parses_as_nvidia_smi_writes_it():
    smi = parsed()
    assert smi["driver_version"] == "570.133.20"
    gpus = smi["gpus"]
    assert [hwcheck.bus_key(g["pci_bus_id"]) for g in gpus] == BUSES
    assert {g["name"] for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {g["pci_device_id"] for g in gpus} == {"233010DE"}
    assert [g["mig_current"] for g in gpus] == ["disabled"] * 6 + ["enabled"] * 2
    assert gpus[0]["memory_total_mib"] == 81559 and gpus[0]["memory_reserved_mib"] == 551
    assert gpus[0]["memory_used_mib"] == 0
    assert gpus[6]["memory_used_mib"] is None  # N/A on the parent of a MIG GPU
    assert [(d["gi_id"], d["ci_id"], d["sm_count"]) for d in gpus[7]["mig_devices"]] == [
        (1, 0, 60),
        (2, 0, 60),
    ]
    assert len(gpus[6]["mig_devices"]) == 7
    assert gpus[0]["temperature_c"] == 31 and gpus[0]["power_draw_w"] == 69.52
    assert gpus[0]["processes"] == []


def test_sim_facts_match_the_recorded_xml(facts):
    extras = [
        {"bus": bus, "field": "compute_capability", "value": cc, "source": "query"}
        for bus, cc in hwcheck.parse_bus_compute_cap(
            (NVIDIA / "dgx-h100-mig.bus-compute-cap.csv").read_text()
        ).items()
    ]
    assert len(extras) == 8
    assert hwcheck.compare_facts_to_smi(facts, parsed(), extras) == []


def test_one_uuid_changed_and_memory_off_are_exactly_those_differences(facts):
    gpus = [g for g in facts["gpus"]]
    text = xml_text()
    text = text.replace(gpus[3]["uuid"], "GPU-00000000-1111-2222-3333-444444444444")
    fifth = text.index(f'<gpu id="00000000:{BUSES[5][5:].upper()}">')
    at = text.index("<total>81559 MiB</total>", fifth)
    text = text[:at] + "<total>81000 MiB</total>" + text[at + len("<total>81559 MiB</total>") :]
    diffs = hwcheck.compare_facts_to_smi(facts, parsed(text))
    assert keys(diffs) == {(BUSES[3], "uuid"), (BUSES[5], "memory_total_mib")}
    by_field = {d["field"]: d for d in diffs}
    assert by_field["uuid"]["agent"] == gpus[3]["uuid"]
    assert by_field["uuid"]["reference"] == "GPU-00000000-1111-2222-3333-444444444444"
    assert (by_field["memory_total_mib"]["agent"], by_field["memory_total_mib"]["reference"]) == (
        81559,
        81000,
    )
    text_form = hwcheck.render(diffs)
    assert "uuid" in text_form and "memory_total_mib" in text_form and "GPU 5" in text_form


def test_used_memory_moves_within_the_tolerance_and_the_reserved_part(facts):
    smi = parsed()
    smi["gpus"][1]["memory_used_mib"] = hwcheck.USED_TOLERANCE_MIB  # moved, still tolerated
    assert hwcheck.compare_facts_to_smi(facts, smi) == []
    reserved = fresh(facts)
    reserved["gpus"][2]["memory_used_mib"] = 551  # NVML v1 counts reserved memory as used
    assert hwcheck.compare_facts_to_smi(reserved, parsed()) == []
    off = fresh(facts)
    off["gpus"][2]["memory_used_mib"] = 4096
    assert keys(hwcheck.compare_facts_to_smi(off, parsed())) == {(BUSES[2], "memory_used_mib")}
    before, after = parsed(), parsed()
    after["gpus"][2]["memory_used_mib"] = 8000  # the agent read in between two snapshots
    between = fresh(facts)
    between["gpus"][2]["memory_used_mib"] = 4000
    assert hwcheck.compare_facts_to_smi(between, [before, after]) == []


def test_bus_ids_in_another_spelling_are_not_a_difference(facts):
    nvml_form = fresh(facts)
    for gpu in nvml_form["gpus"]:
        gpu["pci_bus_id"] = "0000" + gpu["pci_bus_id"].upper()  # 00000000:2A:00.0, as NVML
    assert hwcheck.compare_facts_to_smi(nvml_form, parsed()) == []


def _with_process(smi: dict[str, Any], index: int, pid: int, kind: str = "C") -> None:
    smi["gpus"][index]["processes"].append(
        {
            "pid": pid,
            "type": kind,
            "name": "/usr/bin/python3",
            "used_memory_mib": 1024,
            "gi_id": None,
            "ci_id": None,
        }
    )


def _proc(pid: int, used: int = 1024, name: str | None = "python3") -> dict[str, Any]:
    return {
        "pid": pid,
        "name": name,
        "used_memory_mib": used,
        "gpu_instance_id": None,
        "compute_instance_id": None,
    }


def test_bus_ids_not_in_the_sysfs_form_are_reported_apart(facts):
    assert hwcheck.bus_form_diffs(facts, "nvidia", "facts") == []
    nvml_spelling = copy.deepcopy(facts)
    gpu = nvml_spelling["gpus"][2]
    gpu["pci_bus_id"] = "00000000:" + gpu["pci_bus_id"].split(":", 1)[1].upper()
    found = hwcheck.bus_form_diffs(nvml_spelling, "nvidia", "facts")
    assert [(d["index"], d["field"], d["agent"], d["reference"]) for d in found] == [
        (gpu["index"], "pci_bus_id form", gpu["pci_bus_id"], facts["gpus"][2]["pci_bus_id"])
    ]


def test_compute_processes_must_match_and_graphics_ones_do_not_count(facts):
    smi = parsed()
    _with_process(smi, 0, 4242)
    _with_process(smi, 0, 77, kind="G")  # a display server: NVML's compute list never has it
    with_it = fresh(facts)
    with_it["gpus"][0]["processes"] = [_proc(4242)]
    assert hwcheck.compare_facts_to_smi(with_it, smi) == []
    assert keys(hwcheck.compare_facts_to_smi(facts, smi)) == {(BUSES[0], "processes")}
    wrong = fresh(with_it)
    wrong["gpus"][0]["processes"] = [_proc(4242, used=9000, name="/opt/bin/other")]
    assert keys(hwcheck.compare_facts_to_smi(wrong, smi)) == {
        (BUSES[0], "process 4242.used_memory_mib"),
        (BUSES[0], "process 4242.name"),
    }
    # A process that only one snapshot shows came or went meanwhile: allowed, not required.
    after = parsed()
    assert hwcheck.compare_facts_to_smi(facts, [smi, after]) == []
    assert hwcheck.compare_facts_to_smi(with_it, [smi, after]) == []


def test_mig_devices_are_compared_with_the_gpu_instances(facts):
    text = xml_text()
    seventh = text.index(f'<gpu id="00000000:{BUSES[7][5:].upper()}">')
    second = text.index("<gpu_instance_id>2</gpu_instance_id>", seventh)
    at = text.index("<multiprocessor_count>60</multiprocessor_count>", second)
    altered = text[:at] + "<multiprocessor_count>56</multiprocessor_count>" + text[at + 47 :]
    assert keys(hwcheck.compare_facts_to_smi(facts, parsed(altered))) == {
        (BUSES[7], "mig.gi2.ci0.sm_count")
    }
    fewer = parsed()
    fewer["gpus"][6]["mig_devices"].pop()
    assert keys(hwcheck.compare_facts_to_smi(facts, fewer)) == {(BUSES[6], "mig.instances")}
    # The smi driver reports no MIG instances by design: left out when asked.
    none = fresh(facts)
    for gpu in none["gpus"]:
        gpu["mig"]["instances"] = []
    assert hwcheck.compare_facts_to_smi(none, parsed(), mig_instances=False) == []
    mode = parsed()
    mode["gpus"][1]["mig_pending"] = "enabled"
    assert keys(hwcheck.compare_facts_to_smi(facts, mode)) == {(BUSES[1], "mig.pending")}


def test_a_gpu_missing_on_either_side_is_reported(facts):
    smi = parsed()
    smi["gpus"].pop(4)
    diffs = hwcheck.compare_facts_to_smi(facts, smi)
    assert keys(diffs) == {(BUSES[4], "present")}


def test_extra_references_fill_what_the_xml_lacks(facts):
    extras = [
        {"bus": BUSES[2], "field": "compute_capability", "value": "8.0", "source": "query"},
        {"bus": BUSES[2], "field": "compute_units", "value": 132, "source": "CUDA"},
    ]
    diffs = hwcheck.compare_facts_to_smi(facts, parsed(), extras)
    assert [(d["bus"], d["field"], d["source"]) for d in diffs] == [
        (BUSES[2], "compute_capability", "query")
    ]


# -- two drivers, topology -----------------------------------------------------------------------


def test_two_drivers_agree_field_by_field_and_link_by_link(facts):
    other = fresh(facts)
    other["drivers"] = {"nvidia": "smi"}
    assert hwcheck.compare_drivers(facts, other, vendor="nvidia") == []
    other["gpus"][2]["compute_units"] = 130
    other["gpus"][4]["pci_bus_id"] = other["gpus"][4]["pci_bus_id"].upper()  # spelling only
    other["topology"]["matrix"][0][5] = other["topology"]["matrix"][5][0] = "SYS"
    diffs = hwcheck.compare_drivers(facts, other, vendor="nvidia")
    assert keys(diffs) == {(BUSES[2], "compute_units"), (BUSES[0], "link to GPU 5")}
    assert {d["source"] for d in diffs} == {"nvml vs smi"}


def test_the_link_matrix_matches_the_recorded_topo(facts):
    topo = hwcheck.parse_topo((NVIDIA / "dgx-h100-mig.topo.txt").read_text())
    assert topo["labels"] == [f"GPU{i}" for i in range(8)]
    assert topo["numa"] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert hwcheck.compare_topology(facts, topo) == []
    altered = copy.deepcopy(topo)
    altered["matrix"][2][5] = altered["matrix"][5][2] = "SYS"
    altered["numa"][7] = 0
    assert keys(hwcheck.compare_topology(facts, altered)) == {
        (BUSES[2], "link to GPU 5"),
        (BUSES[7], "numa_node"),
    }


# -- MIG profiles against the catalog ------------------------------------------------------------


def test_mig_listings_parse_and_match_the_h100_catalog(facts):
    lgip = hwcheck.parse_lgip((NVIDIA / "dgx-h100-mig.mig-lgip.txt").read_text())
    lgipp = hwcheck.parse_lgipp((NVIDIA / "dgx-h100-mig.mig-lgipp.txt").read_text())
    assert sorted(lgip) == sorted(lgipp) == [6, 7]
    assert [row["id"] for row in lgip[6]] == [19, 20, 15, 14, 9, 5, 0]
    assert lgip[7][-1] == {
        "name": "7g.80gb",
        "id": 0,
        "free": 0,
        "max_instances": 1,
        "memory_gib": 79.25,
        "sm_count": 132,
        "ce": 8,
        "jpeg": 7,
        "ofa": 1,
    }
    assert lgipp[6][15] == {"placements": [0, 2, 4, 6], "size": 2}
    assert lgipp[6][5] == {"placements": [0], "size": 4}
    expected = hwcheck.catalog_table(catalog.nvidia_model("H100-SXM5-80GB"))
    gpu = facts["gpus"][6]
    table = hwcheck.smi_profile_table(lgip[6], lgipp[6])
    assert hwcheck.compare_profile_tables(table, expected, gpu, "smi") == []
    moved = (
        (NVIDIA / "dgx-h100-mig.mig-lgipp.txt")
        .read_text()
        .replace(
            "GPU  6 Profile ID  9 Placements: {0,4}:4", "GPU  6 Profile ID  9 Placements: {0,2,4}:4"
        )
    )
    table = hwcheck.smi_profile_table(lgip[6], hwcheck.parse_lgipp(moved)[6])
    diffs = hwcheck.compare_profile_tables(table, expected, gpu, "smi")
    assert [(d["field"], d["agent"], d["reference"]) for d in diffs] == [
        ("profile 9 (3g.40gb).placements", [0, 2, 4], [0, 4])
    ]


def test_the_agents_profile_table_has_the_catalogs_shape(facts):
    expected = hwcheck.catalog_table(catalog.nvidia_model("H100-SXM5-80GB"))
    for gpu in facts["gpus"]:
        table = gpu["mig"]["profiles"]
        assert hwcheck.compare_profile_tables(table, expected, gpu, "agent") == []


def test_a_difference_in_an_inferred_h200_row_says_so():
    model = catalog.nvidia_model("H200-141GB")
    expected = hwcheck.catalog_table(model)
    reported = copy.deepcopy(expected)
    for row in reported:
        row.pop("inferred")
        row["name_source"] = "driver"
    by_name = {row["name"]: row for row in reported}
    by_name["3g.71gb"]["placements"] = [0, 2, 4]
    by_name["7g.141gb"]["memory_mib"] = 143104
    by_name["1g.18gb"]["sm_count"] = 14  # not marked inferred in the catalog
    reported.append({"id": 99, "name": "9g.999gb", "placements": [0], "size": 8})
    gpu = {"index": 0, "pci_bus_id": "0000:18:00.0"}
    diffs = hwcheck.compare_profile_tables(reported, expected, gpu, "NVML")
    notes = {d["field"]: d["note"] for d in diffs}
    assert notes == {
        "profile 9 (3g.71gb).placements": "the catalog marks this inferred",
        "profile 0 (7g.141gb).memory_mib": "the catalog marks this inferred",
        "profile 19 (1g.18gb).sm_count": "",
        "profile 99 (9g.999gb)": "not in the catalog",
    }


def test_profiles_nvml_gives_without_names_or_placements_are_not_differences():
    expected = hwcheck.catalog_table(catalog.nvidia_model("H100-SXM5-80GB"))
    mig_off = [
        {**{k: row[k] for k in row if k != "inferred"}, "name": None, "placements": None}
        for row in expected
    ]
    gpu = {"index": 0, "pci_bus_id": "0000:18:00.0"}
    assert hwcheck.compare_profile_tables(mig_off, expected, gpu, "NVML") == []
    missing = mig_off[:-1]
    assert [d["field"] for d in hwcheck.compare_profile_tables(missing, expected, gpu, "x")] == [
        "profile 0 (7g.80gb)"
    ]


# -- health, workload, visibility ----------------------------------------------------------------


def test_health_fields_are_read_from_the_xml_as_printed():
    health = parsed()["gpus"][0]["health"]
    assert health["ecc_mode/current_ecc"] == "Enabled"
    assert health["ecc_errors/volatile/dram_uncorrectable"] == "0"
    assert health["retired_pages/pending_retirement"] == "N/A"
    assert health["remapped_rows/remapped_row_pending"] == "No"
    assert hwcheck.active_event_reasons(health) == ["gpu_idle"]
    mig_gpu = parsed()["gpus"][7]["health"]
    assert mig_gpu["remapped_rows/remapped_row_pending"] == "N/A"
    assert hwcheck.decode_event_reasons(0x1 | 0x4 | 0x1000) == [
        "gpu_idle",
        "sw_power_cap",
        "unknown_0x1000",
    ]


def test_a_matmul_rate_is_judged_against_the_datasheet_peak():
    peak = hwcheck.peak_tflops("NVIDIA H200")
    assert peak == 989.4
    good = {"tflops": 650.0, "products": 3000}
    assert hwcheck.judge_matmul(good, peak) == []
    assert hwcheck.judge_matmul(good, None) == []
    assert "above the datasheet peak" in hwcheck.judge_matmul({**good, "tflops": 2000.0}, peak)[0]
    assert "below 5%" in hwcheck.judge_matmul({**good, "tflops": 10.0}, peak)[0]
    assert hwcheck.judge_matmul(None, peak) == ["the workload printed no report"]
    assert hwcheck.judge_matmul({"tflops": 0, "products": 0}, None)


def _probe(**device: Any) -> dict[str, Any]:
    return {"device_count": 1, "devices": [device]}


def test_visibility_is_judged_by_uuid_then_pci_address():
    asked = "GPU-5d2a7c9e-8b1f-4c36-9e0a-2f7d1b6c8e45"
    assert hwcheck.judge_visibility(asked, None, _probe(uuid=asked[4:])) == ([], "uuid")
    problems, _ = hwcheck.judge_visibility(asked, None, _probe(uuid="GPU-1111"))
    assert problems == [f"device 0 is GPU-1111, not {asked}"]
    two = {"device_count": 2, "devices": [{"uuid": asked}, {"uuid": "x"}]}
    assert hwcheck.judge_visibility(asked, None, two)[0] == ["the child sees 2 devices, not 1"]
    by_bus = _probe(uuid=None, pci_bus_id="0000:18:00.0")
    assert hwcheck.judge_visibility(asked, "00000000:18:00.0", by_bus) == ([], "pci bus id")
    amd = _probe(uuid="GPU-unlike-amd-smi", pci_bus_id="0000:05:00.0")
    assert hwcheck.judge_visibility("00ff74a1", "0000:05:00.0", amd, ("pci_bus_id",)) == (
        [],
        "pci bus id",
    )
    assert hwcheck.judge_visibility(asked, None, {"error": "cannot import torch"})[0] == [
        "the probe failed: cannot import torch"
    ]
    assert hwcheck.judge_visibility(asked, None, _probe(name="H100"))[1] == "none"


# -- AMD -----------------------------------------------------------------------------------------


def _amd_facts(static: str, metric: str, listing: str, topology: str) -> dict[str, Any]:
    """Facts as the product's smi driver builds them from the same recorded amd-smi output."""
    gpus = smi_amd.build_gpus(
        smi_amd.parse_static(static),
        listing=smi_amd.parse_list(listing),
        metric=smi_amd.parse_metric(metric),
    )
    matrix = smi_amd.build_matrix(gpus, smi_amd.parse_topology(topology))
    return {
        "drivers": {"amd": "smi"},
        "gpus": gpus,
        "topology": {"gpus": [g["uuid"] for g in gpus], "matrix": matrix},
    }


def test_amd_facts_match_the_recorded_amd_smi_json():
    texts = {n: (AMD / f"{n}.json").read_text() for n in ("static", "metric", "list", "topology")}
    docs = {n: json.loads(t) for n, t in texts.items()}
    reference = hwcheck.parse_amd_smi(docs["static"], docs["metric"], docs["list"])
    assert len(reference) == 8
    assert reference[0]["pci_device_id"] == "0x74A11002"
    assert reference[0]["compute_units"] == 304 and reference[0]["gfx_target"] == "gfx942"
    amd_facts = _amd_facts(texts["static"], texts["metric"], texts["list"], texts["topology"])
    assert hwcheck.compare_amd_facts(amd_facts, reference) == []
    links = hwcheck.amd_link_types(docs["topology"])
    assert hwcheck.compare_amd_topology(amd_facts, links) == []
    altered = copy.deepcopy(amd_facts)
    altered["gpus"][1]["uuid"] = "ffffffff-0000-1000-8000-000000000000"
    altered["gpus"][2]["compute_units"] = 80
    bus = [hwcheck.bus_key(r["pci_bus_id"]) for r in reference]
    assert keys(hwcheck.compare_amd_facts(altered, reference)) == {
        (bus[1], "uuid"),
        (bus[2], "compute_units"),
    }
    unlinked = copy.deepcopy(amd_facts)
    unlinked["topology"]["matrix"][0][3] = unlinked["topology"]["matrix"][3][0] = "SYS"
    topology = hwcheck.compare_amd_topology(unlinked, links)
    assert keys(topology) == {(bus[0], "link to GPU 3")}


# -- the suite itself ----------------------------------------------------------------------------

WORKSTATION_ONLY = (
    "typer",
    "rich",
    "click",
    "paramiko",
    "fabric",
    "invoke",
    "tabulate",
    "numpy",
    "scipy",
    "kneed",
    "hdrhistogram",
    "plotext",
    "matplotlib",
    "hypothesis",
    "pytest_mock",
    "ansible",
    "ClusterShell",
    "prometheus_client",
    "gpupoolctl.cli",
    "gpupoolctl.remote",
)


def test_the_hardware_suite_collects_without_workstation_dependencies():
    """As on a GPU node: no third-party pytest plugins, and every workstation-only module (and
    gpupoolctl.cli, gpupoolctl.remote) made unimportable before the suite's modules load."""
    blocked = ",".join(repr(m) for m in WORKSTATION_ONLY)
    code = (
        "import sys\n"
        f"for name in ({blocked}):\n"
        "    sys.modules[name] = None\n"
        "import tests.hardware.survey, tests.hardware.nodeprobe, tests.hardware.hwcheck\n"
        "import pytest\n"
        "args = ['tests/hardware', '--collect-only', '-q', '-p', 'no:cacheprovider']\n"
        "sys.exit(pytest.main(args))\n"
    )
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(_REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=_REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "24 tests collected" in done.stdout, done.stdout


def test_the_agent_meets_the_hidden_binding(tmp_path):
    """The smi-fallback run: the stand-in shadows the installed pynvml (nvidia-ml-py is a test
    dependency here) in the agent child, and the agent still answers."""
    agent = nodeprobe.Agent(tmp_path)
    envelope = agent.request("facts", hide=("pynvml",), timeout=120)
    assert envelope["ok"], envelope["error"]
    assert agent.hidden_was_met(("pynvml",))
    # On a machine without a GPU no NVIDIA driver answers either way; on a GPU node, the smi one.
    expected = {"smi"} if nodeprobe.nvidia_absent() is None else set()
    assert set(envelope["data"]["drivers"].get("nvidia", "").split()) == expected
    plain = nodeprobe.Agent(tmp_path / "plain")
    assert plain.request("facts", timeout=120)["ok"]
    assert not plain.hidden_was_met(("pynvml",))
    blocked = subprocess.run(
        [sys.executable, "-c", "import pynvml"],
        env={**os.environ, "PYTHONPATH": str(agent.hidden_dir(("pynvml",)))},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "pynvml hidden by tests/hardware" in blocked.stderr


class SimNode:
    """nodeprobe.Node's shape over the simulator: the agent (a child, request on stdin) with `sim`
    set, the fake pynvml bound to the same state, and nvidia-smi answered from the recorded
    files. The smi-fallback run cannot hide a simulated pynvml, so both facts runs use nvml."""

    def __init__(self, work: Path, sim_dir: Path) -> None:
        self.python = sys.executable
        self.sim_dir = sim_dir
        self.agent = nodeprobe.Agent(
            work, sim={"template": TEMPLATE, "state_dir": str(sim_dir)}, host=HOST
        )
        self.calls: list[tuple[str, ...]] = []

    def smi(self, *args: str, timeout: float = 60) -> nodeprobe.Command:
        self.calls.append(args)
        files = {
            ("-q", "-x"): "dgx-h100-mig.q.xml",
            ("topo", "-m"): "dgx-h100-mig.topo.txt",
            ("mig", "-lgip"): "dgx-h100-mig.mig-lgip.txt",
            ("mig", "-lgipp"): "dgx-h100-mig.mig-lgipp.txt",
            ("--query-gpu=pci.bus_id,compute_cap", "--format=csv,noheader"): (
                "dgx-h100-mig.bus-compute-cap.csv"
            ),
        }
        name = files.get(tuple(args))
        if name is None:
            return nodeprobe.Command(list(args), 2, "", "not recorded", 0.0)
        return nodeprobe.Command(list(args), 0, (NVIDIA / name).read_text(), "", 0.0)

    def nvml(self) -> Any:
        from gpupoolctl.sim import SimState
        from gpupoolctl.sim import pynvml as fake

        fake.bind(SimState.open(HOST, TEMPLATE, self.sim_dir))
        fake.nvmlInit()
        return fake


def test_the_survey_runs_end_to_end_on_the_simulator(tmp_path, sim_dir, facts):
    node = SimNode(tmp_path / "node", sim_dir)
    out = tmp_path / "out"
    lines: list[str] = []
    data = survey.survey_nvidia(node, out, log=lines.append, matmul_seconds=0.1)
    assert data["errors"] == {}, data["errors"]
    assert data["hidden_binding_met"] is False  # a simulated node installs its fake pynvml
    assert data["notes"] == [
        "the smi driver reports no MIG instances (by design, smi_nvidia.py): its facts were "
        "not compared with nvidia-smi's mig_devices"
    ]
    assert ("mig", "-lgip") in node.calls and ("mig", "-lgipp") in node.calls
    diffs = data["differences"]
    assert sorted(diffs) == [
        "bus_id_form",
        "facts_nvml_vs_nvidia_smi",
        "facts_smi_vs_nvidia_smi",
        "mig_agent_vs_catalog",
        "mig_nvidia_smi_vs_catalog",
        "mig_nvml_vs_catalog",
        "nvml_vs_smi_driver",
        "topology_nvml_vs_topo",
        "topology_smi_vs_topo",
    ]
    assert all(items == [] for items in diffs.values()), survey.render_differences(diffs)
    # NVML read directly: the sim's profile table, placements included, on all 8 GPUs.
    tables = [entry["nvml"]["table"] for entry in data["mig"]["gpus"]]
    assert len(tables) == 8 and all(len(t) == 7 for t in tables)
    assert all(row["placements"] for t in tables for row in t)
    # Health: the simulator has no ECC/remap/throttle calls, which is reported, not hidden.
    assert data["health"]["gpus"][0]["nvml"]["ecc_mode"] == {
        "missing": "this pynvml has no such function"
    }
    assert data["health"]["gpus"][0]["nvidia_smi_active_event_reasons"] == ["gpu_idle"]
    # No GPU here: the launched probes and the burn run, and say why they could not measure.
    work = data["workload"]
    assert [p["asked"][:4] for p in work["probes"]] == ["GPU-"] * 6 + ["MIG-"] * 2
    assert [p["visible"] for p in work["probes"][:1]] == [
        {"CUDA_VISIBLE_DEVICES": facts["gpus"][0]["uuid"]}
    ]
    assert all(p["problems"] for p in work["probes"])
    assert work["matmul"]["asked"] == facts["gpus"][0]["uuid"]
    assert work["matmul"]["problems"]  # exit 3: no PyTorch/CuPy or no GPU on this machine
    for name in (
        "nvidia-smi-q-before.xml",
        "nvidia-smi-q-middle.xml",
        "nvidia-smi-q-after.xml",
        "facts-nvml.json",
        "facts-smi.json",
        "nvidia-smi-topo.txt",
        "nvidia-smi-mig-lgip.txt",
        "mig.json",
        "health.json",
        "workload.json",
        "differences.json",
        "differences.txt",
        "summary.txt",
        "timings.json",
    ):
        assert (out / name).is_file(), name
    assert json.loads((out / "differences.json").read_text()) == diffs
    summary = (out / "summary.txt").read_text()
    assert "facts_nvml_vs_nvidia_smi: 0 difference(s)" in summary
    assert "matmul on GPU 0" in summary


class RealishNvml:
    """The simulator's pynvml with the health calls a real libnvidia-ml answers (values as an
    idle H100 gives them; retired pages NOT_SUPPORTED, as on cards with row remapping) and,
    optionally, placements refused as NVML may refuse them with MIG off."""

    def __init__(self, base: Any, refuse_placements: bool = False) -> None:
        self._base = base
        self._refuse = refuse_placements

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)

    def _no(self, *args: Any) -> Any:
        raise self._base.NVMLError(self._base.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetGpuInstancePossiblePlacements(self, *args: Any) -> Any:
        if self._refuse:
            self._no()
        return self._base.nvmlDeviceGetGpuInstancePossiblePlacements(*args)

    def nvmlDeviceGetEccMode(self, handle: Any) -> list[int]:
        return [1, 1]

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, kind: int, counter: int) -> int:
        return 0

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        return (0, 0, 0, 0)

    nvmlDeviceGetRetiredPages = _no
    nvmlDeviceGetRetiredPagesPendingStatus = _no

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return 0x1

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return 31

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return 69520


def test_nvml_is_read_directly_and_refusals_are_kept(sim_dir):
    from gpupoolctl.sim import SimState
    from gpupoolctl.sim import pynvml as fake

    fake.bind(SimState.open(HOST, TEMPLATE, sim_dir))
    fake.nvmlInit()
    try:
        handle = fake.nvmlDeviceGetHandleByIndex(0)
        health = nodeprobe.nvml_health(RealishNvml(fake), handle)
        assert health["ecc_mode"] == {"value": [1, 1]}
        assert health["remapped_rows"] == {"value": [0, 0, 0, 0]}
        assert health["retired_pages_single_bit"]["code"] == fake.NVML_ERROR_NOT_SUPPORTED
        assert health["power_mw"] == {"value": 69520}
        assert not any("missing" in e or "failed" in e for e in health.values())
        line = survey._health_line(
            {
                "index": 0,
                "nvml": health,
                "nvidia_smi": parsed()["gpus"][0]["health"],
                "nvml_active_event_reasons": hwcheck.decode_event_reasons(0x1),
                "nvidia_smi_active_event_reasons": ["gpu_idle"],
            }
        )
        assert line.startswith("temperature 31 C (nvidia-smi 31 C); power 69.5 W (nvidia-smi")
        assert "event reasons gpu_idle (nvidia-smi gpu_idle)" in line
        read = nodeprobe.nvml_profiles(RealishNvml(fake), handle)
        assert [row["id"] for row in read["table"]] == [19, 14, 9, 5, 0, 20, 15]
        assert read["table"][2]["placements"] == [0, 4] and read["table"][2]["size"] == 4
        refused = nodeprobe.nvml_profiles(RealishNvml(fake, refuse_placements=True), handle)
        assert {row["placements"] for row in refused["table"]} == {None}
        assert {row["placement_error"] for row in refused["table"]} == {"Not Supported"}
        expected = hwcheck.catalog_table(catalog.nvidia_model("H100-SXM5-80GB"))
        gpu = {"index": 0, "pci_bus_id": BUSES[0]}
        for table in (read["table"], refused["table"]):
            assert hwcheck.compare_profile_tables(table, expected, gpu, "NVML") == []
    finally:
        fake.nvmlShutdown()


class SimAmdNode:
    """nodeprobe.Node's shape for AMD over the simulated MI300X node, amd-smi answered from
    tests/fixtures/amd-smi/mi300x-8-rocm7 (synthesised for the same layout: bus ids, memory
    and partitions agree with the simulator; its uuids are its own)."""

    def __init__(self, work: Path, sim_dir: Path) -> None:
        self.python = sys.executable
        self.agent = nodeprobe.Agent(
            work, sim={"template": "mi300x-8", "state_dir": str(sim_dir)}, host="sim-mi300x01"
        )

    def smi(self, *args: str, timeout: float = 60) -> nodeprobe.Command:
        path = AMD / f"{args[0]}.json"
        if args[1:] != ("--json",) or not path.is_file():
            return nodeprobe.Command(list(args), 2, "", "not recorded", 0.0)
        return nodeprobe.Command(list(args), 0, path.read_text(), "", 0.0)


def test_the_amd_survey_runs_end_to_end_on_the_simulator(tmp_path):
    node = SimAmdNode(tmp_path / "node", tmp_path / "sim")
    data = survey.survey_amd(node, tmp_path / "out", log=lambda line: None, matmul_seconds=0.1)
    assert data["errors"] == {}, data["errors"]
    diffs = data["differences"]
    assert sorted(diffs) == [
        "amdsmi_vs_smi_driver",
        "bus_id_form",
        "facts_amdsmi_vs_amd_smi",
        "facts_smi_vs_amd_smi",
        "topology_amdsmi_vs_amd_smi",
        "topology_smi_vs_amd_smi",
    ]
    # The recorded uuids are not the simulator's, and its GPU 2 runs a 64 GiB process the
    # simulator has not: exactly those, nothing else.
    found = diffs["facts_amdsmi_vs_amd_smi"]
    assert sorted((d["index"], d["field"]) for d in found) == sorted(
        [(i, "uuid") for i in range(8)] + [(2, "memory_used_mib")]
    )
    assert [d["reference"] for d in found if d["field"] == "memory_used_mib"] == [65819]
    assert diffs["topology_amdsmi_vs_amd_smi"] == []
    assert diffs["amdsmi_vs_smi_driver"] == []
    assert diffs["bus_id_form"] == []
    work = data["workload"]
    assert len(work["probes"]) == 8 and all(p["problems"] for p in work["probes"])
    assert work["probes"][0]["visible"] == {"ROCR_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0"}
    assert work["matmul"]["problems"]  # no GPU here
    assert data["health"]["bad_pages"]["rc"] == 2  # not recorded: reported as read
    assert (
        "facts_amdsmi_vs_amd_smi: 9 difference(s)" in (tmp_path / "out" / "summary.txt").read_text()
    )
