"""PCI addresses in one spelling: the one Linux sysfs and lspci use.

NVML and nvidia-smi write a GPU's bus id with an 8-digit upper-case domain
(`00000000:18:00.0`), amdsmi and amd-smi with a 4-digit lower-case one (`0000:05:00.0`).
Every driver passes its bus ids through `bus_id()`, so the facts, everything that reads
them (inventory, exports, the planner's card grouping) and the people who read the output
see one form: `0000:18:00.0`, the name of the card's folder in /sys/bus/pci/devices. NVML's
own look-ups (nvmlDeviceGetHandleByPciBusId, `nvidia-smi -i`) accept it as well: they parse
the domain as a hex number of any width.
"""

from __future__ import annotations

import re

# domain (optional, any width), bus, device, function; a device of 00-1f, a function of 0-7.
_ADDRESS = re.compile(
    r"(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<device>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])"
)


def bus_id(raw: str) -> str:
    """`00000000:18:00.0`, `0000:18:00.0` or `18:00.0` -> `0000:18:00.0`.

    The domain keeps at least 4 hex digits (sysfs prints `%04x`: a domain above ffff keeps
    its digits), bus and device 2, everything lower case. Text that is no PCI address (an
    empty string when the driver could not read one) is returned stripped, unchanged
    otherwise: it is data, never guessed into an address.
    """
    text = raw.strip()
    match = _ADDRESS.fullmatch(text)
    if match is None:
        return text
    domain = int(match["domain"] or "0", 16)
    bus = int(match["bus"], 16)
    device = int(match["device"], 16)
    function = int(match["function"], 16)
    if device > 0x1F:
        return text
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def is_vfio(driver: str) -> bool:
    """Whether a PCI driver name is vfio-pci or a vendor variant of it ("*_vfio_pci"): a VF
    bound to one is in use only while a user (a VM) has it open. The agent's SR-IOV checks
    and the simulated sysfs both apply this rule."""
    return driver == "vfio-pci" or driver.endswith("_vfio_pci")
