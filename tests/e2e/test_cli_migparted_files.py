"""NVIDIA's own mig-parted files, unchanged, through `partition apply` and `assert`."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mig-parted"
EXAMPLES = FIXTURES / "examples" / "config.yaml"
DEFAULTS = FIXTURES / "deployments" / "systemd" / "config-default.yaml"


def _mig_layout(cli, host: str) -> dict[int, list[tuple[str, int]]]:
    doc = cli("-l", host, "inventory", "-o", "json").json()
    return {
        gpu["index"]: sorted(
            (i["profile"], i["placement_start"]) for i in (gpu["mig"] or {}).get("instances", [])
        )
        for gpu in doc["hosts"][0]["facts"]["gpus"]
    }


def test_example_all_balanced_on_a100(cli):
    # examples/config.yaml speaks A100-40GB profiles (1g.5gb, 2g.10gb, 3g.20gb).
    args = ["-l", "sg-a100-01", "partition"]
    assert cli(*args, "assert", "-f", str(EXAMPLES), "-c", "all-balanced").code == 4
    run = cli(*args, "apply", "-f", str(EXAMPLES), "-c", "all-balanced", "--yes")
    assert run.code == 0, run.stderr
    held = cli(*args, "assert", "-f", str(EXAMPLES), "-c", "all-balanced")
    assert held.code == 0, held.stdout + held.stderr
    for gpu, instances in _mig_layout(cli, "sg-a100-01").items():
        profiles = sorted(name for name, _ in instances)
        assert profiles == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"], (gpu, instances)


def test_default_config_all_1g_on_h100_then_disabled(cli):
    args = ["-l", "sg-dgx01", "partition"]
    run = cli(*args, "apply", "-f", str(DEFAULTS), "-c", "all-1g.10gb", "--yes")
    assert run.code == 0, run.stderr
    assert cli(*args, "assert", "-f", str(DEFAULTS), "-c", "all-1g.10gb").code == 0
    layout = _mig_layout(cli, "sg-dgx01")
    assert all(starts == [("1g.10gb", s) for s in range(7)] for starts in layout.values())
    run = cli(*args, "apply", "-f", str(DEFAULTS), "-c", "all-disabled", "--yes")
    assert run.code == 0, run.stderr
    assert cli(*args, "assert", "-f", str(DEFAULTS), "-c", "all-disabled").code == 0
    assert all(instances == [] for instances in _mig_layout(cli, "sg-dgx01").values())
