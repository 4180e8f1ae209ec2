"""Run-time MIG profiles in the facts: read from the driver, named, with their placements."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.agent.drivers import nvml as nvml_driver
from gpupoolctl.hw import catalog
from gpupoolctl.sim import pynvml as fake
from gpupoolctl.sim.state import SimState


@pytest.fixture
def use_fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    yield
    fake.bind(None)


def gpus_of(tmp_path: Path, template: str) -> list[dict[str, Any]]:
    fake.bind(SimState.reset("n1", template, tmp_path))
    fake.reset_calls()
    driver = nvml_driver.open_driver()
    try:
        return driver.gpus()
    finally:
        driver.close()


def catalog_rows(key: str) -> list[tuple[Any, ...]]:
    mig = catalog.nvidia_model(key).mig
    assert mig is not None
    return sorted(
        (
            p.name,
            p.id,
            p.compute_slices,
            p.memory_mib,
            p.sm_count,
            p.max_instances,
            list(p.placement_starts),
            p.placement_size,
        )
        for p in mig.profiles
    )


def rows(gpu: dict[str, Any]) -> list[tuple[Any, ...]]:
    return sorted(
        (
            p["name"],
            p["id"],
            p["slices"],
            p["memory_mib"],
            p["sm_count"],
            p["max_instances"],
            p["placements"],
            p["size"],
        )
        for p in gpu["mig"]["profiles"]
    )


def test_profiles_with_mig_off_are_read_and_named_from_the_catalog(tmp_path, use_fake):
    gpus = gpus_of(tmp_path, "dgx-h100")
    for gpu in gpus:
        assert rows(gpu) == catalog_rows("H100-SXM5-80GB")
        # NVML's MIG-off query carries no names: they come from the catalog, and say so.
        assert {p["name_source"] for p in gpu["mig"]["profiles"]} == {"catalog"}
    # One table read per model, not per GPU: 18 profile queries + one placement call each.
    assert fake.CALLS["nvmlDeviceGetGpuInstanceProfileInfo"] == 18
    assert fake.CALLS["nvmlDeviceGetGpuInstancePossiblePlacements"] == len(rows(gpus[0]))


def test_names_from_a_mig_enabled_gpu_of_the_same_model(tmp_path, use_fake):
    gpus = gpus_of(tmp_path, "dgx-h100-mig")
    for gpu in gpus:
        assert rows(gpu) == catalog_rows("H100-SXM5-80GB")
        assert {p["name_source"] for p in gpu["mig"]["profiles"]} == {"driver"}


def test_a100_profiles_and_cards_without_mig(tmp_path, use_fake):
    a100 = gpus_of(tmp_path, "a100-pcie-4")
    assert all(rows(g) == catalog_rows("A100-SXM4-40GB") for g in a100)
    l40s = gpus_of(tmp_path, "l40s-4")
    assert all("profiles" not in g["mig"] for g in l40s)


def test_driver_table_wins_over_the_catalog(tmp_path, use_fake, monkeypatch):
    # A driver whose 2g profile allows fewer placements than the catalog says: facts report
    # what the driver says.
    real = fake.nvmlDeviceGetGpuInstancePossiblePlacements

    def fewer(device, profile_id, array, count):
        result = real(device, profile_id, array, count)
        if profile_id == 14:
            count._obj.value = 2
        return result

    monkeypatch.setattr(fake, "nvmlDeviceGetGpuInstancePossiblePlacements", fewer)
    gpus = gpus_of(tmp_path, "dgx-h100")
    two_g = next(p for p in gpus[0]["mig"]["profiles"] if p["id"] == 14)
    assert two_g["placements"] == [0, 2]
