"""The `smi` fallback: parse the vendor command-line tools when the Python bindings are absent.

NVIDIA: `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` (smi_nvidia).
AMD: `amd-smi ... --json` (smi_amd).
"""

from __future__ import annotations

from gpupoolctl.agent.drivers.base import Driver


def open_nvidia() -> Driver:
    from gpupoolctl.agent.drivers import smi_nvidia

    return smi_nvidia.open_driver()


def open_amd() -> Driver:
    from gpupoolctl.agent.drivers import smi_amd

    return smi_amd.open_driver()
