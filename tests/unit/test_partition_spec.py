"""The partition spec parser: mig-parted's v1 rules, our additions, and errors with file:line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.errors import SourceError, UsageError
from gpupoolctl.partition import load_spec, parse_profile_name, parse_spec


def spec_text(body: str) -> str:
    return "version: v1\nmig-configs:\n" + textwrap.indent(textwrap.dedent(body), "  ")


def error_of(text: str, source: str = "layouts.yaml") -> SourceError:
    with pytest.raises(SourceError) as info:
        parse_spec(text, source)
    return info.value


def test_additions_parse() -> None:
    spec = parse_spec(
        spec_text(
            """\
            day:
              - hosts: [h100, sg-a100-*]
                device-filter: "0x233010de"
                devices: [4, 5]
                mig-enabled: true
                mig-devices:
                  "3g.40gb@4": 1
                  "1g.10gb": 2
                  "1c.3g.40gb@0": 3
                sriov-vfs: 0
              - hosts: mi300x
                devices: all
                compute-partition: cpx
                memory-partition: NPS4
            """
        ),
        "layouts.yaml",
    )
    first, second = spec.config("day")
    assert first.hosts == ("h100", "sg-a100-*")
    assert first.device_filter == ("0x233010DE",)
    assert first.devices == (4, 5)
    assert [(d.key, str(d.profile), d.count, d.start, d.line) for d in first.mig_devices] == [
        ("3g.40gb@4", "3g.40gb", 1, 4, 9),
        ("1g.10gb", "1g.10gb", 2, None, 10),
        ("1c.3g.40gb@0", "1c.3g.40gb", 3, 0, 11),
    ]
    assert first.sriov_vfs == 0 and first.line == 4
    assert first.where("mig-devices") == "layouts.yaml:8"
    assert second.mig_enabled is None
    assert (second.compute_partition, second.memory_partition) == ("CPX", "NPS4")
    assert second.hosts == ("mi300x",)
    assert first.matches_host("sg-a100-01", []) and first.matches_host("x", ["h100"])
    assert not first.matches_host("dxb-l40s-01", ["l40s", "all"])
    assert first.matches_device(4, "0x233010DE") and not first.matches_device(4, "0x20F110DE")
    assert not first.matches_device(0, "0x233010DE")


def test_unknown_label_lists_the_valid_ones() -> None:
    spec = parse_spec(spec_text("a:\n  - devices: all\n    mig-enabled: false\n"), "f.yaml")
    with pytest.raises(UsageError, match="valid: a"):
        spec.config("b")


def test_load_spec_reads_files_and_names_them(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(spec_text("a:\n  - devices: [7]\n    mig-enabled: nope\n"))
    with pytest.raises(SourceError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}:5: mig-enabled must be true or false")
    with pytest.raises(SourceError, match="cannot read"):
        load_spec(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("version: v2\nmig-configs: {}\n", 1, "unknown version: 'v2'; expected v1"),
        ("mig-configs: {}\n", 1, "missing required field 'version'"),
        ("version: v1\n", 1, "missing required field 'mig-configs'"),
        ("version: v1\nmig-configs: {}\n", 2, "at least one entry in 'mig-configs'"),
        ("version: v1\nextra: 1\nmig-configs: {a: []}\n", 2, "unexpected field 'extra'"),
        ("version: v1\nmig-configs:\n  a: []\n", 3, "must be a non-empty list"),
        (spec_text("a:\n  - devices: 7\n    mig-enabled: false\n"), 4, "(write [7])"),
        (spec_text("a:\n  - devices: some\n    mig-enabled: false\n"), 4, "devices must be"),
        (spec_text("a:\n  - devices: [-1]\n    mig-enabled: false\n"), 4, "got -1"),
        (spec_text("a:\n  - mig-enabled: false\n"), 4, "missing required field 'devices'"),
        (spec_text("a:\n  - devices: all\n"), 4, "missing required field 'mig-enabled'"),
        (
            spec_text("a:\n  - devices: all\n    mig-enabled: true\n"),
            4,
            "missing required field 'mig-devices'",
        ),
        (
            spec_text("a:\n  - devices: all\n    mig-enabled: true\n    mig-devices:\n"),
            6,
            "mig-devices must be a mapping",
        ),
        (
            spec_text(
                "a:\n  - devices: all\n    mig-enabled: false\n    mig-devices: {1g.5gb: 1}\n"
            ),
            6,
            "MIG devices included when 'mig-enabled' is false",
        ),
        (
            spec_text("a:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {x: 1}\n"),
            6,
            "'x' is not a MIG profile name",
        ),
        (
            spec_text(
                "a:\n  - devices: all\n    mig-enabled: true\n    mig-devices:\n      1g.5gb: -1\n"
            ),
            7,
            "count for '1g.5gb' must be a whole number >= 0",
        ),
        (
            spec_text(
                "a:\n  - devices: all\n    mig-enabled: true\n    mig-devices:\n      1g.5gb@2: 2\n"
            ),
            7,
            "its count must be 1",
        ),
        (
            spec_text(
                "a:\n  - devices: all\n    mig-enabled: true\n    mig-devices:\n      1g.5gb@x: 1\n"
            ),
            7,
            "profile@start",
        ),
        (spec_text("a:\n  - devices: all\n    mig-enabled: false\n    bogus: 1\n"), 6, "bogus"),
        (
            spec_text("a:\n  - devices: all\n    device-filter: nvidia\n    mig-enabled: false\n"),
            5,
            "device-filter must be a PCI device id",
        ),
        (spec_text("a:\n  - devices: all\n    compute-partition: XPX\n"), 5, "SPX, DPX"),
        (spec_text("a:\n  - devices: all\n    memory-partition: NPS3\n"), 5, "NPS1, NPS2"),
        (spec_text("a:\n  - devices: all\n    sriov-vfs: -2\n"), 5, "sriov-vfs must be"),
        (spec_text("a:\n  - devices: all\n    hosts: []\n    sriov-vfs: 1\n"), 5, "at least one"),
        (spec_text("a:\n  - devices: all\n    hosts: [1]\n    sriov-vfs: 1\n"), 5, "host or group"),
        (
            spec_text("a:\n  - devices: all\n    mig-devices: {}\n    sriov-vfs: 1\n"),
            5,
            "mig-devices needs mig-enabled: true",
        ),
        (
            spec_text("a:\n  - devices: all\n    mig-enabled: false\n    mig-enabled: true\n"),
            6,
            "duplicate key 'mig-enabled'",
        ),
        ("version: v1\nmig-configs: [\n", 3, "not valid YAML"),
        ("- a\n- b\n", 1, "the file must be a mapping"),
    ],
)
def test_every_error_names_file_and_line(text: str, line: int, message: str) -> None:
    err = error_of(text)
    assert err.path == "layouts.yaml"
    assert err.line == line, str(err)
    assert message in str(err)
    assert str(err).startswith(f"layouts.yaml:{line}: ")


def test_yaml_merge_keys_in_entries() -> None:
    merged = parse_spec(
        spec_text(
            """\
            all-1g:
              - &h100
                devices: all
                device-filter: "0x233010DE"
                mig-enabled: true
                mig-devices: {1g.10gb: 7}
            first-two:
              - <<: *h100
                devices: [0, 1]
            """
        ),
        "layouts.yaml",
    )
    written_out = parse_spec(
        spec_text(
            """\
            first-two:
              - devices: [0, 1]
                device-filter: "0x233010DE"
                mig-enabled: true
                mig-devices: {1g.10gb: 7}
            """
        ),
        "layouts.yaml",
    )
    (entry,) = merged.configs["first-two"]
    (expected,) = written_out.configs["first-two"]
    assert entry.devices == (0, 1)  # its own key wins over the merged one
    assert (entry.device_filter, entry.mig_enabled) == (expected.device_filter, True)
    assert [(d.key, d.count, d.start) for d in entry.mig_devices] == [
        (d.key, d.count, d.start) for d in expected.mig_devices
    ]
    assert entry.line == 10 and entry.lines["devices"] == 11
    assert entry.lines["mig-enabled"] == 7  # a merged key keeps the line it is written on
    assert merged.configs["all-1g"][0].devices == "all"  # the anchored entry is unchanged


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("a:\n  - &e {devices: all, mig-enabled: false, bogus: 1}\nb:\n  - <<: *e\n", 4, "bogus"),
        ("a:\n  - <<: all\n", 4, "<<: expected a mapping or a list of mappings"),
        ("a:\n  - devices: !!int all\n    mig-enabled: false\n", 4, "'all' is not a valid int"),
    ],
)
def test_merge_and_tag_errors_are_one_line(body: str, line: int, message: str) -> None:
    err = error_of(spec_text(body))
    assert err.line == line, str(err)
    assert message in str(err)
    assert "\n" not in str(err)


_small_maps = st.dictionaries(st.sampled_from(["p", "q", "r", "s"]), st.integers(0, 9), max_size=4)


@settings(max_examples=200, deadline=None)
@given(_small_maps, _small_maps, _small_maps, st.booleans())
def test_merges_read_as_pyyaml_loads_them(
    first: dict[str, int], second: dict[str, int], own: dict[str, int], as_list: bool
) -> None:
    """Whatever the overlap: own keys win, then the first merged mapping, as in safe_load."""
    import json

    from gpupoolctl.yamlsource import YamlSource

    merge = "[*a, *b]" if as_list else "*a"
    lines = [f"x: &a {json.dumps(first)}", f"y: &b {json.dumps(second)}", f"m:\n  <<: {merge}"]
    lines += [f"  {key}: {value}" for key, value in own.items()]
    text = "\n".join(lines) + "\n"
    doc = YamlSource(text, "m.yaml")
    top = doc.mapping(doc.root(), "the file")
    read = {k: doc.scalar(v) for k, (_, v) in doc.mapping(top["m"][1], "m").items()}
    assert read == yaml.safe_load(text)["m"]


def test_empty_file_is_an_error() -> None:
    err = error_of("")
    assert "empty file" in str(err)


def test_unquoted_hex_device_filter_is_read_as_the_id() -> None:
    spec = parse_spec(
        spec_text("a:\n  - devices: all\n    device-filter: 0x20B710DE\n    mig-enabled: false\n")
    )
    assert spec.config("a")[0].device_filter == ("0x20B710DE",)


@pytest.mark.parametrize(
    ("name", "canonical", "ci", "gi"),
    [
        ("1g.5gb", "1g.5gb", 1, "1g.5gb"),
        ("1c.3g.20gb", "1c.3g.20gb", 1, "3g.20gb"),
        ("3c.3g.20gb", "3g.20gb", 3, "3g.20gb"),
        ("1g.5gb+me", "1g.5gb+me", 1, "1g.5gb+me"),
        ("1g.24gb+me.all", "1g.24gb+me.all", 1, "1g.24gb+me.all"),
        ("1g.24gb-me", "1g.24gb-me", 1, "1g.24gb-me"),
        ("2c.4g.96gb+gfx", "2c.4g.96gb+gfx", 2, "4g.96gb+gfx"),
    ],
)
def test_profile_names_as_mig_parted_reads_them(
    name: str, canonical: str, ci: int, gi: str
) -> None:
    profile = parse_profile_name(name)
    assert (str(profile), profile.ci_slices, profile.gi_name) == (canonical, ci, gi)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "1g",
        "1x.5gb",
        "1g.5",
        "4c.3g.20gb",
        "1g.5gb+me-gfx",
        "1g.5gb+",
        "1g.5gb+me,me",
        "1g.5gb+.me",
        "1g.5gb+1me",
        " 1g.5gb",
        "0g.5gb",
        "1c.2c.3g.20gb",
    ],
)
def test_bad_profile_names(name: str) -> None:
    with pytest.raises(ValueError):
        parse_profile_name(name)


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 10),
    st.sampled_from(["all", "v1", "1g.10gb", "3g.40gb@4", "CPX", "NPS4", "0x233010DE", "x"]),
)
_keys = st.sampled_from(
    [
        "version",
        "mig-configs",
        "devices",
        "device-filter",
        "mig-enabled",
        "mig-devices",
        "hosts",
        "compute-partition",
        "memory-partition",
        "sriov-vfs",
        "1g.10gb",
        "a",
        "bogus",
    ]
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=4))
def test_any_document_parses_or_fails_with_a_source_error(document: dict[str, object]) -> None:
    text = yaml.safe_dump(document)
    try:
        parse_spec(text, "fuzz.yaml")
    except SourceError as exc:
        assert str(exc).startswith("fuzz.yaml")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(_keys, _values, max_size=6), min_size=1, max_size=3))
def test_any_entry_parses_or_fails_with_a_source_error(entries: list[dict[str, object]]) -> None:
    text = yaml.safe_dump({"version": "v1", "mig-configs": {"a": entries}})
    try:
        parse_spec(text, "fuzz.yaml")
    except SourceError as exc:
        assert str(exc).startswith("fuzz.yaml:")
