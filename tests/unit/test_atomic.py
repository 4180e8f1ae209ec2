"""Whole-file replacement: old or new, never half, never a stray temp file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpupoolctl.atomic import replace_file, write_file
from gpupoolctl.errors import GpupoolError


def test_replaces_the_whole_file_with_the_mode_asked(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    replace_file(target, b"new", mode=0o640)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_failed_rename_keeps_the_old_file_and_leaves_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "report.html"
    target.write_text("old")

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(GpupoolError, match=r"report\.html: cannot write the report: No space"):
        write_file(target, "new", what="the report")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


def test_a_missing_folder_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GpupoolError, match="cannot write"):
        write_file(tmp_path / "nope" / "x.json", "{}")
