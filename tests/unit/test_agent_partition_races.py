"""The `partition` verb against a node that changed since the plan, or that another run holds.

A plan names GPU instances by id, and the driver reuses ids: a plan applied to a GPU that
changed since its facts were taken would destroy instances it never saw and still end "ok".
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl import sim as simulation
from gpupoolctl.agent.partition import expect
from gpupoolctl.agent.partition import lock as lock_module
from gpupoolctl.agent.partition.lock import NodeBusy, lock_paths, node_lock
from gpupoolctl.agent.partition.node import open_node
from gpupoolctl.partition import parse_spec, plan_host
from gpupoolctl.sim.state import SimState
from tests.unit.test_agent_partition import (
    ENABLE,
    Node,
    amd_ops,
    create,
    layout,
    node_layout,
    teardown_ops,
)
from tests.unit.test_agent_partition import node as node  # the fixture

ONLY_3G_AT_0 = """
version: v1
mig-configs:
  one:
    - devices: [7]
      mig-enabled: true
      mig-devices: {"3g.40gb@0": 1}
"""


def plan_args(n: Node, text: str, label: str) -> dict[str, Any]:
    plan = plan_host(parse_spec(text), label, n.host, [], n.facts())
    assert not plan.errors, plan.errors
    return dict(plan.agent_args(force=False))


def test_a_gpu_changed_since_the_plan_is_refused(node: Callable[[str], Node]) -> None:
    n = node("dgx-h100-mig")  # GPU 7: 3g.40gb@0 (GPU instance 1), 3g.40gb@4 (2)
    stale = plan_args(n, ONLY_3G_AT_0, "one")  # destroys GPU instance 2
    # Meanwhile GPU instance 2 makes room for two 1g.10gb, which get ids 2 and 3.
    gpu7 = n.gpu(7)
    second = gpu7["mig"]["instances"][1]
    meanwhile = [
        {"op": "destroy_ci", "gi": second["gi_id"], "ci": 0},
        {"op": "destroy_gi", "gi": second["gi_id"]},
        create("1g.10gb", 19, 4, 1),
        create("1g.10gb", 19, 5, 1),
    ]
    assert n.partition([(7, meanwhile)])["gpus"][0]["ok"]
    changed = n.facts()
    answer = n.ask("partition", stale)
    assert answer["ok"], answer["error"]
    outcome = answer["data"]["gpus"][0]
    assert outcome["ok"] is False and outcome["applied"] == 0, outcome
    assert "changed since the plan was made" in outcome["error"]
    assert "gi3 id19@5:1 ci0 appeared" in outcome["error"]
    # Neither the stale plan's layout nor a mix: the GPU is as the other change left it.
    assert node_layout(n.facts()) == node_layout(changed)
    # Planned again from fresh facts, the same label applies.
    fresh = n.ask("partition", plan_args(n, ONLY_3G_AT_0, "one"))["data"]["gpus"][0]
    assert fresh["ok"], fresh
    assert layout(n.gpu(7))[2] == (("3g.40gb", 0, 4, ("3g.40gb",)),)


def two_layouts(day: str, night: str) -> str:
    """Two labels of one file, as a day/night pair of layouts is written."""
    return (
        "version: v1\nmig-configs:\n"
        f"  day:\n    - devices: [{day}]\n      mig-enabled: true\n"
        '      mig-devices: {"1g.10gb": 7}\n'
        f"  night:\n    - devices: [{night}]\n      mig-enabled: true\n"
        '      mig-devices: {"3g.40gb": 2}\n'
    )


def test_a_run_planned_before_another_changed_the_node_changes_nothing_there(
    node: Callable[[str], Node],
) -> None:
    n = node("dgx-h100")
    text = two_layouts("0, 1", "1, 2")
    # Both runs take facts and plan before either changes anything (two operators, or the
    # cron switch while a person applies by hand).
    day, night = plan_args(n, text, "day"), plan_args(n, text, "night")
    assert all(g["ok"] for g in n.ask("partition", day)["data"]["gpus"])
    after_day = node_layout(n.facts())
    late = n.ask("partition", night)["data"]["gpus"]
    # GPU 1 changed under the night plan; GPU 2 did not, and is left alone all the same.
    assert [g["index"] for g in late] == [1, 2]
    assert all(not g["ok"] and g["applied"] == 0 for g in late), late
    assert all("nothing was done on this node: GPU 1 changed since" in g["error"] for g in late)
    assert node_layout(n.facts()) == after_day  # not half of each layout


def test_a_gpu_the_plan_leaves_as_it_is_is_checked_too(node: Callable[[str], Node]) -> None:
    n = node("dgx-h100")
    text = two_layouts("0", "0, 2")
    n.partition([(0, [ENABLE, create("3g.40gb", 9, 0, 4), create("3g.40gb", 9, 4, 4)])])
    night = plan_args(n, text, "night")  # GPU 0 is as night wants it: sent with no ops
    assert [(g["index"], len(g["ops"])) for g in night["gpus"]] == [(0, 0), (2, 3)]
    assert all(g["ok"] for g in n.ask("partition", plan_args(n, text, "day"))["data"]["gpus"])
    after_day = node_layout(n.facts())
    late = n.ask("partition", night)["data"]["gpus"]
    assert all(not g["ok"] and g["applied"] == 0 for g in late), late
    assert "GPU 0 changed since the plan was made" in late[0]["error"]
    assert node_layout(n.facts()) == after_day


def test_a_pending_mode_that_appeared_is_a_change(node: Callable[[str], Node]) -> None:
    n = node("a100-pcie-4")
    spec = "version: v1\nmig-configs:\n  sliced:\n    - devices: [0]\n      mig-enabled: true\n"
    spec += '      mig-devices: {"7g.40gb": 1}\n'
    stale = plan_args(n, spec, "sliced")
    with n.state.mutate() as data:
        data["nvidia"]["gpus"][0]["mig"]["pending"] = 1  # someone ran nvidia-smi -mig 1
    outcome = n.ask("partition", stale)["data"]["gpus"][0]
    assert outcome["applied"] == 0 and "pending MIG mode is enabled" in outcome["error"]


def test_amd_cards_moved_by_an_earlier_card_of_the_same_request_still_apply(
    node: Callable[[str], Node],
) -> None:
    # Card 0's memory partition moves the whole hive; cards 1-7 were planned from SPX/NPS1
    # and are checked before any op runs, so this is not taken for somebody else's change.
    n = node("mi300x-8")
    spec = "version: v1\nmig-configs:\n  x:\n    - devices: all\n"
    spec += "      compute-partition: CPX\n      memory-partition: NPS4\n"
    answer = n.ask("partition", plan_args(n, spec, "x"))["data"]
    assert [g["ok"] for g in answer["gpus"]] == [True] * 8, answer


def test_a_second_run_on_a_node_another_run_holds_is_refused(
    node: Callable[[str], Node],
) -> None:
    n = node("dgx-h100")
    before = n.facts()
    path = str(SimState.path_for(n.host, n.sim["state_dir"])) + ".partition.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, b"4242\n")
        fcntl.flock(fd, fcntl.LOCK_EX)
        log = Path(n.sim["state_dir"]) / "hook.log"
        hook = [["sh", "-c", f"echo ran >> {log}"]]
        answer = n.ask(
            "partition",
            {
                "gpus": [
                    {"index": 0, "uuid": before["gpus"][0]["uuid"], "vendor": "nvidia"}
                    | {"ops": [ENABLE]}
                ],
                "hooks": {"apply-start": hook, "apply-exit": hook},
            },
        )
    finally:
        os.close(fd)
    outcome = answer["data"]["gpus"][0]
    assert outcome["ok"] is False and outcome["applied"] == 0
    assert "another `gpupoolctl partition` run holds this node (pid 4242)" in outcome["error"]
    assert answer["data"]["hooks"] == [] and not log.exists()  # not even a hook ran
    assert node_layout(n.facts()) == node_layout(before)
    # Once the holder is gone, the same request runs.
    again = n.partition([(0, [ENABLE])])["gpus"][0]
    assert again["ok"], again


def take(paths: list[str]) -> None:
    with node_lock(paths):
        pass


def test_each_simulated_node_has_its_own_lock(tmp_path: Path) -> None:
    first, second = Node(tmp_path, "dgx-h100", "n1"), Node(tmp_path, "dgx-h100", "n2")
    try:
        paths = []
        for n in (first, second):
            simulation.activate(SimState.load(n.state.path))
            paths.append(lock_paths())
        assert paths[0] != paths[1] and all(len(p) == 1 for p in paths)
        with node_lock(paths[0]), node_lock(paths[1]), pytest.raises(NodeBusy):
            take(paths[0])
        take(paths[0])  # released on leaving
    finally:
        simulation.deactivate()


def test_a_lock_file_of_another_user_is_opened_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "partition.lock"
    path.write_text("")
    real_open = os.open

    def as_another_user(name: Any, flags: int, *args: Any) -> int:
        # Another user's file (or O_CREAT on it in a sticky folder): no write access.
        if flags & (os.O_RDWR | os.O_WRONLY | os.O_CREAT):
            raise PermissionError(13, "Permission denied", name)
        return real_open(name, flags, *args)

    monkeypatch.setattr(lock_module.os, "open", as_another_user)
    with node_lock([str(path)]) as held:
        assert held == str(path)
        with pytest.raises(NodeBusy):
            take([str(path)])


# -- the state a plan is made from reads the same from facts and from the card --------------------


@pytest.fixture
def opened(tmp_path: Path) -> Iterator[Callable[[Node], Any]]:
    nodes: list[Any] = []

    def open_for(n: Node) -> Any:
        simulation.activate(SimState.load(n.state.path))
        opened = open_node()
        nodes.append(opened)
        return opened

    yield open_for
    for opened_node in nodes:
        opened_node.close()
    simulation.deactivate()


def assert_facts_match_cards(n: Node, open_for: Callable[[Node], Any]) -> None:
    facts = n.facts()
    opened_node = open_for(n)
    for gpu in facts["gpus"]:
        card = opened_node.resolve(gpu["index"], gpu["uuid"], gpu["vendor"])
        assert not isinstance(card, str), card
        wanted = expect.from_facts(gpu)
        assert expect.differences(wanted, expect.from_snapshot(card.snapshot())) == [], gpu
    opened_node.close()


@pytest.mark.parametrize(
    "template", ["dgx-h100", "dgx-h100-mig", "a100-pcie-4", "l40s-4", "mi300x-8", "mi300x-8-sriov"]
)
def test_expected_state_from_facts_matches_the_card(
    tmp_path: Path, template: str, opened: Callable[[Node], Any]
) -> None:
    n = Node(tmp_path, template)
    assert_facts_match_cards(n, opened)


def test_expected_state_matches_after_changes(
    tmp_path: Path, opened: Callable[[Node], Any]
) -> None:
    nvidia = Node(tmp_path, "dgx-h100-mig", "n1")
    gpu7 = nvidia.gpu(7)
    ops = [*teardown_ops(gpu7), create("3g.40gb", 9, 0, 4, compute_instances=["1c.3g.40gb"] * 3)]
    assert nvidia.partition([(7, ops)])["gpus"][0]["ok"]
    assert_facts_match_cards(nvidia, opened)
    amd = Node(tmp_path, "mi300x-8-sriov", "n2")
    ops = [{"op": "set_sriov_vfs", "count": 0}, *amd_ops("NPS4", "CPX")]
    ops.append({"op": "set_sriov_vfs", "count": 8})
    assert amd.partition([(0, ops)])["gpus"][0]["ok"]
    assert_facts_match_cards(amd, opened)


def test_on_a_real_node_the_lock_is_shared_by_every_user_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    simulation.deactivate()
    shared = tmp_path / "run-lock"
    shared.mkdir()
    monkeypatch.setattr(lock_module, "SHARED_FOLDERS", (str(shared), str(tmp_path / "absent")))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    paths = lock_paths()
    assert paths == [
        str(shared / "gpupoolctl-partition.lock"),
        str(tmp_path / "state" / "gpupoolctl" / "partition.lock"),
    ]
    with node_lock(paths) as held:
        assert held == paths[0]
        assert (shared / "gpupoolctl-partition.lock").read_text() == f"{os.getpid()}\n"
        assert (shared / "gpupoolctl-partition.lock").stat().st_mode & 0o777 == 0o644
    # A path that cannot be opened (here: under a plain file) gives way to the next one.
    blocker = tmp_path / "plain-file"
    blocker.write_text("")
    with node_lock([str(blocker / "x.lock"), paths[1]]) as held:
        assert held == paths[1]
    with pytest.raises(NodeBusy, match="cannot open a partition lock file"):
        take([str(blocker / "x.lock")])


# -- re-running apply after a crash half way ---------------------------------------------------


@pytest.mark.parametrize(
    ("template", "label", "index"),
    [("dgx-h100-mig", "inference", 7), ("mi300x-8-sriov", "inference", 0)],
)
def test_apply_after_a_crash_at_any_step_finishes_the_layout(
    tmp_path: Path, template: str, label: str, index: int
) -> None:
    from gpupoolctl.partition import assert_host, load_spec

    spec = load_spec(Path(__file__).resolve().parents[2] / "playbooks" / "layouts.yaml")
    groups = ["h100"] if template.startswith("dgx") else ["mi300x"]
    first = Node(tmp_path / "plan", template)
    plan = plan_host(spec, label, first.host, groups, first.facts())
    ops = next(g.ops for g in plan.gpus if g.index == index)
    assert len(ops) > 1
    try:
        for cut in range(1, len(ops)):
            n = Node(tmp_path / f"cut{cut}", template)
            # The agent died after `cut` ops: no rollback ran.
            assert n.partition([(index, [dict(op) for op in ops[:cut]])])["gpus"][0]["ok"]
            again = plan_host(spec, label, n.host, groups, n.facts())
            assert again.errors == []
            answer = n.ask("partition", dict(again.agent_args(force=False)))
            assert all(g["ok"] for g in answer["data"]["gpus"]), (cut, answer)
            assert assert_host(spec, label, n.host, groups, n.facts()) == [], cut
    finally:
        simulation.deactivate()
