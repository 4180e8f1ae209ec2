"""Catalog models added for partitioning: Blackwell, H100 96GB/GH200, RTX PRO 6000."""

from __future__ import annotations

import pytest

from gpupoolctl.hw import catalog
from gpupoolctl.hw.mig_names import parse_profile_name


@pytest.mark.parametrize(
    ("pci", "key"),
    [
        ("0x290110DE", "B200-180GB"),
        ("0x234210DE", "H100-96GB"),
        ("0x232910DE", "H100-96GB"),  # H20
        ("0x234810DE", "GH200-144GB"),
        ("0x2BB510DE", "RTX-PRO-6000-96GB"),
        ("0x20F310DE", "A100-SXM4-80GB"),  # A800 80GB
        ("0x232410DE", "H100-SXM5-80GB"),  # H800 80GB
        ("0x232110DE", "H100-NVL-94GB"),
        ("0x233510DE", "H200-141GB"),
        ("0x20B710DE", "A30-24GB"),
    ],
)
def test_pci_ids_from_mig_parted_resolve(pci: str, key: str) -> None:
    model = catalog.find_nvidia_model(pci)
    assert model is not None and model.key == key


def test_every_profile_name_is_canonical_and_matches_its_slices() -> None:
    for model in catalog.nvidia_models().values():
        if model.mig is None:
            continue
        for profile in model.mig.profiles:
            parsed = parse_profile_name(profile.name)
            assert str(parsed) == profile.name
            assert parsed.g == profile.compute_slices, (model.key, profile.name)


def test_rtx_pro_6000_geometry_is_twelve_slots() -> None:
    geometry = catalog.nvidia_model("RTX-PRO-6000-96GB").mig
    assert geometry is not None
    assert (geometry.memory_slots, geometry.compute_slices) == (12, 4)
    assert geometry.by_name("1g.24gb").placements() == [(0, 3), (3, 3), (6, 3), (9, 3)]
    assert geometry.by_name("2g.48gb").placements() == [(0, 6), (6, 6)]
    assert geometry.by_name("4g.96gb").placements() == [(0, 12)]
    assert {p.name for p in geometry.profiles} >= {
        "1g.24gb+me",
        "1g.24gb+gfx",
        "1g.24gb+me.all",
        "1g.24gb-me",
        "2g.48gb+gfx",
        "2g.48gb+me.all",
        "2g.48gb-me",
        "4g.96gb+gfx",
    }
    assert [c.name for c in catalog.compute_instance_profiles(geometry.by_name("4g.96gb"))] == [
        "1c.4g.96gb",
        "2c.4g.96gb",
        "3c.4g.96gb",
        "4g.96gb",
    ]


def test_b200_table_and_what_is_inferred() -> None:
    geometry = catalog.nvidia_model("B200-180GB").mig
    assert geometry is not None
    names = [p.name for p in geometry.profiles]
    assert names == [
        "1g.23gb",
        "1g.23gb+me",
        "1g.45gb",
        "2g.45gb",
        "3g.90gb",
        "4g.90gb",
        "7g.180gb",
    ]
    assert geometry.by_id(15).name == "1g.45gb" and geometry.by_id(15).placement_size == 2
    assert "id" in geometry.by_name("3g.90gb").inferred
    assert "id" not in geometry.by_name("2g.45gb").inferred
    assert all("placement_starts" in p.inferred for p in geometry.profiles)


def test_blackwell_mode_changes_need_no_reset_note() -> None:
    assert catalog.nvidia_model("B200-180GB").architecture == "blackwell"
    assert catalog.nvidia_model("H100-96GB").compute_capability == "9.0"
