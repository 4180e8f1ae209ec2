"""Scenario files as the other user files are read: bounded in size, UTF-8 named by line."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from gpupoolctl.errors import SourceError
from gpupoolctl.stress.scenario import load_scenario
from gpupoolctl.textfile import MAX_BYTES


def test_a_huge_file_given_as_a_scenario_is_refused_before_it_is_read(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as handle:  # sparse: costs no disk
        handle.truncate(MAX_BYTES + 1)
    tracemalloc.start()
    try:
        with pytest.raises(SourceError) as caught:
            load_scenario(huge)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(caught.value).startswith(f"{huge}: scenario file is {MAX_BYTES + 1} bytes")
    assert peak < 4 * 1024 * 1024, peak  # never read into memory (it is 64 MiB)


def test_bytes_that_are_not_utf8_are_named_with_their_line(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: nightly\nlevels: 1,2\nhold: 30s # caf\xe9\n".encode("latin-1"))
    with pytest.raises(SourceError) as caught:
        load_scenario(bad)
    assert caught.value.line == 3 and "not UTF-8" in str(caught.value)


def test_a_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    marked = tmp_path / "bom.yaml"
    marked.write_bytes(b"\xef\xbb\xbfname: nightly\r\nlevels: 1,2\r\n")
    scenario = load_scenario(marked)
    assert scenario.name == "nightly" and scenario.levels == (1.0, 2.0)
