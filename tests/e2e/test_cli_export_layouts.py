"""`gpupoolctl export k8s -f LAYOUTS` end to end on the bundled simulated pool: the file's
labels in the ConfigMap under their own names, nodes labelled with the one that holds."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpupoolctl.export.k8s import MIG_CONFIG_LABEL
from gpupoolctl.partition import parse_spec

LAYOUTS = Path(__file__).resolve().parents[2] / "playbooks" / "layouts.yaml"


def config_of(manifest: str) -> dict:
    (configmap,) = [d for d in yaml.safe_load_all(manifest) if d]
    text = configmap["data"]["config.yaml"]
    parse_spec(text, source="config.yaml")  # our own parser reads it back
    return yaml.safe_load(text)["mig-configs"]


def mig_labels(commands: str) -> dict[str, str]:
    out = {}
    for line in commands.splitlines():
        if line.startswith("kubectl label node"):
            words = line.split()
            for word in words[5:]:
                if word.startswith(f"{MIG_CONFIG_LABEL}="):
                    out[words[3]] = word.split("=", 1)[1]
    return out


def test_layouts_labels_are_exported_and_a_relabel_is_the_switch(cli) -> None:
    manifest = cli("-q", "export", "k8s", "-f", str(LAYOUTS))
    assert manifest.code == 0, manifest.stderr
    configs = config_of(manifest.stdout)
    assert {"all-disabled", "training", "inference", "mixed"} <= set(configs)
    assert "placements 3g.40gb@4 are written as counts" in manifest.stderr

    commands = cli("-q", "export", "k8s", "-f", str(LAYOUTS), "--format", "commands")
    assert commands.code == 0, commands.stderr
    assert mig_labels(commands.stdout)["sg-dgx01"] == "training"

    # By day: the H100 node cut for inference is labelled so, ready to switch back.
    applied = cli("-l", "sg-dgx01", "partition", "apply", "-f", str(LAYOUTS), "-c", "inference")
    assert applied.code == 2  # no --yes off a terminal
    applied = cli(
        "-l", "sg-dgx01", "partition", "apply", "-f", str(LAYOUTS), "-c", "inference", "--yes"
    )
    assert applied.code == 0, applied.stdout + applied.stderr
    again = cli("-q", "export", "k8s", "-f", str(LAYOUTS), "--format", "commands")
    assert again.code == 0, again.stderr
    labels = mig_labels(again.stdout)
    assert labels["sg-dgx01"] == "inference"
    script = again.stdout.split("<<'GPUPOOLCTL_EOF' || exit 1\n", 1)[1]
    assert "inference" in config_of(script.split("\nGPUPOOLCTL_EOF\n", 1)[0])

    plain = cli("-q", "export", "k8s")  # today's export, unchanged: current state only
    assert plain.code == 0, plain.stderr
    assert not {"training", "inference", "mixed"} & set(config_of(plain.stdout))


def test_a_file_that_cannot_be_written_prints_nothing_and_exits_1(cli) -> None:
    bad = cli.tmp / "bad.yaml"
    bad.write_text(
        "version: v1\nmig-configs:\n  'day shift':\n    - devices: all\n      mig-enabled: false\n"
    )
    run = cli("-q", "export", "k8s", "-f", str(bad))
    assert run.code == 1 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "cannot name a config for mig-manager" in run.stderr
    assert not cli.sim_dir.exists()  # refused before any node was read


def test_help_explains_the_layouts_export(cli) -> None:
    run = cli("export", "k8s", "--help")
    assert run.code == 0
    text = " ".join(run.stdout.split())
    assert "-f, --file" in text
    assert "kubectl label node sg-dgx01 nvidia.com/mig.config=inference --overwrite" in text
