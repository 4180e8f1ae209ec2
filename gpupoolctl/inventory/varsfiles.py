"""group_vars/ and host_vars/ beside the inventory file, found the way Ansible finds them.

For an entity `name`, the first of `name`, `name.yml`, `name.yaml`, `name.json` that exists
wins; a directory is read recursively in sorted order, skipping hidden files, backups (`~`)
and files whose extension is not one of those. Each file must hold a mapping (or nothing);
files are merged shallowly, later keys replacing earlier ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpupoolctl.errors import InventoryError
from gpupoolctl.inventory.yamlload import Document, kind, line_of

EXTENSIONS = (".yml", ".yaml", ".json")


def find_vars_files(folder: Path, name: str) -> list[Path]:
    """The files that hold variables for `name` in `folder` (group_vars or host_vars)."""
    if name.startswith("/") or not folder.is_dir():
        return []
    base = folder / name
    for candidate in (base, *(Path(f"{base}{ext}") for ext in EXTENSIONS)):
        if candidate.is_dir():
            return _dir_files(candidate)
        if candidate.exists():
            return [candidate]
    return []


def _dir_files(folder: Path) -> list[Path]:
    found: list[Path] = []
    for entry in sorted(p.name for p in folder.iterdir()):
        if entry.startswith(".") or entry.endswith("~"):
            continue
        path = folder / entry
        ext = path.suffix
        if path.is_dir() and not ext:
            found.extend(_dir_files(path))
        elif path.is_file() and (not ext or ext in EXTENSIONS):
            found.append(path)
    return found


def read_bytes_bounded(path: Path, what: str) -> bytes:
    """The file's bytes, bounded in size (textfile.MAX_BYTES), as an InventoryError."""
    from gpupoolctl.errors import SourceError
    from gpupoolctl.textfile import read_user_bytes

    try:
        return read_user_bytes(path, what)
    except SourceError as exc:
        raise InventoryError(exc.path, exc.line, exc.detail) from None


def load_vars_file(path: Path) -> dict[str, Any]:
    raw = read_bytes_bounded(path, "vars file")
    if raw.startswith(b"$ANSIBLE_VAULT;"):
        raise InventoryError(str(path), 1, "vault-encrypted files are not supported")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InventoryError(str(path), None, f"not UTF-8 text ({exc.reason})") from None
    doc = Document(path, text)
    if doc.root is None:
        return {}
    value = doc.value(doc.root)
    if not value:
        return {}  # empty files are ignored, as Ansible does
    if not isinstance(value, dict):
        raise InventoryError(
            str(path), line_of(doc.root), f"expected a mapping of variables, got {kind(doc.root)}"
        )
    return value


def load_vars(folder: Path, name: str) -> dict[str, Any]:
    """The merged variables for one group or host from one group_vars/host_vars folder."""
    merged: dict[str, Any] = {}
    for path in find_vars_files(folder, name):
        merged.update(load_vars_file(path))
    return merged
