"""Names in a request that nothing could ever match: told apart from "the pool is too
small" (exit 5). A profile that no catalog and no slice of the pool has is a usage error
(exit 2: a typo, `9g.99gb`); a --host glob that matches no host of the pool is an unknown
host (exit 1), as DESIGN.md's exit codes say."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from functools import cache
from typing import Any

from gpupoolctl.errors import NotFound, UsageError
from gpupoolctl.sched.request import JobRequest

KINDS = ("gpu", "mig", "partition", "vf")


@cache
def catalog_profiles() -> frozenset[str]:
    """Every MIG profile of the bundled NVIDIA catalog and every AMD compute and memory
    mode (`cpx`, `cpx/nps4`), lower case."""
    from gpupoolctl.hw import amd_modes, catalog

    models = catalog.nvidia_models().values()
    names = {p.name.lower() for m in models if m.mig is not None for p in m.mig.profiles}
    for product in amd_modes.products().values():
        names.update(mode.lower() for mode in product.compute_modes)
        names.update(f"{c}/{m}".lower() for c, m in product.allowed)
    return frozenset(names)


def check_names(request: JobRequest, slices: Iterable[dict[str, Any]]) -> None:
    """Raise for a name in `request` that no slice in `slices` (the pool) could ever have;
    return when the names are known and only capacity is missing."""
    pool = list(slices)
    profile = (request.profile or "").strip().lower()
    if profile and profile not in KINDS and profile not in catalog_profiles():
        have = {str(s.get("profile") or "").lower() for s in pool}
        if profile not in have and profile not in {p.split("/")[0] for p in have}:
            raise UsageError(
                f"unknown profile {request.profile!r}: no catalog and no slice of the pool "
                "has it (see `gpupoolctl partition profiles`)"
            )
    if request.host is not None:
        hosts = {str(s.get("host")) for s in pool}
        if hosts and not any(fnmatch.fnmatchcase(h, request.host) for h in hosts):
            raise NotFound(f"--host {request.host!r} matches no host of the pool")
