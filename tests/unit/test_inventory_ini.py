"""INI inventories: structure, value typing, and errors that name file and line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpupoolctl.errors import InventoryError
from gpupoolctl.inventory import load_inventory


def write(tmp_path: Path, text: str, name: str = "hosts.ini") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_sections_children_and_implicit_groups(tmp_path):
    inv = load_inventory(
        write(
            tmp_path,
            """
            lonely
            [top:children]
            gpus
            [gpus]
            gpu[01:02]
            [gpus:vars]
            v=1
            """,
        )
    )
    assert list(inv.groups) == ["all", "ungrouped", "top", "gpus"]
    assert inv.groups["all"].children == ["ungrouped", "top"]
    assert inv.groups["top"].children == ["gpus"]
    assert inv.groups["gpus"].hosts == ["gpu01", "gpu02"]
    assert inv.groups["ungrouped"].hosts == ["lonely"]
    assert inv.hosts["gpu01"].groups == ["all", "gpus", "top"]
    assert inv.hosts["lonely"].groups == ["all", "ungrouped"]
    assert inv.source == tmp_path / "hosts.ini"


def test_host_in_all_section_becomes_ungrouped(tmp_path):
    inv = load_inventory(write(tmp_path, "[all]\nh1\n[g]\nh2\n"))
    assert inv.groups["ungrouped"].hosts == ["h1"]
    assert "ungrouped" not in inv.hosts["h2"].groups


def test_ungrouped_host_that_joins_a_group_leaves_ungrouped(tmp_path):
    inv = load_inventory(write(tmp_path, "h1\n[g]\nh1\n"))
    assert inv.groups["ungrouped"].hosts == []
    assert inv.hosts["h1"].groups == ["all", "g"]


def test_value_typing_matches_ansible(tmp_path):
    inv = load_inventory(
        write(
            tmp_path,
            """
            h1 i=3 f=0.5 b=True n=None l="[1, 2]" t="(1, 2)" s="two words" q="'03'" x=0x10
            [all:vars]
            gv=42
            gq="42"
            gb=FALSE
            gc=8080 # a trailing comment is Python syntax too
            """,
        )
    )
    v = inv.hosts["h1"].vars
    assert v["i"] == 3 and v["f"] == 0.5 and v["b"] is True and v["n"] is None
    assert v["l"] == [1, 2] and v["t"] == [1, 2]  # tuples become lists
    assert v["s"] == "two words"
    assert v["q"] == "03"
    assert v["x"] == 16
    # ansible-core 2.19 literal_evals :vars values too (the docs say strings; the code disagrees)
    assert v["gv"] == 42 and v["gq"] == "42" and v["gb"] == "FALSE" and v["gc"] == 8080


def test_port_in_host_entry(tmp_path):
    inv = load_inventory(write(tmp_path, "[g]\ngpu[1:2]:2222\nother\n"))
    assert inv.hosts["gpu1"].vars["ansible_port"] == 2222
    assert inv.hosts["gpu2"].vars["ansible_port"] == 2222
    assert "ansible_port" not in inv.hosts["other"].vars


def test_children_declared_before_the_group(tmp_path):
    inv = load_inventory(write(tmp_path, "[p:children]\nc\n[c]\nh\n"))
    assert inv.groups["p"].children == ["c"]
    assert inv.hosts["h"].groups == ["all", "c", "p"]


def test_group_priority_is_not_a_variable(tmp_path):
    inv = load_inventory(write(tmp_path, "[g]\nh\n[g:vars]\nansible_group_priority=7\n"))
    assert inv.groups["g"].priority == 7
    assert "ansible_group_priority" not in inv.hosts["h"].vars


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("[g]\nh1\n[g:bogus]\n", 3, "unknown type: 'bogus'"),
        ("h1\n[bad group]\n", 2, "Invalid section entry"),
        ("[g]\nh1 novalue\n", 2, "Expected key=value host variable assignment, got: 'novalue'"),
        ("[g:vars]\nx=1\n", 1, "Section '[g:vars]' not valid for undefined group 'g'."),
        ("[g]\nh\n[g:children]\nmissing\n", 4, "includes undefined group 'missing'"),
        ("[g]\nh\n[g:vars]\njustakey\n", 4, "Expected key=value, got: 'justakey'"),
        ("[g]\nh\n[g:children]\na b\n", 4, "Expected group name"),
        ("[g]\nh 'unclosed\n", 2, "Error parsing host definition"),
        ("[g]\nhost:\n", 2, "ending in ':' is not allowed"),
        ("\n\n[g]\ngpu[01:100]\n", 4, "equal-length begin and end"),
        ("[g]\ngpu[1:]\n", 2, "must specify end value"),
        (
            "[a:children]\nb\n[b:children]\na\n",
            4,
            "Adding group 'a' as child to 'b' creates a recursive dependency loop.",
        ),
        ("[g]\n---\n", 2, "sign this is a YAML file"),
        ('[g]\nh x="{[1]:2}"\n', 2, "unhashable type"),
    ],
)
def test_errors_name_file_and_line(tmp_path, text, line, message):
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    err = info.value
    assert err.path == str(path)
    assert err.line == line
    assert message in err.detail
    assert str(err).startswith(f"{path}:{line}: ")


def test_non_utf8_comment_is_tolerated_but_not_in_a_host_line(tmp_path):
    path = tmp_path / "hosts.ini"
    path.write_bytes(b"# caf\xe9\n[g]\nh1\n")
    assert list(load_inventory(path).hosts) == ["h1"]
    path.write_bytes(b"[g]\nh\xe9\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert info.value.line == 2


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InventoryError, match="cannot read inventory"):
        load_inventory(tmp_path / "nope.ini")
    with pytest.raises(InventoryError, match="is a directory"):
        load_inventory(tmp_path)


def test_file_without_extension_that_is_not_yaml_is_ini(tmp_path):
    inv = load_inventory(write(tmp_path, "gpu[1:2] a=1\n[g]\nx\n", name="inventory"))
    assert list(inv.hosts) == ["gpu1", "gpu2", "x"]
    assert inv.hosts["gpu1"].vars == {"a": 1}
