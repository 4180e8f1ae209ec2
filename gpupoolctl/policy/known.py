"""What the hardware catalogs know: MIG profiles and AMD modes a rule may name.

A rule may only allow what some card can be cut into. When the rule names a model that the
catalog knows, its profiles/modes are checked against that model's; otherwise against every
model of the vendor (the hosts a rule selects are only known once the inventory is read).
A model is named by a case-insensitive part of a catalog key or name, as rules match cards.
"""

from __future__ import annotations

from gpupoolctl.hw import amd_modes, catalog


def _named(model: str, *names: str) -> bool:
    wanted = model.lower()
    return any(wanted in name.lower() for name in names)


def _nvidia(model: str | None) -> list[catalog.NvidiaModel]:
    models = list(catalog.nvidia_models().values())
    return [m for m in models if model is None or _named(model, m.key, *m.names)]


def _amd(model: str | None) -> list[amd_modes.AmdProduct]:
    products = list(amd_modes.products().values())
    return [p for p in products if model is None or _named(model, p.key, p.name, *p.market_names)]


def nvidia_profiles(model: str | None = None, *, strict: bool = False) -> list[str]:
    """GPU-instance profile names of the MIG models `model` names; of every MIG model when
    it names none (or is None), unless `strict`, which then gives []."""
    chosen = [m for m in _nvidia(model) if m.mig is not None]
    if not chosen and not strict:
        chosen = [m for m in _nvidia(None) if m.mig is not None]
    seen: dict[str, None] = {}
    for entry in chosen:
        for profile in entry.mig.profiles if entry.mig else ():
            seen.setdefault(profile.name, None)
    return list(seen)


def amd_mode_pairs(model: str | None = None, *, strict: bool = False) -> list[str]:
    """'compute/memory' pairs (lower case) the AMD products `model` names allow; those of
    every product when it names none (or is None), unless `strict`, which then gives []."""
    chosen = _amd(model)
    if not chosen and not strict:
        chosen = _amd(None)
    seen: dict[str, None] = {}
    for product in chosen:
        for compute, memory in product.allowed:
            seen.setdefault(f"{compute}/{memory}".lower(), None)
    return list(seen)


def model_cannot_be_cut(model: str) -> bool:
    """True when the text names catalog models and none of them has MIG or AMD modes (an
    L40S); False for a model the catalog does not know (it may be newer than the catalog)."""
    nvidia, amd = _nvidia(model), _amd(model)
    return bool(nvidia) and not amd and all(m.mig is None for m in nvidia)
