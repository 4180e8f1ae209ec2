"""What every vendor driver provides to the agent.

A driver reports the GPUs of one vendor on the node as plain dicts (the `Gpu` facts shape
documented in gpupoolctl/hw/model.py) and the link matrix among those GPUs.
"""

from __future__ import annotations

from typing import Any, Protocol


class DriverUnavailable(Exception):
    """The vendor stack is absent on this node (no library, no driver loaded, no tool)."""


class Driver(Protocol):
    name: str  # "nvml", "amdsmi", "smi", ...
    vendor: str  # "nvidia" or "amd"
    # Optional: a driver may also carry `warnings: list[str]`, fields it could not read;
    # facts.collect passes them on to the workstation.

    def gpus(self) -> list[dict[str, Any]]:
        """One facts dict per GPU, in the driver's index order."""
        ...

    def link_matrix(self) -> list[list[str]]:
        """Square matrix over gpus(): "X" on the diagonal, else a level such as "NV18",
        "XGMI", "PIX", "PXB", "PHB", "NODE" or "SYS" (nvidia-smi topo -m vocabulary)."""
        ...

    def version(self) -> str | None:
        """Driver/library version string, when known."""
        ...

    def close(self) -> None: ...
