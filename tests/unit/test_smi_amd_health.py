"""GPU health through amd-smi: `metric`'s ecc and temperature sections in the shapes of
several releases, `bad-pages`, resets and ring hangs from the kernel log, and that nothing
unread is ever judged ok."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.agent.drivers import smi_amd
from gpupoolctl.hw import health as rules

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "amd-smi"
MI300X = FIXTURES / "mi300x-8-rocm7"

# amd-smi 24.6+ (ROCm 6.2 and later): wrapped in gpu_data, {"value", "unit"} objects,
# ecc totals named *_count; an Instinct card's edge sensor reads N/A.
METRIC_NEW = json.dumps(
    {
        "gpu_data": [
            {
                "gpu": 0,
                "usage": {"gfx_activity": {"value": 0, "unit": "%"}},
                "temperature": {
                    "edge": "N/A",
                    "hotspot": {"value": 41, "unit": "C"},
                    "mem": {"value": 34, "unit": "C"},
                },
                "ecc": {
                    "total_correctable_count": 12,
                    "total_uncorrectable_count": 0,
                    "total_deferred_count": 0,
                    "cache_correctable_count": 0,
                    "cache_uncorrectable_count": 0,
                },
            },
            {
                "gpu": 1,
                "temperature": {"edge": "N/A", "hotspot": {"value": 107, "unit": "C"}},
                "ecc": {
                    "total_correctable_count": 0,
                    "total_uncorrectable_count": 3,
                    "total_deferred_count": 1,
                    "cache_correctable_count": 0,
                    "cache_uncorrectable_count": 0,
                },
            },
        ]
    }
)
# amd-smi of ROCm 6.0: a bare list, plain numbers, ecc as correctable/uncorrectable (no
# deferred); GPU 1 could not read its ECC and its hotspot (the N/A strings amd-smi prints).
METRIC_OLD = json.dumps(
    [
        {
            "gpu": 0,
            "usage": {"gfx_activity": 3},
            "temperature": {"edge": 45, "hotspot": 52, "mem": "N/A"},
            "ecc": {"correctable": 0, "uncorrectable": 0},
        },
        {
            "gpu": 1,
            "temperature": {"edge": "44 \u00b0C", "hotspot": "N/A", "mem": "N/A"},
            "ecc": {"total_correctable": "N/A", "total_uncorrectable": "N/A"},
        },
    ]
)
BAD_PAGES = json.dumps(
    [
        {
            "gpu": 0,
            "retired": "No bad pages found.",
            "pending": "No bad pages found.",
            "un_res": "No bad pages found.",
        },
        {
            "gpu": 1,
            "retired": [
                {"page_address": "0x7f3a2000", "page_size": 4096, "status": "RESERVED"},
                {"page_address": "0x7f3a6000", "page_size": 4096, "status": "RESERVED"},
            ],
            "pending": {"page_address": "0x81c40000", "page_size": 4096, "status": "PENDING"},
            "un_res": "No bad pages found.",
        },
    ]
)


def gpus_at(*buses: str) -> list[dict[str, Any]]:
    return [{"index": i, "pci_bus_id": bus} for i, bus in enumerate(buses)]


# -- parsers -----------------------------------------------------------------------------------


def test_metric_new_shape() -> None:
    metric = smi_amd.parse_metric(METRIC_NEW)
    assert metric[0]["ecc_uncorrectable"] == 0 and metric[0]["ecc_deferred"] == 0
    assert metric[0]["temperature_c"] == 41  # the hotspot, not the N/A edge
    assert (metric[1]["ecc_uncorrectable"], metric[1]["ecc_deferred"]) == (3, 1)
    assert metric[1]["temperature_c"] == 107


def test_metric_old_shape() -> None:
    metric = smi_amd.parse_metric(METRIC_OLD)
    assert metric[0]["ecc_uncorrectable"] == 0 and metric[0]["ecc_deferred"] is None
    assert metric[0]["temperature_c"] == 52
    assert metric[1]["ecc_uncorrectable"] is None  # "N/A"
    assert metric[1]["temperature_c"] == 44  # no hotspot: the edge, from "44 °C"


def test_metric_with_an_error_string_for_ecc() -> None:
    text = json.dumps([{"gpu": 0, "ecc": "AMDSMI_STATUS_NOT_SUPPORTED", "temperature": "N/A"}])
    metric = smi_amd.parse_metric(text)
    assert metric[0]["ecc_uncorrectable"] is None and metric[0]["temperature_c"] is None


def test_bad_pages() -> None:
    pages = smi_amd.parse_bad_pages(BAD_PAGES)
    assert pages[0] == {"bad_pages": 0, "bad_pages_pending": 0}
    assert pages[1] == {"bad_pages": 2, "bad_pages_pending": 1}
    unreadable = json.dumps([{"gpu": 0, "retired": "N/A", "pending": "N/A", "un_res": "N/A"}])
    assert smi_amd.parse_bad_pages(unreadable)[0] == {"bad_pages": None, "bad_pages_pending": None}
    older = json.dumps({"gpu_data": [{"gpu": 0, "retired": "No bad pages found.", "pending": []}]})
    assert smi_amd.parse_bad_pages(older)[0] == {"bad_pages": 0, "bad_pages_pending": 0}


# -- health ------------------------------------------------------------------------------------


def test_health_from_metric_bad_pages_and_kernel_log() -> None:
    gpus = gpus_at("0000:05:00.0", "0000:26:00.0")
    records = [
        (time.time() - 30, "amdgpu 0000:26:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1"),
        (time.time() - 20, "amdgpu 0000:26:00.0: amdgpu: GPU reset begin!"),
    ]
    smi_amd.build_health(
        gpus, smi_amd.parse_metric(METRIC_NEW), smi_amd.parse_bad_pages(BAD_PAGES), records
    )
    healthy, broken = (g["health"] for g in gpus)
    assert healthy["unknown"] == [] and healthy["events"] == []
    assert healthy["temperature_c"] == 41 and healthy["bad_pages"] == 0
    assert broken["events"] == ["GPU_PRE_RESET", "RING_HANG"]
    assert rules.judge(healthy, "amd")["verdict"] == "ok"
    judged = rules.judge(broken, "amd")
    assert judged["verdict"] == "failed"
    assert any("uncorrectable ECC" in reason for reason in judged["reasons"])
    assert any("105 C" in reason for reason in judged["reasons"])


def test_old_release_leaves_what_it_lacks_unknown() -> None:
    gpus = gpus_at("0000:05:00.0", "0000:26:00.0")
    smi_amd.build_health(gpus, smi_amd.parse_metric(METRIC_OLD), None, None)
    first, second = (g["health"] for g in gpus)
    assert first["unknown"] == ["ecc_deferred", "bad_pages", "bad_pages_pending", "events"]
    assert second["unknown"] == [
        "ecc_uncorrectable",
        "ecc_deferred",
        "bad_pages",
        "bad_pages_pending",
        "events",
    ]
    assert "bad_pages: amd-smi bad-pages --json failed (absent in a VM guest)" in first["notes"]
    assert rules.judge(first, "amd")["verdict"] == "ok"  # what it read is fine, the rest listed
    assert set(rules.judge(second, "amd")["unknown"]) >= {"ecc_uncorrectable", "events"}


def test_nothing_readable_is_unknown_never_ok() -> None:
    gpus = gpus_at("0000:05:00.0")
    smi_amd.build_health(gpus, None, None, None)
    health = gpus[0]["health"]
    assert set(health["unknown"]) == set(rules.SIGNALS["amd"])
    assert all(health[name] is None for name in rules.SIGNALS["amd"])
    judged = rules.judge(health, "amd")
    assert judged["verdict"] == "unknown" and judged["action"] == "CHECK_BY_HAND"


def test_all_na_metric_is_unknown_never_ok() -> None:
    text = json.dumps(
        [{"gpu": 0, "temperature": {"edge": "N/A", "hotspot": "N/A"}, "ecc": {"x": "N/A"}}]
    )
    gpus = gpus_at("0000:05:00.0")
    smi_amd.build_health(gpus, smi_amd.parse_metric(text), None, None)
    assert rules.judge(gpus[0]["health"], "amd")["verdict"] == "unknown"


# -- the driver --------------------------------------------------------------------------------


class NoSysfs:
    def read_text(self, path: str) -> str:
        raise FileNotFoundError(path)

    def write_text(self, path: str, text: str) -> None:
        raise FileNotFoundError(path)


def fixture_runner(answers: dict[str, str]) -> smi_amd.Runner:
    def run(args: list[str]) -> str:
        command = args[0]
        if command in answers:
            return answers[command]
        path = MI300X / f"{command}.json"
        if not path.exists():
            raise smi_amd.SmiCommandError(f"amd-smi {command}: invalid choice: '{command}'")
        return path.read_text()

    return run


def test_driver_reads_bad_pages_and_the_kernel_log() -> None:
    bad = json.dumps(
        {
            "gpu_data": [
                {"gpu": i, "retired": "No bad pages found.", "pending": "No bad pages found."}
                for i in range(8)
            ]
        }
    )
    driver = smi_amd.open_driver(
        run=fixture_runner({"bad-pages": bad}), sysfs=NoSysfs(), kernel_log=lambda: []
    )
    healths = [g["health"] for g in driver.gpus()]
    assert len(healths) == 8
    # The fixture's metric has temperatures and no ecc section.
    assert healths[0]["unknown"] == ["ecc_uncorrectable", "ecc_deferred"]
    assert healths[0]["temperature_c"] == 41 and healths[0]["bad_pages"] == 0
    assert all(rules.judge(h, "amd")["verdict"] == "ok" for h in healths)


def test_driver_without_bad_pages_command_or_kernel_log() -> None:
    driver = smi_amd.open_driver(run=fixture_runner({}), sysfs=NoSysfs(), kernel_log=lambda: None)
    health = driver.gpus()[0]["health"]
    assert {"bad_pages", "bad_pages_pending", "events"} <= set(health["unknown"])


@pytest.mark.parametrize("answer", ["<html>", '{"unexpected": 1}'])
def test_unparseable_bad_pages_costs_bad_pages_only(answer: str) -> None:
    driver = smi_amd.open_driver(
        run=fixture_runner({"bad-pages": answer}), sysfs=NoSysfs(), kernel_log=lambda: []
    )
    gpus = driver.gpus()
    assert len(gpus) == 8
    health = gpus[0]["health"]
    assert {"bad_pages", "bad_pages_pending"} <= set(health["unknown"])
    assert any(note.startswith("bad_pages: amd-smi bad-pages --json") for note in health["notes"])
