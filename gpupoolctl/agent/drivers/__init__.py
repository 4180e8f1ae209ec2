"""Driver selection on the node: one driver per vendor whose stack is present.

Order per vendor: the Python bindings (`nvml` via pynvml, `amdsmi` via amdsmi), then the
command-line tools (`smi`: nvidia-smi / amd-smi). On a simulated node the fake bindings are
installed in sys.modules first (gpupoolctl.sim.activate), so the same code path runs.
"""

from __future__ import annotations

from collections.abc import Callable

from gpupoolctl.agent.drivers.base import Driver, DriverUnavailable

Opener = Callable[[], Driver]


def _openers() -> dict[str, list[tuple[str, Opener]]]:
    from gpupoolctl.agent.drivers import amdsmi as amd_driver
    from gpupoolctl.agent.drivers import nvml as nvml_driver
    from gpupoolctl.agent.drivers import smi as smi_driver

    return {
        "nvidia": [("nvml", nvml_driver.open_driver), ("smi", smi_driver.open_nvidia)],
        "amd": [("amdsmi", amd_driver.open_driver), ("smi", smi_driver.open_amd)],
    }


def open_drivers(allow_cli: bool = True) -> tuple[list[Driver], list[str]]:
    """Open the best available driver for each vendor.

    Returns the drivers and warnings about stacks that are present but broken. A vendor whose
    stack is simply absent is skipped silently: most nodes have only one vendor.
    """
    drivers: list[Driver] = []
    warnings: list[str] = []
    for vendor, candidates in _openers().items():
        for name, opener in candidates:
            if name == "smi" and not allow_cli:
                continue
            try:
                drivers.append(opener())
                break
            except DriverUnavailable as exc:
                message = str(exc)
                if message:
                    warnings.append(f"{vendor}/{name}: {message}")
    return drivers, warnings


__all__ = ["Driver", "DriverUnavailable", "open_drivers"]
