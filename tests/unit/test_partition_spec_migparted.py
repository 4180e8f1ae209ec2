"""NVIDIA's own mig-parted configs parse unchanged and mean what mig-parted reads in them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpupoolctl.partition import load_spec

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "mig-parted"
FILES = sorted(FIXTURES.rglob("*.yaml"))


def test_fixtures_are_present() -> None:
    names = {p.relative_to(FIXTURES).as_posix() for p in FILES}
    assert {
        "examples/config.yaml",
        "examples/dgx-station-80gb-config.yaml",
        "deployments/systemd/config-default.yaml",
        "deployments/systemd/config.yaml",
        "deployments/systemd/config-ampere.yaml",
        "deployments/systemd/config-hopper.yaml",
    } <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_every_label_parses_with_the_same_entries(path: Path) -> None:
    spec = load_spec(path)
    raw = yaml.safe_load(path.read_text())
    assert spec.labels == list(raw["mig-configs"])
    for label, entries in raw["mig-configs"].items():
        parsed = spec.config(label)
        assert len(parsed) == len(entries)
        for entry, raw_entry in zip(parsed, entries, strict=True):
            devices = raw_entry["devices"]
            assert entry.devices == (devices if devices == "all" else tuple(devices))
            assert entry.mig_enabled is raw_entry["mig-enabled"]
            want = raw_entry.get("mig-devices") or {}
            assert {d.key: d.count for d in entry.mig_devices} == want
            assert all(d.start is None for d in entry.mig_devices)
            filt = raw_entry.get("device-filter") or []
            filt = [filt] if isinstance(filt, str) else filt
            assert entry.device_filter == tuple(f.upper().replace("0X", "0x") for f in filt)
            assert entry.hosts is None and entry.sriov_vfs is None and not entry.sets_amd


def test_examples_config_custom_config_by_hand() -> None:
    spec = load_spec(FIXTURES / "examples" / "config.yaml")
    entries = spec.config("custom-config")
    assert [(e.devices, e.mig_enabled) for e in entries] == [
        ((0, 1, 2, 3), False),
        ((4,), True),
        ((5,), True),
        ((6,), True),
        ((7,), True),
    ]
    last = entries[-1]
    assert [(str(d.profile), d.count) for d in last.mig_devices] == [
        ("1g.5gb", 2),
        ("2g.10gb", 1),
        ("3g.20gb", 1),
    ]
    assert last.line == 53 and last.mig_devices[0].line == 56
    assert spec.config("all-enabled")[0].mig_devices == ()


def test_default_config_device_filters_and_attributes_by_hand() -> None:
    spec = load_spec(FIXTURES / "deployments" / "systemd" / "config-default.yaml")
    balanced = spec.config("all-balanced")
    assert len(balanced) == 10
    a30 = next(e for e in balanced if e.device_filter == ("0x20B710DE",))  # a plain string
    assert {str(d.profile): d.count for d in a30.mig_devices} == {"1g.6gb": 2, "2g.12gb": 1}
    assert a30.matches_device(3, "0x20b710de") and not a30.matches_device(3, "0x233010DE")
    me_all = spec.config("all-1g.24gb.me.all")[0].mig_devices[0].profile
    assert (me_all.gi_name, me_all.attrs) == ("1g.24gb+me.all", ("me.all",))
    no_me = spec.config("all-1g.24gb-me")[0].mig_devices[0].profile
    assert no_me.neg_attrs == ("me",)


def test_dgx_station_per_device_entries() -> None:
    spec = load_spec(FIXTURES / "examples" / "dgx-station-80gb-config.yaml")
    entries = spec.config("balanced-k8s-dgx-station-80")
    assert [(e.device_filter, e.devices) for e in entries] == [
        (("0x20B210DE",), (0,)),
        (("0x20B210DE",), (1,)),
        (("0x20B210DE",), (2,)),
        (("0x20B210DE",), (4,)),
        (("0x1FB010DE",), (3,)),
    ]
    # mig-enabled: false with an empty mig-devices map is accepted, as mig-parted does.
    assert entries[0].mig_enabled is False and entries[0].mig_devices == ()
