"""`partition plan` / `apply` refuse a label that selects no GPU, or asks its GPUs for what
none of them has, on the bundled simulated pool: exit 1, the entry named, nothing changed."""

from __future__ import annotations

import pytest

SPEC = """\
version: v1
mig-configs:
  typo:
    - hosts: [h1000]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  l40s:
    - hosts: [l40s]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
"""
WHY = {
    "typo": ":4: typo: hosts: h1000 names no host or group of sim.yaml, so this entry "
    "selects no GPU",
    "l40s": ":11: l40s: this entry asks mig-enabled: true, but none of the GPUs it selects "
    "is MIG-capable: dxb-l40s-01 GPU 0-3 (NVIDIA L40S)",
}


def state(cli) -> str:
    run = cli("-q", "partition", "show", "-o", "json")
    assert run.code == 0, run.stderr
    return run.stdout


@pytest.mark.parametrize("label", ["typo", "l40s"])
def test_plan_and_apply_refuse_a_label_that_reaches_no_gpu(cli, label: str) -> None:
    spec = cli.tmp / "spec.yaml"
    spec.write_text(SPEC)
    before = state(cli)
    for command in (["plan"], ["apply", "--yes"]):
        run = cli("-q", "partition", *command, "-f", str(spec), "-c", label)
        assert run.code == 1, (command, run.stdout, run.stderr)
        assert run.stdout == ""
        assert run.stderr == f"gpupoolctl: error: {spec}{WHY[label]}\n"
        assert "0 GPU(s) to change" not in run.stdout + run.stderr
    assert state(cli) == before  # nothing was changed
    as_json = cli("-q", "partition", "plan", "-f", str(spec), "-c", label, "-o", "json")
    assert as_json.code == 1
    assert as_json.json()["errors"] == [f"{spec}{WHY[label]}"]


def test_assert_lists_an_entry_that_asks_what_no_gpu_has(cli) -> None:
    spec = cli.tmp / "spec.yaml"
    spec.write_text(
        SPEC
        + "  mixed:\n    - devices: all\n      mig-enabled: false\n"
        + "    - hosts: [l40s]\n      devices: all\n      mig-enabled: true\n"
        + "      mig-devices: {}\n"
    )
    run = cli("-q", "-l", "sg-dgx01,dxb-l40s-01", "partition", "assert", "-f", str(spec))
    assert run.code == 2  # -c is required
    run = cli(
        "-q", "-l", "sg-dgx01,dxb-l40s-01", "partition", "assert", "-f", str(spec), "-c", "mixed"
    )
    assert run.code == 4, run.stdout + run.stderr
    assert run.stdout == (
        f"{spec}:18: mixed: this entry asks mig-enabled: true, but none of the GPUs it "
        "selects is MIG-capable: dxb-l40s-01 GPU 0-3 (NVIDIA L40S)\n"
    )
