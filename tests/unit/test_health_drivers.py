"""Each health signal through the real nvml and amdsmi drivers on the sim (faults written
with gpupoolctl.sim.faults, as `gpupoolctl sim fault` does), and the kernel log parser."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.agent.drivers import amdsmi as amd_driver
from gpupoolctl.agent.drivers import kmsg
from gpupoolctl.agent.drivers import nvml as nvml_driver
from gpupoolctl.hw import health as rules
from gpupoolctl.sim import amdsmi as fake_amd
from gpupoolctl.sim import faults
from gpupoolctl.sim import pynvml as fake_nvml
from gpupoolctl.sim.state import SimState


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amd)
    yield
    fake_nvml.bind(None)
    fake_amd.bind(None)


def nvidia_health(state: SimState) -> list[dict[str, Any]]:
    fake_nvml.bind(state)
    driver = nvml_driver.open_driver()
    try:
        return [g["health"] for g in driver.gpus()]
    finally:
        driver.close()


def amd_health(state: SimState) -> list[dict[str, Any]]:
    fake_amd.bind(state)
    driver = amd_driver.open_driver()
    try:
        return [g["health"] for g in driver.gpus()]
    finally:
        driver.close()


def inject(state: SimState, gpu: int | None, *specs: str) -> None:
    faults.apply_faults(state, gpu, faults.parse_faults(list(specs)))


def test_a_healthy_h100_reads_every_signal(tmp_path: Path, fakes: None) -> None:
    state = SimState.reset("n1", "dgx-h100", tmp_path)
    for health in nvidia_health(state):
        assert health["unknown"] == [] and health["lost"] is False
        assert health["ecc_uncorrected_volatile"] == 0 and health["xids"] == []
        assert health["remapped_rows"] == {
            "correctable": 0, "uncorrectable": 0, "pending": False, "failed": False
        }  # fmt: skip
        assert health["retired_pages_pending"] is None  # Hopper remaps rows instead
        assert isinstance(health["temperature_c"], int)
        assert rules.judge(health, "nvidia")["verdict"] == "ok"


@pytest.mark.parametrize(
    ("specs", "check"),
    [
        (("ecc=3",), lambda h: h["ecc_uncorrected_volatile"] == 3),
        (("row-remap=pending",), lambda h: h["remapped_rows"]["pending"] is True),
        (("row-remap=failed",), lambda h: h["remapped_rows"]["failed"] is True),
        (
            ("temp=95",),
            lambda h: h["temperature_c"] == 95 and "hw_thermal_slowdown" in h["throttle_reasons"],
        ),
        (("xid=79",), lambda h: [e["xid"] for e in h["xids"]] == [79]),
        (("lost",), lambda h: h["lost"] is True and "temperature_c" in h["unknown"]),
    ],
)
def test_each_nvidia_signal_through_the_nvml_driver(
    tmp_path: Path, fakes: None, specs: tuple[str, ...], check: Any
) -> None:
    state = SimState.reset("n1", "dgx-h100", tmp_path)
    inject(state, 2, *specs)
    healths = nvidia_health(state)
    assert check(healths[2]), healths[2]
    assert rules.judge(healths[2], "nvidia")["verdict"] in ("failed", "degraded")
    assert all(rules.judge(h, "nvidia")["verdict"] == "ok" for i, h in enumerate(healths) if i != 2)


def test_xid_comes_from_the_log_and_once_as_an_nvml_event(tmp_path: Path, fakes: None) -> None:
    state = SimState.reset("n1", "dgx-h100", tmp_path)
    inject(state, 1, "xid=48")
    first = nvidia_health(state)[1]["xids"]
    assert [e["xid"] for e in first] == [48]  # the log's line and the event are one XID
    again = nvidia_health(state)[1]["xids"]  # the event is gone, the log keeps the line
    assert [(e["xid"], e["source"]) for e in again] == [(48, "kernel-log")]
    faults.clear_faults(state, 1)
    assert nvidia_health(state)[1]["xids"] == []


def test_xids_unknown_without_the_kernel_log(
    tmp_path: Path, fakes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = SimState.reset("n1", "l40s-4", tmp_path)
    monkeypatch.delattr(fake_nvml, "gpupool_sim_kernel_log")
    monkeypatch.setattr(kmsg, "read_kernel_log", lambda: None)  # as without permission
    health = nvidia_health(state)[0]
    assert health["xids"] is None and "xids" in health["unknown"]
    inject(state, 0, "xid=79")  # an event pending on the set still counts
    assert [e["source"] for e in nvidia_health(state)[0]["xids"]] == ["nvml-event"]


def test_remapped_rows_unknown_on_mig_with_instances(tmp_path: Path, fakes: None) -> None:
    state = SimState.reset("n1", "dgx-h100-mig", tmp_path)
    healths = nvidia_health(state)
    with_instances = [h for h in healths if "remapped_rows" in h["unknown"]]
    assert with_instances, "the template has MIG instances"
    for health in with_instances:
        assert health["remapped_rows"] is None
        assert any("MIG" in note for note in health["notes"])
        assert rules.judge(health, "nvidia")["verdict"] == "ok"  # other signals were read


def test_unsupported_calls_are_unknown(tmp_path: Path, fakes: None) -> None:
    state = SimState.reset("n1", "a100-pcie-4", tmp_path)
    with state.mutate() as data:
        data["nvidia"]["gpus"][0]["unsupported"] = [
            "nvmlDeviceGetTotalEccErrors",
            "nvmlDeviceGetTemperature",
        ]
    health = nvidia_health(state)[0]
    assert {"ecc_uncorrected_volatile", "temperature_c"} <= set(health["unknown"])
    assert health["ecc_uncorrected_volatile"] is None and health["temperature_c"] is None


def test_each_amd_signal_through_the_amdsmi_driver(tmp_path: Path, fakes: None) -> None:
    state = SimState.reset("n1", "mi300x-8", tmp_path)
    healthy = amd_health(state)
    assert all(h["unknown"] == [] and rules.judge(h, "amd")["verdict"] == "ok" for h in healthy)
    inject(state, 1, "ecc=2")
    inject(state, 2, "ecc-deferred=4")
    inject(state, 3, "bad-pages=5")
    inject(state, 4, "ring-hang")
    inject(state, 5, "reset")
    inject(state, 6, "temp=108")
    healths = amd_health(state)
    assert healths[1]["ecc_uncorrectable"] == 2
    assert healths[2]["ecc_deferred"] == 4
    assert healths[3]["bad_pages"] == 5 and healths[3]["bad_pages_pending"] == 0
    assert "RING_HANG" in healths[4]["events"]
    assert "GPU_PRE_RESET" in healths[5]["events"]
    assert healths[6]["temperature_c"] == 108
    verdicts = [rules.judge(h, "amd")["verdict"] for h in healths]
    assert verdicts == ["ok", "failed", "degraded", "degraded", "failed", "failed", "degraded",
                        "ok"]  # fmt: skip


def test_amd_unsupported_reads_are_unknown(tmp_path: Path, fakes: None) -> None:
    state = SimState.reset("n1", "mi300x-8", tmp_path)
    fake_amd.bind(state)
    fake_amd.sim_inject_fault("amdsmi_get_gpu_total_ecc_count", "AMDSMI_STATUS_NOT_SUPPORTED")
    health = amd_health(state)[0]
    assert {"ecc_uncorrectable", "ecc_deferred"} <= set(health["unknown"])
    assert any("not supported" in n for n in health["notes"])


def test_fault_specs_are_checked() -> None:
    assert faults.parse_faults(["xid=79", "lost"]) == [("xid", 79), ("lost", None)]
    for bad in (["xid"], ["xid=abc"], ["lost=1"], ["row-remap=maybe"], ["bogus"], []):
        with pytest.raises(faults.FaultError):
            faults.parse_faults(bad)


def test_kernel_log_parser() -> None:
    records = [
        (1.0, "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', GPU has fallen off the bus."),
        (2.0, "NVRM: Xid (PCI:0000:2a:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel"),
        (3.0, "NVRM: Xid (PCI:0000:99:00): 13, not one of ours"),
        (4.0, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module"),
        (None, "amdgpu 0000:0c:00.0: amdgpu: GPU reset begin!"),
    ]
    found = kmsg.xid_events(records, ["0000:18:00.0", "0000:2a:00.0"])
    assert {k: [e["xid"] for e in v] for k, v in found.items()} == {0: [79], 1: [94]}
    assert kmsg.amd_events(records, ["0000:0c:00.0", "0000:0c:00.1"]) == {
        0: ["GPU_PRE_RESET"],
        1: ["GPU_PRE_RESET"],
    }
    assert kmsg._parse_record("6,1234,5000000,-;NVRM: Xid (PCI:0000:18:00): 48, x\n", 100.0) == (
        105.0,
        "NVRM: Xid (PCI:0000:18:00): 48, x",
    )


def test_kernel_log_reader_is_bounded_and_non_blocking(tmp_path: Path) -> None:
    assert kmsg.read_kernel_log(str(tmp_path / "absent")) is None
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a writer that never writes
    try:
        assert kmsg.read_kernel_log(str(fifo), budget_s=0.2) == []  # EAGAIN: no wait
    finally:
        os.close(writer)
