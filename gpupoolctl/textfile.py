"""Reading a text file a user named: bounded in size, UTF-8, one SourceError for any trouble.

    text = read_user_text(path, "hooks file")   # SourceError(path, line, ...) otherwise

A file larger than MAX_BYTES is refused before it is read (a log or an image given by
mistake must not cost the workstation its memory); bytes that are not UTF-8 are named with
their line; a UTF-8 byte-order mark is dropped, as editors on some systems write one.
"""

from __future__ import annotations

import os

from gpupoolctl.errors import SourceError

MAX_BYTES = 64 * 1024 * 1024
_BOM = b"\xef\xbb\xbf"


def read_user_text(path: str | os.PathLike[str], what: str) -> str:
    return decode_user_text(read_user_bytes(path, what), os.fspath(path), what)


def read_user_bytes(path: str | os.PathLike[str], what: str) -> bytes:
    """The file's bytes, refused unread past MAX_BYTES; SourceError for any trouble."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_BYTES:
                raise SourceError(
                    name, None, f"{what} is {size} bytes; at most {MAX_BYTES} are read"
                )
            raw = handle.read(MAX_BYTES + 1)
    except IsADirectoryError:
        raise SourceError(name, None, f"is a folder; give the {what} itself") from None
    except OSError as exc:
        raise SourceError(name, None, f"cannot read {what}: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise SourceError(name, None, f"{what} is over {MAX_BYTES} bytes; not read")
    return raw


def decode_user_text(raw: bytes, name: str, what: str) -> str:
    if len(raw) > MAX_BYTES:
        raise SourceError(name, None, f"{what} is over {MAX_BYTES} bytes; not read")
    if raw.startswith(_BOM):
        raw = raw[len(_BOM) :]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise SourceError(
            name,
            line,
            f"{what} is not UTF-8 text (byte 0x{raw[exc.start]:02x}; is it a text file?)",
        ) from None
