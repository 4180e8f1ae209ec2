"""The partition CLI's helpers without a fan-out: hooks files and driver-vs-catalog profiles."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.cli.partition_fanout import HostFacts
from gpupoolctl.errors import SourceError
from gpupoolctl.hw import catalog
from gpupoolctl.inventory.model import Host
from gpupoolctl.partition.hooks import load_hooks
from gpupoolctl.partition.profiles import compare_with_catalog as compare
from gpupoolctl.remote.results import HostResult
from gpupoolctl.remote.target import target_from_vars

# -- hooks files -------------------------------------------------------------------------------


def test_mig_parted_hooks_become_argv_lists(tmp_path: Path) -> None:
    path = tmp_path / "hooks.yaml"
    path.write_text(
        """
version: v1
hooks:
  apply-start:
    - command: /bin/true
  pre-apply-config:
    - workdir: /etc/nvidia-mig-manager
      command: /bin/bash
      args: ["-x", "-c", "source hooks.sh; stop_k8s_components"]
      envs: {KUBECONFIG: /etc/kubernetes/admin.conf}
"""
    )
    assert load_hooks(path) == {
        "apply-start": [["/bin/true"]],
        "pre-apply-config": [
            [
                "env",
                "-C",
                "/etc/nvidia-mig-manager",
                "KUBECONFIG=/etc/kubernetes/admin.conf",
                "/bin/bash",
                "-x",
                "-c",
                "source hooks.sh; stop_k8s_components",
            ]
        ],
    }


def test_plain_argv_hooks(tmp_path: Path) -> None:
    path = tmp_path / "hooks.yaml"
    path.write_text("apply-exit:\n  - [systemctl, start, kubelet]\n")
    assert load_hooks(path) == {"apply-exit": [["systemctl", "start", "kubelet"]]}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("post-apply:\n  - [true]\n", "unknown hook 'post-apply'"),
        ("apply-exit:\n  - systemctl start kubelet\n", "without a shell"),
        ("apply-exit: [[]]\n", "non-empty argv list"),
        ("version: v2\nhooks: {}\n", "unknown hooks file version"),
        ("apply-exit:\n  - {command: x, shell: true}\n", "unknown key(s) 'shell'"),
        ("apply-exit: [\n", "not valid YAML"),
        ("- a\n", "expected a map"),
    ],
)
def test_bad_hooks_files_name_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "hooks.yaml"
    path.write_text(text)
    with pytest.raises(SourceError) as excinfo:
        load_hooks(path)
    assert message in str(excinfo.value) and str(path) in str(excinfo.value)


# -- driver profiles vs the catalog ------------------------------------------------------------


def driver_table(key: str) -> list[dict[str, Any]]:
    mig = catalog.nvidia_model(key).mig
    assert mig is not None
    return [
        {
            "name": p.name,
            "name_source": "driver",
            "id": p.id,
            "slices": p.compute_slices,
            "memory_mib": p.memory_mib,
            "sm_count": p.sm_count,
            "max_instances": p.max_instances,
            "placements": list(p.placement_starts),
            "size": p.placement_size,
        }
        for p in mig.profiles
    ]


def host_with(profiles: list[dict[str, Any]]) -> HostFacts:
    gpus = [
        {
            "index": i,
            "vendor": "nvidia",
            "model": "NVIDIA H100 80GB HBM3",
            "pci_device_id": "0x233010DE",
            "mig": {
                "capable": True,
                "mode": "disabled",
                "instances": [],
                "profiles": copy.deepcopy(profiles),
            },
        }
        for i in range(2)
    ]
    host = Host(name="n1")
    result = HostResult("n1", "ok", data={"gpus": gpus})
    return HostFacts(host, target_from_vars("n1", {"transport": "local"}), result)


def test_driver_table_equal_to_catalog_has_no_differences() -> None:
    rows, differences = compare([host_with(driver_table("H100-SXM5-80GB"))], None)
    assert differences == []
    assert len(rows) == 7 and {r["gpus"] for r in rows} == {"0,1"}
    assert {r["model"] for r in rows} == {"H100-SXM5-80GB"}


def test_every_difference_is_reported() -> None:
    table = driver_table("H100-SXM5-80GB")
    by_name = {p["name"]: p for p in table}
    by_name["2g.20gb"]["placements"] = [0, 2]
    by_name["3g.40gb"]["memory_mib"] = 39936
    by_name["1g.10gb"]["name"] = "1g.12gb"
    table.remove(by_name["1g.10gb+me"])
    table.append(dict(by_name["7g.80gb"], id=42, name="7g.80gb+gfx"))
    _, differences = compare([host_with(table)], None)
    where = "n1 GPU 0,1 (H100-SXM5-80GB)"
    assert sorted(differences) == sorted(
        [
            f"{where}: 2g.20gb (id 14): placement starts is [0, 2] on the driver, "
            "[0, 2, 4] in the catalog",
            f"{where}: 3g.40gb (id 9): memory MiB is 39936 on the driver, 40448 in the catalog",
            f"{where}: 1g.12gb (id 19): name is 1g.12gb on the driver, 1g.10gb in the catalog",
            f"{where}: driver offers 7g.80gb+gfx (id 42), which the catalog does not list",
            f"{where}: catalog lists 1g.10gb+me (id 20), the driver does not offer it",
        ]
    )


def test_names_filled_from_the_catalog_are_not_compared() -> None:
    table = driver_table("H100-SXM5-80GB")
    for profile in table:
        profile["name_source"] = "catalog"
    assert compare([host_with(table)], None)[1] == []
    assert compare([host_with(table)], "A100-SXM4-40GB") == ([], [])


# -- the confirmation on a terminal --------------------------------------------------------------


def test_confirmation_names_the_gpus_a_change_also_reaches(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import typer

    from gpupoolctl.cli import partition_cmd
    from tests.unit.test_partition_reach import CPX_NPS4, mi300x_gpu, plan_of, with_matrix

    node = with_matrix([mi300x_gpu(i) for i in range(3)], [0, 0, 0])
    for i, gpu in enumerate(node["gpus"]):
        gpu["pci_bus_id"] = f"0000:{i + 5:02x}:00.0"
    asked: list[str] = []
    monkeypatch.setattr(typer, "confirm", lambda text, **_: asked.append(text) or True)
    partition_cmd._confirm([plan_of(CPX_NPS4.format(index=1), node)], yes=False)
    assert asked == ["Change 1 GPU(s) on 1 host(s)?"]
    assert "n1 GPU 1: SPX/NPS1 -> CPX/NPS4 (2 ops, also changes GPU(s) 0, 2)" in (
        capsys.readouterr().err
    )
