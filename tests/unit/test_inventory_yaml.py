"""YAML inventories: structure, shorthand forms, warnings, and errors with line numbers."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpupoolctl.errors import InventoryError
from gpupoolctl.inventory import load_inventory


def write(tmp_path: Path, text: str, name: str = "hosts.yml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_nested_groups_several_parents_and_ranges(tmp_path):
    inv = load_inventory(
        write(
            tmp_path,
            """
            all:
              children:
                sg:
                  children:
                    h100:
                      hosts:
                        dgx[01:03:2]:
                          gpus: 8
                gpus:
                  children:
                    h100:
                    amd:
                      hosts:
                        mi-[a:b]:2200:
            """,
        )
    )
    assert list(inv.hosts) == ["dgx01", "dgx03", "mi-a", "mi-b"]
    assert inv.groups["h100"].parents == ["sg", "gpus"]
    assert inv.hosts["dgx01"].groups == ["all", "gpus", "h100", "sg"]
    assert inv.hosts["mi-a"].vars == {"ansible_port": 2200}
    assert inv.groups["all"].children == ["ungrouped", "sg", "gpus"]


def test_hosts_directly_under_all_are_ungrouped(tmp_path):
    inv = load_inventory(write(tmp_path, "all:\n  hosts:\n    h1:\n"))
    assert inv.groups["ungrouped"].hosts == ["h1"]
    assert inv.hosts["h1"].groups == ["all", "ungrouped"]


def test_string_shorthand_for_sections(tmp_path):
    inv = load_inventory(write(tmp_path, "g:\n  hosts: h1\n  vars: flag\n  children: sub\n"))
    assert inv.groups["g"].hosts == ["h1"]
    assert inv.groups["g"].children == ["sub"]
    assert inv.hosts["h1"].vars == {"flag": None}


def test_yaml_values_keep_their_types(tmp_path):
    inv = load_inventory(
        write(
            tmp_path,
            """
            g:
              hosts:
                h1:
                  n: 1
                  s: "1"
                  b: yes
                  l: [1, two]
                  d: {k: v}
                  u: !unsafe "{{ not templated }}"
            """,
        )
    )
    assert inv.hosts["h1"].vars == {
        "n": 1,
        "s": "1",
        "b": True,
        "l": [1, "two"],
        "d": {"k": "v"},
        "u": "{{ not templated }}",
    }


def test_unknown_keys_and_bad_groups_are_warnings(tmp_path):
    inv = load_inventory(write(tmp_path, "g:\n  hosts: {h: }\n  colour: {x: 1}\nbad: 5\n"))
    assert list(inv.hosts) == ["h"]
    assert any("colour" in w and ":3:" in w for w in inv.warnings)
    assert any("'bad'" in w for w in inv.warnings)
    assert "bad" not in inv.groups


def test_merge_keys_and_anchors(tmp_path):
    inv = load_inventory(
        write(
            tmp_path,
            """
            g:
              vars: &base {a: 1, b: 2}
              hosts:
                h1: {<<: *base, b: 3}
            """,
        )
    )
    assert inv.hosts["h1"].vars == {"a": 1, "b": 3}


def test_json_inventory(tmp_path):
    inv = load_inventory(write(tmp_path, '{"g": {"hosts": {"h1": {"x": 1}}}}', name="inv.json"))
    assert inv.hosts["h1"].vars == {"x": 1}


def test_yml_file_with_ini_content_falls_back_to_ini(tmp_path):
    inv = load_inventory(write(tmp_path, "[g]\nh1 a=1\n", name="hosts.yml"))
    assert inv.groups["g"].hosts == ["h1"]


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("g:\n  hosts:\n    h1: {a: 1\n", 4, "invalid YAML"),
        ("g:\n  hosts: [a, b]\n", 2, "Invalid \"hosts\" entry for 'g' group"),
        ("g:\n  hosts:\n    123:\n", 3, "Host pattern 123 must be a string"),
        ("g:\n  hosts:\n    h1: 5\n", 3, "must be a mapping"),
        ("g:\n  hosts:\n    gpu[01:100]:\n", 3, "equal-length begin and end"),
        ("g:\n  hosts:\n    gpu[1:]:\n", 3, "must specify end value"),
        (
            "a:\n  children:\n    b:\n      children:\n        a:\n",
            3,
            "Adding group 'b' as child to 'a' creates a recursive dependency loop.",
        ),
        ("g:\n  children:\n    nope: 5\n", 3, "'nope' is not a known host nor group"),
        ("plugin: aws_ec2\n", 1, "Plugin configuration YAML file"),
        ("g:\n  vars:\n    ansible_group_priority: high\n", 3, "must be an integer"),
        ("g:\n  vars:\n    pw: !vault |\n      abc\n", 3, "invalid YAML"),
        ("- a\n- b\n", 1, "should be a mapping"),
    ],
)
def test_errors_name_file_and_line(tmp_path, text, line, message):
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    err = info.value
    assert err.path == str(path)
    assert err.line == line, err
    assert message in err.detail


def test_empty_yaml_file_is_an_empty_inventory(tmp_path):
    # Ansible's yaml plugin refuses it, then the ini plugin reads it as no hosts at all.
    inv = load_inventory(write(tmp_path, "# nothing\n"))
    assert inv.hosts == {}
    assert list(inv.groups) == ["all", "ungrouped"]
