"""Simulated GPU hardware: fake `pynvml` and `amdsmi` modules backed by a JSON state file.

`activate(state)` installs the fakes under the real module names in sys.modules, so the
agent's `nvml` and `amdsmi` drivers run unchanged against them. Stdlib only.
"""

from __future__ import annotations

import sys

from gpupoolctl.sim.state import SimState

# Vendor section of the state file -> (module name the drivers import, the fake behind it).
_FAKES = {"nvidia": ("pynvml", "gpupoolctl.sim.pynvml"), "amd": ("amdsmi", "gpupoolctl.sim.amdsmi")}


def activate(state: SimState) -> None:
    """Make `import pynvml` and `import amdsmi` return the fakes bound to `state`.

    A vendor the node has no section for gets None in sys.modules, so `import` fails as on
    a node without that vendor's stack: the real library, if the machine happens to have
    one, must never answer for a simulated node. Importing only the fakes a node needs also
    keeps the agent's start-up short.
    """
    import importlib

    for vendor, (module_name, fake_name) in _FAKES.items():
        if state.section(vendor) is None:
            sys.modules[module_name] = None  # type: ignore[assignment]
            continue
        fake = importlib.import_module(fake_name)
        fake.bind(state)
        sys.modules[module_name] = fake


def deactivate() -> None:
    """Undo activate() (tests use this to keep sys.modules clean)."""
    for name, _ in _FAKES.values():
        if name not in sys.modules:
            continue
        module = sys.modules[name]
        if module is None or getattr(module, "__name__", "").startswith("gpupoolctl.sim."):
            del sys.modules[name]


__all__ = ["SimState", "activate", "deactivate"]
