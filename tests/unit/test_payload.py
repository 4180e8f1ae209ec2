"""The agent payload: what it contains, and that it is deterministic and content-hashed."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import zipfile
from pathlib import Path

import gpupoolctl
from gpupoolctl.remote.payload import agent_payload, build_payload, payload_files

SOURCE = Path(gpupoolctl.__file__).resolve().parent


def _copy_tree(dest: Path) -> Path:
    root = dest / "gpupoolctl"
    shutil.copytree(SOURCE, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_contents_are_the_stdlib_packages_only() -> None:
    names = zipfile.ZipFile(io.BytesIO(agent_payload().data)).namelist()
    assert names == sorted(names)
    assert "gpupoolctl/__init__.py" in names
    assert "gpupoolctl/agent/main.py" in names
    assert "gpupoolctl/agent/protocol.py" in names
    assert "gpupoolctl/hw/model.py" in names
    assert "gpupoolctl/sim/state.py" in names
    allowed = ("gpupoolctl/agent/", "gpupoolctl/hw/", "gpupoolctl/sim/")
    assert all(n == "gpupoolctl/__init__.py" or n.startswith(allowed) for n in names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_entries_have_fixed_metadata_and_deflate() -> None:
    archive = zipfile.ZipFile(io.BytesIO(agent_payload().data))
    for info in archive.infolist():
        assert info.date_time == (1980, 1, 1, 0, 0, 0)
        assert info.compress_type == zipfile.ZIP_DEFLATED
        assert info.external_attr >> 16 == 0o100644


def test_hash_is_sha256_of_bytes_and_cached() -> None:
    payload = agent_payload()
    assert payload.sha256 == hashlib.sha256(payload.data).hexdigest()
    assert agent_payload() is payload


def test_same_tree_same_bytes_whatever_mtimes(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    for path in root.rglob("*"):
        os.utime(path, (1_700_000_000, 1_700_000_000))
    assert build_payload(root) == build_payload(SOURCE)


def test_content_change_changes_hash_and_data_files_ship(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    before = build_payload(root)
    (root / "hw" / "catalog_test.json").write_text('{"x": 1}')
    (root / "agent" / "__pycache__").mkdir(exist_ok=True)
    (root / "agent" / "__pycache__" / "junk.pyc").write_bytes(b"junk")
    after = build_payload(root)
    assert after.sha256 != before.sha256
    names = [name for name, _ in payload_files(root)]
    assert "gpupoolctl/hw/catalog_test.json" in names
    assert not [n for n in names if "__pycache__" in n]


def test_workstation_only_packages_are_not_shipped(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    (root / "remote" / "extra.py").write_text("x = 1\n")
    assert build_payload(root) == build_payload(SOURCE)
