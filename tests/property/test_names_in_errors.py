"""A name read from a file is shown quoted and escaped wherever an error shows it.

Each reader of a file a user writes (inventories YAML and INI, partition layouts, hooks, pool
policies, stress scenarios) gets a small valid document with one key, name or value replaced
by arbitrary text: newlines, carriage returns, NEL, line and paragraph separators, escape
sequences, tabs, 5,000 characters. The answer is a value, or one printable line (no character
that would break the line or drive a terminal) naming the file: never a line cut in two by
the name it shows.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpupoolctl.errors import GpupoolError
from tests.property.test_bad_input_readers import (
    read_hooks,
    read_inventory,
    read_scenario,
    read_spec,
)

# Where a name or key of the user's goes, per reader; NAME is replaced by the drawn text.
YAML_PLACES: dict[str, list[str]] = {
    "inventory": [
        "all: {hosts: {NAME: {sim: a100-pcie-4, sim_nics: 3}}}",
        "all: {hosts: {NAME: 3}}",
        "all: {hosts: {NAME: {port: x}}}",
        "all: {children: {NAME: {hosts: [h1]}}}",
        "all: {children: {NAME: 3}}",
        "all: {children: {g: {children: {NAME: {}}}}}",
        "all: {NAME: {h1: 1}}",
        "NAME: {hosts: {h1: {}}, NAME: 1}",
        "all: {hosts: {h1: {sim: a100-pcie-4, sim_nics: [{name: ib0, kind: roce, speed_gbps: 1,"
        " NAME: 1}]}}}",
        "all: {hosts: {h1: {sim: a100-pcie-4, sim_nics: [{name: NAME, kind: roce, speed_gbps: 1},"
        " {name: NAME, kind: roce, speed_gbps: 1}]}}}",
        "all: {hosts: {h1: {sim: a100-pcie-4, sim_nics: [{name: ib0, kind: NAME,"
        " speed_gbps: 1}]}}}",
        "all: {vars: {gpupool_site_links: [{sites: [a, b], gbps: 1, rtt_ms: 1, NAME: 1}]},"
        " hosts: {h1: {}}}",
        "all: {vars: {gpupool_site_links: [{sites: [NAME, b], gbps: 1, rtt_ms: 1},"
        " {sites: [NAME, b], gbps: 1, rtt_ms: 1}]}, hosts: {h1: {}}}",
        "all: {vars: {gpupool_site_links: [{sites: [NAME, NAME], gbps: 1, rtt_ms: 1}]},"
        " hosts: {h1: {}}}",
        "all: {hosts: {h1: {ansible_group_priority: 1}}, children: {NAME: {vars:"
        " {ansible_group_priority: x}}}}",
    ],
    "layouts": [
        "version: v1\nmig-configs:\n  NAME:\n  - devices: all\n    NAME: 1\n",
        "version: v1\nmig-configs:\n  NAME:\n  - devices: all\n",
        "version: v1\nmig-configs:\n  NAME: []\n",
        "version: NAME\nmig-configs:\n  x:\n  - devices: all\n    mig-enabled: false\n",
        "version: v1\nNAME: 1\n",
        "version: v1\nmig-configs:\n  x:\n  - devices: all\n    mig-enabled: true\n"
        "    mig-devices: {NAME: 1}\n",
        "version: v1\nmig-configs:\n  x:\n  - devices: NAME\n    mig-enabled: false\n",
        "version: v1\nmig-configs:\n  x:\n  - devices: all\n    compute-partition: NAME\n",
        "version: v1\nmig-configs:\n  x:\n  - devices: all\n    device-filter: NAME\n"
        "    mig-enabled: false\n",
    ],
    "hooks": [
        "version: v1\nhooks:\n  NAME:\n  - command: /bin/true\n",
        "version: NAME\nhooks: {}\n",
        "version: v1\nhooks:\n  apply-start:\n  - command: /bin/true\n    NAME: 1\n",
        "version: v1\nhooks:\n  apply-start:\n  - NAME\n",
    ],
    "policy": [
        "version: 1\nNAME: 1\n",
        "version: NAME\n",
        "version: 1\nelastic:\n  NAME: 1\n",
        "version: 1\nelastic:\n  rules:\n  - hosts: h100\n    NAME: 1\n",
        "version: 1\nelastic:\n  rules:\n  - vendor: NAME\n",
        "version: 1\nelastic:\n  rules:\n  - hosts: h100\n    profiles: [NAME]\n",
        "version: 1\nteams:\n  NAME:\n    members: [a]\n",
        "version: 1\nteams:\n  t:\n    members: [NAME]\n",
        "version: 1\nteams:\n  t:\n    members: [a]\n    quota: {NAME: 1}\n",
        "version: 1\nwindows:\n- name: NAME\n  timezone: UTC\n",
        "version: 1\nwindows:\n- name: w\n  timezone: NAME\n",
        "version: 1\nadmins: [NAME]\n",
    ],
    "scenario": [
        "NAME: 1\n",
        "name: x\nlevels: [1]\nworkload:\n  kind: NAME\n",
        "name: x\nlevels: [1]\nworkload:\n  kind: sleep\n  NAME: 1\n",
        "name: x\nlevels: [1]\nmodel: NAME\nworkload:\n  kind: sleep\n",
        "name: x\nlevels: [1]\nthresholds: [NAME]\nworkload:\n  kind: sleep\n",
    ],
}
# An INI line holds no line break; every other character can be in it.
INI_PLACES = [
    "[g]\nh1 NAME\n",
    "[NAME:vars]\nx=1\n",
    "[g]\nh1\n[g:NAME]\n",
    "[g]\nh1\n[g:vars]\nNAME\n",
    "[g:children]\nNAME\n",
]


def read_policy(path: Path) -> Any:
    from gpupoolctl.policy.load import load_policy

    return load_policy(path)


READERS: dict[str, tuple[Callable[[Path], Any], str]] = {
    "inventory": (read_inventory, "hosts.yml"),
    "layouts": (read_spec, "layouts.yaml"),
    "hooks": (read_hooks, "hooks.yaml"),
    "policy": (read_policy, "pool.yaml"),
    "scenario": (read_scenario, "scenario.yaml"),
}

# Text of every kind, the characters that break lines and drive terminals made likely.
BREAKERS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x1b\t\x00\x7f"
names = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30),
    st.lists(st.sampled_from([*BREAKERS, "a", "-", " ", ":", "[", "]"]), min_size=1).map("".join),
    st.builds(lambda c, n: "h" + c * n, st.sampled_from(["x", "\n"]), st.integers(40, 5000)),
)
ini_names = names.map(
    lambda text: (
        "".join(" " if c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029" else c for c in text).strip()
        or "x"
    )
)
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def answer(read: Callable[[Path], Any], file_name: str, text: str) -> str | None:
    """What the reader says of `text`: None for a value, else its error line."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / file_name
        path.write_text(text, encoding="utf-8")
        try:
            read(path)
        except GpupoolError as exc:
            message = str(exc)
            assert str(path) in message or file_name in message, message
            return message
    return None


