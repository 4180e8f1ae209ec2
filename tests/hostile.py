"""Hostile inputs shared by the bad-input tests (readers in-process, the CLI in a child)."""

from __future__ import annotations


def alias_bomb(levels: int = 9, width: int = 9) -> bytes:
    """An inventory with nine levels of nine aliases: under 1 KB, ~400 million nodes once
    anything walks it (the "billion laughs")."""
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    body = "\n".join("    " + line for line in lines)
    return f"all:\n  vars:\n{body}\n  hosts:\n    h1:\n".encode()
