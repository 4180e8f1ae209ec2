"""Simulated GPU hardware: fake `pynvml` and `amdsmi` modules backed by a JSON state file.

`activate(state)` installs the fakes under the real module names in sys.modules, so the
agent's `nvml` and `amdsmi` drivers run unchanged against them. Stdlib only.
"""

from __future__ import annotations

import sys

from gpupoolctl.sim.state import SimState


def activate(state: SimState) -> None:
    """Make `import pynvml` and `import amdsmi` return the fakes bound to `state`."""
    from gpupoolctl.sim import amdsmi as fake_amdsmi
    from gpupoolctl.sim import pynvml as fake_pynvml

    fake_pynvml.bind(state)
    fake_amdsmi.bind(state)
    sys.modules["pynvml"] = fake_pynvml
    sys.modules["amdsmi"] = fake_amdsmi


def deactivate() -> None:
    """Undo activate() (tests use this to keep sys.modules clean)."""
    for name in ("pynvml", "amdsmi"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__name__", "").startswith("gpupoolctl.sim."):
            del sys.modules[name]


__all__ = ["SimState", "activate", "deactivate"]
