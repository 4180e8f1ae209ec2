"""How an error line shows a name or value read from a file: quoted, escaped, cut short.

Every error that shows a key, a name or a value a user wrote (inventories, layouts, hooks,
policies, scenarios) shows it through `shown`, so a key with a newline, a tab or any other
control character can never split the error over two lines or hide part of it, and a
5,000-character name costs one short line. Stdlib only: the agent words its errors alike.
"""

from __future__ import annotations

from typing import Any

MOST = 40  # characters of the quoted value kept; enough to recognise any real name


def shown(value: Any, most: int = MOST) -> str:
    """The value quoted for an error line (Python's repr: newlines and every other
    non-printable character escaped), cut short when long."""
    text = repr(value)
    return text if len(text) <= most else text[:most] + f"... ({len(text)} chars)"
