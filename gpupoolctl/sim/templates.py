"""Named node templates for the simulated pool (e.g. "dgx-h100", "mi300x-8").

Each vendor module contributes builders: template name -> function(host) -> {vendor: section}.
Builders are deterministic in the host name, so every simulated node has its own stable UUIDs
and bus ids, and a reset gives back exactly the same node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Builder = Callable[[str], dict[str, Any]]


def registry() -> dict[str, Builder]:
    import gpupoolctl.sim.amd_templates as amd_templates
    import gpupoolctl.sim.nvidia_templates as nvidia_templates

    merged: dict[str, Builder] = {}
    merged.update(nvidia_templates.TEMPLATES)
    merged.update(amd_templates.TEMPLATES)
    return merged


def names() -> list[str]:
    return sorted(registry())


def build(template: str, host: str) -> dict[str, Any]:
    builders = registry()
    if template not in builders:
        raise KeyError(f"unknown sim template {template!r}; known: {', '.join(sorted(builders))}")
    return builders[template](host)