def one_printable_line(message: str | None) -> bool:
    return message is None or (len(message.splitlines()) == 1 and message.isprintable())


@pytest.mark.parametrize(
    ("kind", "place"),
    [(kind, place) for kind, places in YAML_PLACES.items() for place in places],
)
@given(name=names)
@example(name="a\nb")
@example(name="x\u2028y\x1b[2Jz")
@SETTINGS
def test_a_name_in_a_yaml_file_is_shown_on_one_line(kind: str, place: str, name: str) -> None:
    read, file_name = READERS[kind]
    # A JSON string is a YAML double-quoted scalar, escapes included: any text can be a key.
    text = place.replace("NAME", json.dumps(name))
    assert one_printable_line(answer(read, file_name, text))


@pytest.mark.parametrize("place", INI_PLACES)
@given(name=ini_names)
@example(name="a\x1bb")
@SETTINGS
def test_a_name_in_an_ini_inventory_is_shown_on_one_line(place: str, name: str) -> None:
    assert one_printable_line(answer(read_inventory, "hosts.ini", place.replace("NAME", name)))


def test_the_reported_case_names_the_key_escaped() -> None:
    """The case hypothesis found: a sim_nics entry's unknown key with a newline in it."""
    text = YAML_PLACES["inventory"][8].replace("NAME", json.dumps("bad\nkey"))
    message = answer(read_inventory, "hosts.yml", text)
    assert message is not None and "unknown key(s) 'bad\\nkey'" in message
    assert one_printable_line(message)
