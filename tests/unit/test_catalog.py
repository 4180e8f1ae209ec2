"""The MIG catalog: geometry as data, loadable from a zip payload."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpupoolctl.hw import catalog

ROOT = Path(__file__).resolve().parents[2]


def test_required_models_present() -> None:
    models = catalog.nvidia_models()
    for key in ("H100-SXM5-80GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "H200-141GB", "L40S"):
        assert key in models
    assert models["L40S"].mig is None


@pytest.mark.parametrize("key", [k for k, m in catalog.nvidia_models().items() if m.mig])
def test_placements_fit_the_geometry(key: str) -> None:
    geometry = catalog.nvidia_model(key).mig
    assert geometry is not None
    ids = [p.id for p in geometry.profiles]
    indices = [p.index for p in geometry.profiles]
    assert len(set(ids)) == len(ids) and len(set(indices)) == len(indices)
    for profile in geometry.profiles:
        assert profile.max_instances <= len(profile.placement_starts)
        assert profile.compute_slices <= geometry.compute_slices
        for start, size in profile.placements():
            assert start >= 0 and start + size <= geometry.memory_slots


def test_a100_40gb_table_matches_the_mig_guide() -> None:
    geometry = catalog.find_nvidia_model("0x20F110DE").mig  # A100-PCIE-40GB
    assert geometry is not None
    p = geometry.by_name("MIG 3g.20gb")
    assert (p.id, p.index, p.memory_mib, p.sm_count, p.placement_starts, p.placement_size) == (
        9,
        2,
        19968,
        42,
        (0, 4),
        4,
    )
    assert geometry.by_id(15).name == "1g.10gb" and geometry.by_id(15).placement_size == 2
    assert geometry.by_index(0).name == "1g.5gb"


def test_inferred_values_are_marked() -> None:
    h200 = catalog.nvidia_model("H200-141GB").mig
    assert h200 is not None
    assert all("placement_starts" in p.inferred for p in h200.profiles)
    h100 = catalog.nvidia_model("H100-SXM5-80GB").mig
    assert h100 is not None and not any(p.inferred for p in h100.profiles)


def test_geometry_is_not_always_eight_slots() -> None:
    a30 = catalog.nvidia_model("A30-24GB").mig
    assert a30 is not None and a30.memory_slots == 4


def test_compute_instance_profiles_follow_the_a100_listing() -> None:
    geometry = catalog.nvidia_model("A100-SXM4-40GB").mig
    assert geometry is not None
    seven = catalog.compute_instance_profiles(geometry.by_id(0))
    assert [(c.name, c.id, c.max_instances) for c in seven] == [
        ("1c.7g.40gb", 0, 7),
        ("2c.7g.40gb", 1, 3),
        ("3c.7g.40gb", 2, 2),
        ("4c.7g.40gb", 3, 1),
        ("7g.40gb", 4, 1),
    ]
    three = catalog.compute_instance_profiles(geometry.by_id(9))
    assert [(c.name, c.id) for c in three][-1] == ("3g.20gb", 2)


def test_lookup_by_name_and_unknown() -> None:
    assert catalog.find_nvidia_model(name="NVIDIA H100 80GB HBM3").key == "H100-SXM5-80GB"
    assert catalog.find_nvidia_model(0x233010DE).key == "H100-SXM5-80GB"
    assert catalog.find_nvidia_model("0xDEADBEEF") is None
    with pytest.raises(catalog.CatalogError, match="unknown NVIDIA model"):
        catalog.nvidia_model("B999")


def test_loads_from_a_zip_payload(tmp_path: Path) -> None:
    payload = tmp_path / "agent.zip"
    with zipfile.ZipFile(payload, "w") as zf:
        for path in (ROOT / "gpupoolctl").rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                zf.write(path, path.relative_to(ROOT).as_posix())
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from gpupoolctl.hw import catalog;"
        "assert catalog.__file__.startswith(sys.argv[1]), catalog.__file__;"
        "print(catalog.nvidia_model('H100-SXM5-80GB').mig.by_id(9).name)"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code, str(payload)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    assert out.stdout.strip() == "3g.40gb"
