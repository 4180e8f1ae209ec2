"""Host ranges (Ansible syntax), host:port entries and ClusterShell node sets."""

from __future__ import annotations

import pytest

from gpupoolctl.inventory import (
    HostRangeError,
    NodeSetError,
    expand_host_range,
    expand_nodeset,
    fold_nodeset,
)
from gpupoolctl.inventory.ranges import split_port


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gpu[01:03]", ["gpu01", "gpu02", "gpu03"]),
        ("gpu[1:3]", ["gpu1", "gpu2", "gpu3"]),
        ("gpu[8:10]", ["gpu8", "gpu9", "gpu10"]),
        (
            "www[01:09:4].example.com",
            ["www01.example.com", "www05.example.com", "www09.example.com"],
        ),
        ("db-[a:c]", ["db-a", "db-b", "db-c"]),
        ("x[a:e:2]", ["xa", "xc", "xe"]),
        ("x[y:B]", ["xy", "xz", "xA", "xB"]),  # ascii_letters runs a..z then A..Z
        ("[:2]x", ["0x", "1x", "2x"]),  # an empty begin is 0
        ("r[1:2]-g[0:1]", ["r1-g0", "r1-g1", "r2-g0", "r2-g1"]),  # first range outermost
        ("plain", ["plain"]),
        ("n[5:2]", []),  # Ansible yields nothing (no error) when begin > end
    ],
)
def test_expand_host_range(name, expected):
    assert expand_host_range(name) == expected


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("gpu[01:100]", "host range must specify equal-length begin and end formats"),
        ("gpu[1:]", "host range must specify end value"),
        ("gpu[1]", "host range must be begin:end or begin:end:step"),
        ("gpu[1:2:3:4]", "host range must be begin:end or begin:end:step"),
        ("gpu[c:a]", "host range must have begin <= end"),
        ("gpu[1:x]", "not a number"),
        ("gpu[1:3", "must be closed"),
        ("gpu[1:3:0]", "step must not be zero"),
        ("gpu[0:9999999]", "more than"),
    ],
)
def test_bad_host_ranges(name, message):
    with pytest.raises(HostRangeError, match=message.replace("[", r"\[")):
        expand_host_range(name)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("gpu01", ("gpu01", None)),
        ("gpu01:2222", ("gpu01", 2222)),
        ("gpu[01:04]:2222", ("gpu[01:04]", 2222)),
        ("192.0.2.1:22", ("192.0.2.1", 22)),
        ("[2001:db8::1]:2200", ("2001:db8::1", 2200)),
        ("2001:db8::1", ("2001:db8::1", None)),  # a bare IPv6 address has no port
        ("bad name:22", ("bad name:22", None)),  # not a host name: Ansible keeps it whole
    ],
)
def test_split_port(entry, expected):
    assert split_port(entry) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
        ("node[1-9/2]", ["node1", "node3", "node5", "node7", "node9"]),
        ("n[3,1,2,1]", ["n1", "n2", "n3"]),  # sorted, duplicates dropped
        ("n[9,10,08]", ["n9", "n08", "n10"]),  # ClusterShell sorts by (length, text)
        ("rack[1-2]-gpu[01-02]", ["rack1-gpu01", "rack1-gpu02", "rack2-gpu01", "rack2-gpu02"]),
        ("n[00-02]", ["n00", "n01", "n02"]),
        ("b1,a[1-2]", ["b1", "a1", "a2"]),  # commas outside brackets: union, first seen first
        ("solo", ["solo"]),
    ],
)
def test_expand_nodeset(text, expected):
    assert expand_nodeset(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("n[1-2", "missing closing bracket"),
        ("n1]", "illegal closing bracket"),
        ("n[]", "empty range"),
        ("n[3-1]", "invalid values"),
        ("n[01-100]", "padding length mismatch"),
        ("n[1/2]", "invalid step usage"),
        ("n[1-4/0]", "invalid values"),
        ("n[1-2][3-4]", "illegal reopening bracket"),
        ("n[a-b]", "cannot convert"),
        ("n[-1]", "negative"),
    ],
)
def test_bad_nodesets(text, message):
    with pytest.raises(NodeSetError, match=message):
        expand_nodeset(text)


def test_fold_nodeset_examples():
    assert fold_nodeset(["gpu01", "gpu02", "gpu03", "gpu07"]) == "gpu[01-03,07]"
    assert fold_nodeset(["n9", "n10", "n11"]) == "n[9-11]"
    assert fold_nodeset(["login", "n1"]) == "login,n1"
    # '09' is padded and '10' is not: they cannot share one ClusterShell range.
    folded = fold_nodeset(["n08", "n09", "n10"])
    assert sorted(expand_nodeset(folded)) == ["n08", "n09", "n10"]
    with pytest.raises(NodeSetError):
        fold_nodeset(["a[1]"])
