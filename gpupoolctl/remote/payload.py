"""The agent payload: the stdlib-only packages zipped deterministically and content-hashed.

The same source tree always gives the same bytes (fixed timestamps and modes, sorted entries),
so the hash names the agent version and nodes can keep one cached copy per hash.
"""

from __future__ import annotations

import hashlib
import io
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

import gpupoolctl

# What runs on a node: the package marker plus the stdlib-only subpackages (DESIGN.md).
SHIPPED_PACKAGES = ("agent", "hw", "sim")
_SKIPPED_DIRS = {"__pycache__"}
_SKIPPED_SUFFIXES = (".pyc", ".pyo", ".swp", "~")
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest timestamp a zip can hold


@dataclass(frozen=True)
class Payload:
    data: bytes
    sha256: str

    @property
    def size(self) -> int:
        return len(self.data)


def _package_root() -> Path:
    return Path(gpupoolctl.__file__).resolve().parent


def payload_files(root: Path | None = None) -> list[tuple[str, Path]]:
    """(archive name, source path) for every shipped file, sorted by archive name."""
    root = root or _package_root()
    files = [("gpupoolctl/__init__.py", root / "__init__.py")]
    for package in SHIPPED_PACKAGES:
        base = root / package
        for path in base.rglob("*"):
            relative = path.relative_to(root)
            if not path.is_file() or _SKIPPED_DIRS.intersection(relative.parts):
                continue
            if path.name.endswith(_SKIPPED_SUFFIXES):
                continue
            files.append(("gpupoolctl/" + relative.as_posix(), path))
    return sorted(files)


def build_payload(root: Path | None = None) -> Payload:
    """Zip the shipped files. Pure function of the files' names and contents."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, path in payload_files(root):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # unix, whatever the workstation is
            info.external_attr = (0o100644 & 0xFFFF) << 16
            archive.writestr(info, path.read_bytes(), compresslevel=6)
    data = buffer.getvalue()
    return Payload(data=data, sha256=hashlib.sha256(data).hexdigest())


_lock = threading.Lock()
_cached: Payload | None = None


def agent_payload() -> Payload:
    """The payload for this process, built on first use (fan-out threads share one build)."""
    global _cached
    with _lock:
        if _cached is None:
            _cached = build_payload()
        return _cached
