"""nvidia-smi parsing on output in the real format (tests/fixtures/nvidia-smi)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupoolctl.agent.drivers import smi_nvidia
from gpupoolctl.agent.drivers.base import DriverUnavailable

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_query_gpu_dgx_with_mig() -> None:
    rows = smi_nvidia.parse_query_gpu(read("dgx-h100-mig.query-gpu.csv"))
    apps = smi_nvidia.parse_compute_apps(read("dgx-h100-mig.compute-apps.csv"))
    matrix, numa = smi_nvidia.parse_topo(read("dgx-h100-mig.topo.txt"))
    gpus = smi_nvidia.build_gpus(rows, apps, numa)
    assert len(gpus) == 8
    first = gpus[0]
    assert first["model"] == "NVIDIA H100 80GB HBM3"
    assert first["pci_bus_id"] == "0000:18:00.0" and first["pci_device_id"] == "0x233010DE"
    assert first["memory_total_mib"] == 81559 and first["compute_capability"] == "9.0"
    assert first["compute_units"] == 132  # from the catalog: nvidia-smi has no SM count
    assert round(first["bandwidth_gbps"]) == 3352 and first["bandwidth_class"] == "ultra"
    assert first["mig"] == {
        "capable": True,
        "mode": "disabled",
        "pending": "disabled",
        "instances": [],
    }
    assert gpus[6]["mig"]["mode"] == "enabled" and gpus[6]["utilization_pct"] is None
    assert gpus[1]["utilization_pct"] == 87
    assert gpus[1]["processes"] == [
        {
            "pid": 48213,
            "name": "/usr/bin/python3",
            "used_memory_mib": 34560,
            "gpu_instance_id": None,
            "compute_instance_id": None,
        }
    ]
    assert gpus[6]["processes"][0]["used_memory_mib"] is None  # [N/A]
    assert [g["numa_node"] for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(matrix[i][j] == ("X" if i == j else "NV18") for i in range(8) for j in range(8))


def test_l40s_no_mig_and_pcie_levels() -> None:
    rows = smi_nvidia.parse_query_gpu(read("l40s-4.query-gpu.csv"))
    apps = smi_nvidia.parse_compute_apps(read("l40s-4.compute-apps.csv"))
    matrix, numa = smi_nvidia.parse_topo(read("l40s-4.topo.txt"))
    gpus = smi_nvidia.build_gpus(rows, apps, numa)
    assert all(g["mig"]["capable"] is False and g["mig"]["mode"] == "n/a" for g in gpus)
    assert all(g["bandwidth_class"] == "standard" for g in gpus)
    assert matrix[0] == ["X", "PIX", "NODE", "NODE"] and numa == {0: 0, 1: 0, 2: 0, 3: 0}
    assert apps == []


@pytest.mark.parametrize("raw", ["N/A", "[N/A]", "[Not Supported]"])
def test_missing_values_are_none(raw: str) -> None:
    line = (
        f"0, GPU-x, NVIDIA L40S, 00000000:4F:00.0, 0x26B910DE, 46068, 0, {raw}, 8.9, "
        f"{raw}, {raw}, {raw}, 570.133.20"
    )
    gpu = smi_nvidia.build_gpus(smi_nvidia.parse_query_gpu(line), [])[0]
    assert gpu["utilization_pct"] is None and gpu["bandwidth_gbps"] is None
    assert gpu["mig"]["capable"] is False


def test_unknown_card_has_no_catalog_values() -> None:
    line = (
        "0, GPU-y, NVIDIA Mystery, 00000000:01:00.0, 0x12345678, 8192, 1, 3, 7.5, "
        "[N/A], [N/A], 5001, 570.1"
    )
    gpu = smi_nvidia.build_gpus(smi_nvidia.parse_query_gpu(line), [])[0]
    assert gpu["compute_units"] is None and gpu["bandwidth_gbps"] is None


def test_bad_output_names_what_was_expected() -> None:
    with pytest.raises(smi_nvidia.SmiParseError, match=r"expected 13 comma-separated fields"):
        smi_nvidia.parse_query_gpu("0, GPU-x, NVIDIA L40S\n")
    with pytest.raises(smi_nvidia.SmiParseError, match="expected an integer index"):
        smi_nvidia.parse_query_gpu(", ".join(["x"] * 13))
    with pytest.raises(smi_nvidia.SmiParseError, match="header row starting with GPU0"):
        smi_nvidia.parse_topo("NVIDIA-SMI has failed\n")
    with pytest.raises(smi_nvidia.SmiParseError, match="unexpected link level"):
        smi_nvidia.parse_topo("\tGPU0\tGPU1\nGPU0\t X \tWAT\nGPU1\tWAT\t X \n")
    with pytest.raises(smi_nvidia.SmiParseError, match="integer pid"):
        smi_nvidia.parse_compute_apps("GPU-x, notapid, python, 12\n")


def test_missing_tool_is_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(smi_nvidia.shutil, "which", lambda name: None)
    with pytest.raises(DriverUnavailable) as info:
        smi_nvidia.open_driver()
    assert str(info.value) == ""


def test_open_driver_runs_the_three_queries(monkeypatch: pytest.MonkeyPatch) -> None:
    outputs = {
        "--query-gpu": read("l40s-4.query-gpu.csv"),
        "--query-compute-apps": "",
        "topo": read("l40s-4.topo.txt"),
    }
    seen: list[list[str]] = []

    def fake_run(args: list[str]) -> str:
        seen.append(args)
        return next(v for k, v in outputs.items() if args[1].startswith(k))

    monkeypatch.setattr(smi_nvidia.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(smi_nvidia, "_run", fake_run)
    driver = smi_nvidia.open_driver(
        health_run=lambda args: (None, "", "not asked"), kernel_log=lambda: None
    )
    assert len(driver.gpus()) == 4 and driver.version() == "570.133.20"
    assert driver.link_matrix()[0][1] == "PIX" and driver.name == "smi"
    assert seen[0][1] == "--query-gpu=" + ",".join(smi_nvidia.QUERY_FIELDS)
