"""One PCI bus id spelling, whichever driver read the card: the sysfs/lspci form.

NVML and nvidia-smi write `00000000:18:00.0`, amdsmi and amd-smi `0000:05:00.0`; the facts
carry `0000:18:00.0` from every driver (gpupoolctl.hw.pci.bus_id), so the inventory, the
exports and the planner see one form.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpupoolctl.agent.drivers import amdsmi as amdsmi_driver
from gpupoolctl.agent.drivers import nvml as nvml_driver
from gpupoolctl.agent.drivers import smi_amd, smi_nvidia
from gpupoolctl.hw.pci import bus_id
from gpupoolctl.sim import amdsmi as fake_amd
from gpupoolctl.sim import pynvml as fake_nvml
from gpupoolctl.sim.state import SimState

SYSFS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]")

addresses = st.tuples(
    st.integers(0, 0xFFFF) | st.integers(0x10000, 0xFFFFFFFF),  # VMD puts domains above ffff
    st.integers(0, 0xFF),
    st.integers(0, 0x1F),
    st.integers(0, 7),
)


def sysfs_form(address: tuple[int, int, int, int]) -> str:
    """What the kernel names /sys/bus/pci/devices/<address> (pci_name(): %04x:%02x:%02x.%d)."""
    domain, bus, device, function = address
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"


def nvml_form(address: tuple[int, int, int, int]) -> str:
    """What nvmlDeviceGetPciInfo's busId and `nvidia-smi --query-gpu=pci.bus_id` print."""
    domain, bus, device, function = address
    return f"{domain:08X}:{bus:02X}:{device:02X}.{function}"


@given(addresses)
@example((0, 0x18, 0, 0))
@example((0x10000, 0xE1, 0, 0))
def test_every_spelling_of_one_address_gives_the_sysfs_form(address) -> None:
    domain, bus, device, function = address
    wanted = sysfs_form(address)
    spellings = [
        nvml_form(address),
        nvml_form(address).lower(),
        wanted,
        wanted.upper(),
        f" {wanted}\n",
    ]
    if domain == 0:
        spellings.append(f"{bus:02x}:{device:02x}.{function}")  # lspci without -D
    assert {bus_id(text) for text in spellings} == {wanted}
    assert SYSFS.fullmatch(wanted) and bus_id(wanted) == wanted  # already right: unchanged


@given(st.text(max_size=20))
@example("")
@example("N/A")
@example("0000:18:20.0")  # device 0x20 is no PCI device number
def test_text_that_is_no_address_is_never_made_into_one(text: str) -> None:
    out = bus_id(text)
    assert out == text.strip() or SYSFS.fullmatch(out)
    assert bus_id(out) == out


def _nvidia_drivers(address: tuple[int, int, int, int]) -> set[str]:
    """GPU 0 of a simulated L40S node read by the nvml driver (the fake pynvml answers in
    NVML's form) and by the nvidia-smi driver (nvidia-smi's row in its form)."""
    seen = set()
    with tempfile.TemporaryDirectory() as folder:
        state = SimState.reset("n1", "l40s-4", Path(folder))
        with state.mutate() as data:
            data["nvidia"]["gpus"][0]["pci"]["bus_id"] = nvml_form(address)
        saved = sys.modules.get("pynvml")
        sys.modules["pynvml"] = fake_nvml
        fake_nvml.bind(state)
        try:
            driver = nvml_driver.open_driver()
            try:
                seen.add(driver.gpus()[0]["pci_bus_id"])
            finally:
                driver.close()
        finally:
            fake_nvml.bind(None)
            if saved is None:
                sys.modules.pop("pynvml", None)
            else:
                sys.modules["pynvml"] = saved
    row = (
        f"0, GPU-x, NVIDIA L40S, {nvml_form(address)}, 0x26B910DE, 46068, 0, 0, 8.9, "
        "[N/A], [N/A], 9001, 570.133.20"
    )
    seen.add(smi_nvidia.build_gpus(smi_nvidia.parse_query_gpu(row), [])[0]["pci_bus_id"])
    return seen


def _amd_drivers(address: tuple[int, int, int, int]) -> set[str]:
    """GPU 0 of a simulated MI300X node read by the amdsmi driver and from amd-smi's JSON."""
    amd_form = f"{address[0]:04x}:{address[1]:02x}:{address[2]:02x}.{address[3]}"
    seen = set()
    with tempfile.TemporaryDirectory() as folder:
        state = SimState.reset("m1", "mi300x-8", Path(folder))
        with state.mutate() as data:
            data["amd"]["gpus"][0]["bdf"] = amd_form
        saved = sys.modules.get("amdsmi")
        sys.modules["amdsmi"] = fake_amd
        fake_amd.bind(state)
        try:
            driver = amdsmi_driver.open_driver()
            try:
                seen.add(driver.gpus()[0]["pci_bus_id"])
            finally:
                driver.close()
        finally:
            fake_amd.bind(None)
            if saved is None:
                sys.modules.pop("amdsmi", None)
            else:
                sys.modules["amdsmi"] = saved
    static = {0: {"bdf": amd_form, "model": "AMD Instinct MI300X", "device_id": "0x74a1"}}
    seen.add(smi_amd.build_gpus(static)[0]["pci_bus_id"])
    return seen


@settings(max_examples=15, deadline=None)
@given(st.tuples(st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F), st.just(0)))
@example((0, 0x18, 0, 0))
@example((0x0001, 0xAB, 0x1F, 0))
def test_every_driver_gives_one_card_the_same_bus_id(address) -> None:
    # The fake amdsmi takes a 4-digit domain and numbers a card's partitions by function.
    assert _nvidia_drivers(address) == {sysfs_form(address)}
    assert _amd_drivers(address) == {sysfs_form(address)}
