"""--limit patterns: Ansible's host patterns, subscripts, @files and ClusterShell node sets."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpupoolctl.errors import InventoryError, UsageError
from gpupoolctl.inventory import load_inventory
from gpupoolctl.inventory.patterns import split_limit

INVENTORY = """
[gpus]
gpu01
gpu02
gpu03
gpu04
gpu07
[staging]
gpu02
gpu03
cpu01
[atlanta]
gpu03
[login]
login1 ansible_host=10.0.0.9
[rack1]
rack1-gpu01
rack1-gpu02
[rack2]
rack2-gpu01
rack2-gpu02
"""


@pytest.fixture
def inv(tmp_path: Path):
    path = tmp_path / "hosts.ini"
    path.write_text(textwrap.dedent(INVENTORY))
    return load_inventory(path)


def names(inv, limit, **kw):
    return inv.select(limit, **kw).names


ALL = ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu01", "login1"]
ALL += ["rack1-gpu01", "rack1-gpu02", "rack2-gpu01", "rack2-gpu02"]


@pytest.mark.parametrize("limit", [None, "all", "*", "", "  "])
def test_everything(inv, limit):
    assert names(inv, limit) == ALL


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        ("gpus:staging", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu01"]),
        ("gpus,staging", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu01"]),
        ("gpus:&staging", ["gpu02", "gpu03"]),
        ("gpus:!staging", ["gpu01", "gpu04", "gpu07"]),
        # Ansible's order: unions first, then '&', then '!', whatever the written order.
        ("!atlanta:gpus:&staging", ["gpu02"]),
        ("gpus:!atlanta:staging", ["gpu01", "gpu02", "gpu04", "gpu07", "cpu01"]),
        ("!gpus", ["cpu01", "login1", "rack1-gpu01", "rack1-gpu02", "rack2-gpu01", "rack2-gpu02"]),
        ("&staging", ["gpu02", "gpu03", "cpu01"]),
        ("gpu0*", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
        ("*-gpu01", ["rack1-gpu01", "rack2-gpu01"]),
        ("gpu0?", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
        ("~gpu0[12]", ["gpu01", "gpu02"]),
        ("~(login|cpu)", ["cpu01", "login1"]),
        ("rack*", ["rack1-gpu01", "rack1-gpu02", "rack2-gpu01", "rack2-gpu02"]),
        ("gpu03", ["gpu03"]),
        ("login1", ["login1"]),
    ],
)
def test_ansible_patterns(inv, limit, expected):
    assert names(inv, limit) == expected


def test_result_keeps_inventory_order(inv):
    assert names(inv, "gpu07,gpu01") == ["gpu01", "gpu07"]


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        ("gpus[0]", ["gpu01"]),
        ("gpus[-1]", ["gpu07"]),
        ("gpus[1:2]", ["gpu02", "gpu03"]),  # ends are inclusive
        ("gpus[3:]", ["gpu04", "gpu07"]),
        ("gpus[0:2]:!gpu02", ["gpu01", "gpu03"]),
        ("gpu*[1]", ["gpu02"]),  # a glob that matches the group 'gpus'
    ],
)
def test_group_subscripts(inv, limit, expected):
    assert names(inv, limit) == expected


def test_subscript_out_of_range_is_a_usage_error(inv):
    with pytest.raises(UsageError, match="No hosts matched the subscripted pattern 'gpus\\[9\\]'"):
        inv.select("gpus[9]")


def test_old_dash_subscript_warns(inv):
    sel = inv.select("gpus[0-1]")
    assert sel.names == ["gpu01", "gpu02"]
    assert any("[x:y]" in w for w in sel.warnings)


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
        ("gpu[01-07/2]", ["gpu01", "gpu03", "gpu07"]),
        ("rack[1-2]-gpu[02]", ["rack1-gpu02", "rack2-gpu02"]),
        ("rack[1-2]-gpu[01-02]:!rack2-gpu01", ["rack1-gpu01", "rack1-gpu02", "rack2-gpu02"]),
        ("gpu[01:03]", ["gpu01", "gpu02", "gpu03"]),  # the inventory's own range syntax
        ("rack[1-2]", ["rack1-gpu01", "rack1-gpu02", "rack2-gpu01", "rack2-gpu02"]),  # groups
        ("gpus:&gpu[02-04]", ["gpu02", "gpu03", "gpu04"]),
    ],
)
def test_nodesets(inv, limit, expected):
    assert names(inv, limit) == expected


def test_nodeset_reports_each_missing_name(inv):
    sel = inv.select("gpu[01-02,05-06]")
    assert sel.names == ["gpu01", "gpu02"]
    assert sel.unmatched == ["gpu05", "gpu06"]


def test_unmatched_parts_are_reported_not_fatal(inv):
    sel = inv.select("gpus:nosuch:~zz.*:&staging")
    assert sel.names == ["gpu02", "gpu03"]
    assert sel.unmatched == ["nosuch", "~zz.*"]


def test_empty_group_is_not_unmatched(tmp_path):
    path = tmp_path / "h.yml"
    path.write_text("empty:\ng: {hosts: {h: }}\n")
    sel = load_inventory(path).select("empty")
    assert sel.names == [] and sel.unmatched == []


def test_patterns_match_aliases_not_ansible_host(inv):
    sel = inv.select("10.0.0.9")
    assert sel.names == [] and sel.unmatched == ["10.0.0.9"]


def test_limit_file(inv, tmp_path):
    (tmp_path / "retry").write_text("gpu01\n\n  gpu02  \n!gpu02\ngpu[03-04]\n")
    assert names(inv, "@retry", cwd=tmp_path) == ["gpu01", "gpu03", "gpu04"]
    assert names(inv, "@retry,login1", cwd=tmp_path) == ["gpu01", "gpu03", "gpu04", "login1"]


def test_limit_file_errors(inv, tmp_path):
    with pytest.raises(UsageError, match="Unable to find limit file"):
        inv.select("@missing", cwd=tmp_path)
    with pytest.raises(UsageError, match="must be a file"):
        inv.select(f"@{tmp_path}", cwd=tmp_path)
    (tmp_path / "bad").write_text("gpu01\n~(unclosed\n")
    with pytest.raises(InventoryError) as info:
        inv.select("@bad", cwd=tmp_path)
    assert info.value.path == str(tmp_path / "bad") and info.value.line == 2


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        ("~(unclosed", "Invalid host list pattern"),
        ("gpu[01-", "bracket"),
        ("gpu[05-01]", "invalid values"),
        ("gpu[01:100]", "equal-length"),
    ],
)
def test_bad_patterns_are_usage_errors(inv, limit, message):
    with pytest.raises(UsageError, match=message):
        inv.select(limit)


@pytest.mark.parametrize(
    ("limit", "parts"),
    [
        ("a:b:&c:!d", ["a", "b", "&c", "!d"]),
        ("a,b[1:2],c", ["a", "b[1:2]", "c"]),
        ("n[1-2,5]:m", ["n[1-2,5]", "m"]),
        ("n[1-2,5],m", ["n[1-2,5]", "m"]),
        ("2001:db8::1", ["2001:db8::1"]),
        (" a , b ", ["a", "b"]),
    ],
)
def test_split_limit(limit, parts):
    assert split_limit(limit) == parts
