"""Variable precedence and group_vars/ host_vars/ folders beside the inventory."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpupoolctl.errors import InventoryError
from gpupoolctl.inventory import Inventory, load_inventory


def put(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


NESTED = """
all:
  vars: {v: all, only_all: 1}
  children:
    parent:
      vars: {v: parent, p: 1}
      children:
        child:
          vars: {v: child}
          hosts:
            h1: {hv: 1}
            h2: {v: host}
"""


def test_all_then_parent_then_child_then_host(tmp_path):
    inv = load_inventory(put(tmp_path / "inv.yml", NESTED))
    assert inv.hosts["h1"].vars == {"v": "child", "only_all": 1, "p": 1, "hv": 1}
    assert inv.hosts["h2"].vars["v"] == "host"


def test_same_depth_groups_merge_in_ascii_order_unless_priority(tmp_path):
    inv = load_inventory(
        put(
            tmp_path / "inv.yml",
            """
            b: {vars: {x: b, y: b, z: b}, hosts: {h: }}
            a: {vars: {x: a, y: a, ansible_group_priority: 2}, hosts: {h: }}
            c: {vars: {x: c, z: c}, hosts: {h: }}
            """,
        )
    )
    # Sorted by (priority, name): b(1), c(1), a(2): a wins x and y; c beats b on z.
    assert inv.hosts["h"].vars == {"x": "a", "y": "a", "z": "c"}
    assert inv.groups["a"].priority == 2 and inv.groups["b"].priority == 1


def test_deeper_group_beats_higher_priority(tmp_path):
    inv = load_inventory(
        put(
            tmp_path / "inv.yml",
            """
            top: {vars: {x: top, ansible_group_priority: 100}, children: {sub: {vars: {x: sub}}}}
            sub: {hosts: {h: }}
            """,
        )
    )
    assert inv.groups["sub"].depth == 2 and inv.groups["top"].depth == 1
    assert inv.hosts["h"].vars["x"] == "sub"


def test_group_vars_files_rank_above_all_inventory_group_vars(tmp_path):
    # Ansible loads every inventory group var before any group_vars/ file, so a file for the
    # parent beats the child's inline value.
    inv_path = put(tmp_path / "inv.yml", NESTED)
    put(tmp_path / "group_vars" / "parent.yml", "v: parent_file\n")
    put(tmp_path / "group_vars" / "all.yaml", "only_all: file\np: from_all_file\n")
    h1 = load_inventory(inv_path).hosts["h1"]
    assert h1.vars["v"] == "parent_file"
    assert h1.vars["only_all"] == "file"
    assert h1.vars["p"] == "from_all_file"  # group_vars/all beats inline vars of 'parent'


def test_host_vars_file_beats_inline_host_vars(tmp_path):
    inv_path = put(tmp_path / "inv.yml", NESTED)
    put(tmp_path / "host_vars" / "h2.json", '{"v": "json_file"}')
    assert load_inventory(inv_path).hosts["h2"].vars["v"] == "json_file"


def test_vars_directory_is_read_in_lexical_order_and_skips_others(tmp_path):
    inv_path = put(tmp_path / "inv.ini", "[child]\nh1\n")
    folder = tmp_path / "group_vars" / "child"
    put(folder / "b.yml", "x: b\ny: b\n")
    put(folder / "a.yml", "x: a\nz: a\n")
    put(folder / "sub" / "c", "y: sub_c\n")  # a sub-folder is read recursively, in place
    put(folder / ".hidden.yml", "x: hidden\n")
    put(folder / "backup.yml~", "x: backup\n")
    put(folder / "notes.txt", "x: txt\n")
    vars_ = load_inventory(inv_path).hosts["h1"].vars
    assert vars_ == {"x": "b", "y": "sub_c", "z": "a"}
    assert load_inventory(inv_path).groups["child"].vars == {"x": "b", "y": "sub_c", "z": "a"}


def test_first_matching_vars_file_wins(tmp_path):
    inv_path = put(tmp_path / "inv.ini", "[g]\nh\n")
    put(tmp_path / "group_vars" / "g", "src: bare\n")
    put(tmp_path / "group_vars" / "g.yml", "src: yml\n")
    assert load_inventory(inv_path).hosts["h"].vars["src"] == "bare"


def test_empty_vars_file_is_ignored(tmp_path):
    inv_path = put(tmp_path / "inv.ini", "[g]\nh\n")
    put(tmp_path / "group_vars" / "g.yml", "---\n")
    assert load_inventory(inv_path).hosts["h"].vars == {}


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        ("a: 1\nb: [1, 2\n", 3, "invalid YAML"),
        ("\n- a\n- b\n", 2, "expected a mapping of variables, got a list"),
        ("$ANSIBLE_VAULT;1.1;AES256\n0000\n", 1, "vault-encrypted"),
    ],
)
def test_bad_vars_file_names_file_and_line(tmp_path, content, line, message):
    inv_path = put(tmp_path / "inv.ini", "[g]\nh\n")
    bad = put(tmp_path / "host_vars" / "h.yml", content)
    with pytest.raises(InventoryError) as info:
        load_inventory(inv_path)
    assert info.value.path == str(bad)
    assert info.value.line == line
    assert message in info.value.detail


def test_shallow_merge_replaces_whole_mappings(tmp_path):
    inv = load_inventory(
        put(
            tmp_path / "inv.yml",
            "p: {vars: {d: {a: 1, b: 2}}, children: {c: {vars: {d: {a: 9}}, hosts: {h: }}}}\n",
        )
    )
    assert inv.hosts["h"].vars["d"] == {"a": 9}


def test_from_hosts():
    inv = Inventory.from_hosts(["gpu[1:2]:2200", "solo"], {"ansible_user": "ops"})
    assert list(inv.hosts) == ["gpu1", "gpu2", "solo"]
    assert inv.hosts["gpu1"].vars == {"ansible_port": 2200, "ansible_user": "ops"}
    assert inv.hosts["solo"].groups == ["all", "ungrouped"]
    assert inv.select("gpu*").names == ["gpu1", "gpu2"]
