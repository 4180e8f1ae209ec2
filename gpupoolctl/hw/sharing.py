"""Who may read and write the files gpupoolctl keeps: their owner alone, or the group of a
shared folder. Stdlib only: the ledger, the simulator's state and the agent's job folders
follow this one rule.

A folder with its setgid bit set (`install -d -m 2770 -g GROUP DIR`) is shared with its
group: the kernel gives what is made in it the folder's group, and gpupoolctl makes its new
files there 0660 and its new folders 2770, whatever the umask, so that every member can
read and write them. Anywhere else new files are 0600 and new folders 0700. A file that is
replaced (renamed over) keeps the mode it had.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_FILE = 0o600
SHARED_FILE = 0o660
PRIVATE_DIR = 0o700
SHARED_DIR = 0o2770

Where = str | os.PathLike[str]


def is_shared(folder: Where) -> bool:
    """Whether `folder` is shared with its group (its setgid bit is set)."""
    try:
        return bool(os.stat(folder).st_mode & stat.S_ISGID)
    except OSError:
        return False


def file_mode(folder: Where) -> int:
    """The mode of a new file in `folder`: 0660 where the folder is shared, else 0600."""
    return SHARED_FILE if is_shared(folder) else PRIVATE_FILE


def replacing_mode(path: Where) -> int:
    """The mode for a new version of `path`: the one it has (an operator's chmod stays), or
    that of a new file in its folder when there is none yet."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode) & 0o777
    except FileNotFoundError:
        return file_mode(os.path.dirname(os.path.abspath(path)))


def open_file(path: Where, flags: int, mode: int | None = None) -> int:
    """os.open(path, flags), creating the file when it is missing with exactly `mode` (the
    umask takes nothing), by default the mode of a new file in its folder. The common case
    (it exists) costs one open."""
    flags &= ~(os.O_CREAT | os.O_EXCL)
    while True:
        try:
            return os.open(path, flags)
        except FileNotFoundError:
            pass
        if mode is None:
            mode = file_mode(os.path.dirname(os.path.abspath(path)))
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, mode)
        except FileExistsError:
            continue  # made by someone else meanwhile: open theirs
        try:
            os.fchmod(fd, mode)  # the umask may have taken the group's bits
        except BaseException:
            os.close(fd)
            raise
        return fd


def dir_mode(parent: Where) -> int:
    """The mode of a new folder in `parent`: 2770 where the parent is shared, else 0700."""
    return SHARED_DIR if is_shared(parent) else PRIVATE_DIR


def make_dir(path: Where) -> None:
    """os.mkdir(path) with the mode of a new folder in its parent, exactly (the umask takes
    nothing). FileExistsError when it exists: making it can be a claim."""
    mode = dir_mode(os.path.dirname(os.path.abspath(path)))
    os.mkdir(path, mode)
    os.chmod(path, mode)


def make_dirs(path: Where) -> None:
    """Create `path` and the missing folders above it, each as make_dir would. An existing
    folder is left as it is."""
    path = Path(path).absolute()
    missing: list[Path] = []
    while not path.is_dir() and path.parent != path:
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        try:
            make_dir(folder)
        except FileExistsError:
            continue  # made by someone else meanwhile
