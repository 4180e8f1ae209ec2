"""The amd-smi CLI fallback: pure parsers fed with amd-smi JSON shapes, and the driver."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpupoolctl.agent.drivers import smi_amd
from gpupoolctl.agent.drivers.base import DriverUnavailable

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "amd-smi"
MI300X = FIXTURES / "mi300x-8-rocm7"
MI210 = FIXTURES / "mi210-2-rocm61"


def text(folder: Path, name: str) -> str:
    return (folder / f"{name}.json").read_text()


def runner(folder: Path, missing: tuple[str, ...] = ()) -> smi_amd.Runner:
    """amd-smi answering from a fixture folder; absent files are commands it lacks."""

    def run(args: list[str]) -> str:
        command = args[0]
        path = folder / f"{command}.json"
        if command in missing or not path.exists():
            raise smi_amd.SmiCommandError(f"amd-smi {command}: invalid choice: '{command}'")
        return path.read_text()

    return run


class NoSysfs:
    def read_text(self, path: str) -> str:
        raise FileNotFoundError(path)

    def write_text(self, path: str, text: str) -> None:
        raise FileNotFoundError(path)


class OneVfSysfs(NoSysfs):
    def read_text(self, path: str) -> str:
        if path.startswith("/sys/bus/pci/devices/0000:05:00.0/"):
            return "8\n" if path.endswith("totalvfs") else "1\n"
        raise FileNotFoundError(path)


# -- parsers -----------------------------------------------------------------------------------


def test_parse_static_new_format() -> None:
    static = smi_amd.parse_static(text(MI300X, "static"))
    assert sorted(static) == list(range(8))
    first = static[0]
    assert first["model"] == "AMD Instinct MI300X"
    assert first["device_id"] == "0x74a1" and first["compute_units"] == 304
    assert first["gfx_target"] == "gfx942" and first["bdf"] == "0000:05:00.0"
    assert first["vram_total_mib"] == 196592 and first["bandwidth_gbps"] == 5300
    assert (first["compute"], first["memory"]) == ("SPX", "NPS1")  # accelerator_partition key
    assert [static[i]["numa_node"] for i in range(8)] == [0] * 4 + [1] * 4


def test_parse_static_old_format_without_partitions() -> None:
    static = smi_amd.parse_static(text(MI210, "static"))
    assert static[1]["model"] == "AMD Instinct MI210"
    assert static[1]["compute"] is None and static[1]["memory"] is None  # "N/A"
    assert static[1]["bandwidth_gbps"] is None and static[1]["compute_units"] is None


def test_parse_metric_and_list() -> None:
    metric = smi_amd.parse_metric(text(MI300X, "metric"))
    assert metric[2] == {
        "total_mib": 196592,
        "used_mib": 283 + 65536,
        "gfx_activity": 97,
        "ecc_uncorrectable": None,  # the fixture has no `ecc` section
        "ecc_deferred": None,
        "temperature_c": 43,
    }
    listing = smi_amd.parse_list(text(MI300X, "list"))
    assert listing[7]["bdf"] == "0000:e5:00.0"
    assert listing[7]["uuid"] == json.loads(text(MI300X, "list"))[7]["uuid"]
    assert len({v["uuid"] for v in listing.values()}) == 8


def test_parse_partition() -> None:
    parts = smi_amd.parse_partition(text(MI300X, "partition"))
    assert parts[3] == {"compute": "SPX", "memory": "NPS1", "memory_caps": ["NPS1", "NPS4"]}


def test_parse_partition_skips_profile_continuation_rows() -> None:
    document = {
        "current_partition": [
            {"gpu_id": 0, "memory": "NPS4", "accelerator_type": "CPX", "partition_id": "0"},
            {"gpu_id": "", "memory": "", "accelerator_type": ""},
        ],
        "memory_partition": [
            {"gpu_id": 0, "memory_partition_caps": "NPS1,NPS4", "current_memory_partition": "NPS4"}
        ],
    }
    parts = smi_amd.parse_partition(json.dumps(document))
    assert parts == {0: {"compute": "CPX", "memory": "NPS4", "memory_caps": ["NPS1", "NPS4"]}}


def test_parse_topology_both_formats() -> None:
    new = smi_amd.parse_topology(text(MI300X, "topology"))
    assert new[(0, 0)] == "SELF" and new[(0, 5)] == "XGMI" and len(new) == 64
    old = smi_amd.parse_topology(text(MI210, "topology"))
    assert old == {(0, 0): "SELF", (0, 1): "XGMI", (1, 0): "XGMI", (1, 1): "SELF"}


def test_parse_process() -> None:
    processes = smi_amd.parse_process(text(MI300X, "process"))
    assert processes[0] == []  # "No running processes detected"
    assert processes[2] == [
        {
            "pid": 48213,
            "name": "python3",
            "used_memory_mib": 65536,
            "gpu_instance_id": None,
            "compute_instance_id": None,
        }
    ]
    assert smi_amd.parse_process(text(MI210, "process")) == {0: [], 1: []}


def test_json_after_warning_lines_is_found() -> None:
    noisy = "WARNING: User is missing the following required groups: render\n" + text(MI210, "list")
    assert sorted(smi_amd.parse_list(noisy)) == [0, 1]


@pytest.mark.parametrize(
    ("parse", "payload", "expected"),
    [
        (smi_amd.parse_static, "Segmentation fault", "amd-smi static --json: expected JSON"),
        (smi_amd.parse_static, '{"gpus": 3}', "expected a list of per-GPU objects"),
        (smi_amd.parse_metric, '[{"usage": {}}]', "entry without an integer 'gpu'"),
        (smi_amd.parse_partition, "[]", "expected an object with 'current_partition'"),
        (smi_amd.parse_topology, '[{"gpu": 0}]', "neither 'links' nor 'link_type'"),
    ],
)
def test_bad_output_names_what_was_expected(parse, payload: str, expected: str) -> None:
    with pytest.raises(smi_amd.SmiParseError, match=expected):
        parse(payload)


def test_units_are_converted_to_mib() -> None:
    assert smi_amd._mib({"value": 65520, "unit": "MB"}) == 65520
    assert smi_amd._mib({"value": 2, "unit": "GiB"}) == 2048
    assert smi_amd._mib({"value": 68719476736, "unit": "B"}) == 65536
    assert smi_amd._mib("1.5 GB") == 1536
    assert smi_amd._mib("N/A") is None and smi_amd._mib({"value": "N/A", "unit": "MB"}) is None


# -- the driver --------------------------------------------------------------------------------


def test_driver_on_an_mi300x_node() -> None:
    driver = smi_amd.open_driver(run=runner(MI300X), sysfs=OneVfSysfs())
    assert (driver.name, driver.vendor) == ("smi", "amd")
    gpus = driver.gpus()
    assert len(gpus) == 8
    first = gpus[0]
    assert first["uuid"] == json.loads(text(MI300X, "list"))[0]["uuid"]
    assert first["pci_bus_id"] == "0000:05:00.0"
    assert first["pci_device_id"] == "0x74A11002"
    assert first["memory_total_mib"] == 196592 and first["bandwidth_class"] == "ultra"
    assert first["partition"] == {
        "compute": "SPX",
        "memory": "NPS1",
        "memory_caps": ["NPS1", "NPS4"],
    }
    assert first["sriov"] == {"total_vfs": 8, "num_vfs": 1}
    assert gpus[1]["sriov"] is None
    assert gpus[2]["processes"][0]["pid"] == 48213 and gpus[2]["utilization_pct"] == 97
    matrix = driver.link_matrix()
    assert all(matrix[i][j] == ("X" if i == j else "XGMI") for i in range(8) for j in range(8))
    assert driver.version() == "6.10.5"


def test_driver_on_an_older_release_without_partition_command() -> None:
    driver = smi_amd.open_driver(run=runner(MI210), sysfs=NoSysfs())
    gpus = driver.gpus()
    assert [g["model"] for g in gpus] == ["AMD Instinct MI210"] * 2
    assert all(g["partition"] is None for g in gpus)  # MI210 has no partitioning
    assert gpus[0]["memory_total_mib"] == 65520 and gpus[0]["memory_used_mib"] == 10
    assert gpus[0]["bandwidth_gbps"] is None and gpus[0]["bandwidth_class"] is None
    assert driver.link_matrix() == [["X", "XGMI"], ["XGMI", "X"]]


def test_pcie_links_by_numa() -> None:
    gpus = [{"index": i, "numa_node": n} for i, n in enumerate([0, 0, 1])]
    links = {(0, 1): "PCIE", (0, 2): "PCIE", (1, 2): "PCIE"}
    assert smi_amd.build_matrix(gpus, links) == [
        ["X", "NODE", "SYS"],
        ["NODE", "X", "SYS"],
        ["SYS", "SYS", "X"],
    ]


def test_amd_smi_missing_is_silently_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(smi_amd, "_find_amd_smi", lambda: None)
    with pytest.raises(DriverUnavailable) as excinfo:
        smi_amd.open_driver()
    assert str(excinfo.value) == ""


def test_amd_smi_without_a_driver_is_silently_absent() -> None:
    def run(args: list[str]) -> str:
        raise smi_amd.SmiCommandError(
            "amd-smi static --json: ERROR:root:Unable to get devices, driver not initialized "
            "(amdgpu not found in modules)"
        )

    with pytest.raises(DriverUnavailable) as excinfo:
        smi_amd.open_driver(run=run, sysfs=NoSysfs())
    assert str(excinfo.value) == ""


def test_amd_smi_with_unparseable_output_says_what_it_expected() -> None:
    def run(args: list[str]) -> str:
        return '{"gpu_data": [{"gpu": 0}]}' if args[0] == "static" else "<html>"

    with pytest.raises(DriverUnavailable, match="amd-smi list --json: expected JSON"):
        smi_amd.open_driver(run=run, sysfs=NoSysfs())


def test_subprocess_runner_reports_failures(tmp_path: Path) -> None:
    script = tmp_path / "amd-smi"
    script.write_text("#!/bin/sh\necho 'ERROR: no GPUs' >&2\nexit 7\n")
    script.chmod(0o755)
    with pytest.raises(smi_amd.SmiCommandError, match="amd-smi static --json: ERROR: no GPUs"):
        smi_amd.subprocess_runner(str(script))(["static", "--json"])
    good = tmp_path / "good"
    good.write_text("#!/bin/sh\necho '[]'\n")
    good.chmod(0o755)
    assert smi_amd.subprocess_runner(str(good))(["list", "--json"]).strip() == "[]"
