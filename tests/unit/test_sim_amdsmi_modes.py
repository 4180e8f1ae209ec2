"""The AMD partition rules as data (gpupoolctl.hw.amd_modes), checked against the reference."""

from __future__ import annotations

import io
import json
import pkgutil
import sys
import zipfile
from pathlib import Path

import pytest

from gpupoolctl.hw import amd_modes


def test_mi300x_rules_from_the_reference() -> None:
    p = amd_modes.product("mi300x")
    assert p.compute_units == 304 and p.gfx_target == "gfx942"
    assert p.partitions("CPX") == 8 and p.partitions("SPX") == 1
    # The validated matrix, and "NPS4 only with CPX".
    for pair in [("SPX", "NPS1"), ("DPX", "NPS2"), ("CPX", "NPS4"), ("CPX", "NPS1")]:
        assert p.is_allowed(*pair)
    assert [c for c in p.compute_modes if p.is_allowed(c, "NPS4")] == ["CPX"]
    assert not p.is_allowed("SPX", "NPS4") and not p.is_allowed("SPX", "NPS2")
    # Setting NPS4 alone moves SPX to CPX.
    assert p.compute_for_memory("SPX", "NPS4") == "CPX"
    assert p.compute_for_memory("CPX", "NPS1") == "CPX"
    assert p.vf_counts("SPX", "NPS1") == [1] and p.vf_counts("CPX", "NPS4") == [1, 8]


def test_other_products() -> None:
    assert amd_modes.product("mi325x").is_allowed("SPX", "NPS1")
    assert amd_modes.product("mi325x").memory_caps() == ["NPS1"]
    for key in ("mi350x", "mi355x"):
        p = amd_modes.product(key)
        assert p.is_allowed("SPX", "NPS1") and p.is_allowed("DPX", "NPS2")
        assert p.compute_units == 256 and "NPS4" not in p.memory_modes
        assert p.vf_counts("CPX", "NPS2") == [1, 8]


@pytest.mark.parametrize("key", sorted(amd_modes.products()))
def test_every_allowed_pair_obeys_the_stated_rules(key: str) -> None:
    p = amd_modes.product(key)
    for compute, memory in p.allowed:
        assert p.memory_modes[memory] <= p.compute_modes[compute]
    assert p.is_allowed(*p.default)
    assert p.allowed[p.default] == "validated"


def test_lookup_by_device_id_or_name() -> None:
    assert amd_modes.find_product(device_id="0x74a1").key == "mi300x"
    assert amd_modes.find_product(device_id=0x74B5).key == "mi300x"  # the MxGPU VF
    assert amd_modes.find_product("MI300X-O").key == "mi300x"
    assert amd_modes.find_product("AMD Radeon PRO W7900", "0x7448") is None
    with pytest.raises(KeyError, match="known"):
        amd_modes.product("mi999")


def test_loads_from_a_zip_payload(tmp_path: Path) -> None:
    # The agent runs from a zip: the data file must come through pkgutil, not a path.
    root = Path(amd_modes.__file__).resolve().parents[1]
    archive = tmp_path / "agent.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(root / "__init__.py", "gpupoolctl/__init__.py")
        zf.write(root / "hw" / "__init__.py", "gpupoolctl/hw/__init__.py")
        zf.write(root / "hw" / "amd_modes.py", "gpupoolctl/hw/amd_modes.py")
        zf.write(
            root / "hw" / "data" / "amd_partitions.json", "gpupoolctl/hw/data/amd_partitions.json"
        )
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from gpupoolctl.hw import amd_modes as m;"
        "assert m.__file__.startswith(sys.argv[1]), m.__file__;"
        "print(m.product('mi300x').partitions('CPX'))"
    )
    import subprocess

    done = subprocess.run(
        [sys.executable, "-I", "-c", script, str(archive)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "8"


def test_malformed_data_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    document = json.loads(pkgutil.get_data("gpupoolctl.hw", "data/amd_partitions.json"))
    document["products"]["mi300x"]["allowed"].append(
        {"compute": "SPX", "memory": "NPS4", "basis": "rule"}
    )
    monkeypatch.setattr(
        pkgutil, "get_data", lambda *_: io.BytesIO(json.dumps(document).encode()).getvalue()
    )
    amd_modes.products.cache_clear()
    try:
        with pytest.raises(amd_modes.AmdModesError, match="more memory partitions"):
            amd_modes.products()
    finally:
        monkeypatch.undo()
        amd_modes.products.cache_clear()
