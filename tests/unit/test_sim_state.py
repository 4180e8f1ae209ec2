"""The sim state file: one per node, names that cannot collide or escape the folder."""

from __future__ import annotations

import json

from gpupoolctl.sim.state import SimState


def test_state_file_names_stay_in_the_folder_and_apart(tmp_path):
    names = [SimState.path_for(h, tmp_path) for h in ("a/b", "a_b", "../etc", "sg-dgx01")]
    assert len({p.name for p in names}) == 4
    assert all(p.parent == tmp_path for p in names)
    assert names[3].name == "sg-dgx01.json"  # plain names are kept as they are


def test_refresh_sees_another_writers_save(tmp_path):
    mine = SimState.reset("n1", "l40s-4", tmp_path)
    other = SimState.load(mine.path)
    with other.mutate() as data:
        data["nvidia"]["driver_version"] = "999.1"
    mine.refresh()
    assert mine.data["nvidia"]["driver_version"] == "999.1"
    assert json.loads(mine.path.read_text())["nvidia"]["driver_version"] == "999.1"
