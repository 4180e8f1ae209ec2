"""GPU islands: groups of GPUs joined by a direct fabric (NVLink / NVSwitch, xGMI).

A job that talks a lot must stay inside one island; PCIe-only GPUs are islands of one.
Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupoolctl.hw.model import is_direct_link


def islands(matrix: list[list[str]]) -> list[int]:
    """Island number of each GPU (row) of a link matrix: connected components over direct
    links, numbered in order of their lowest GPU index."""
    size = len(matrix)
    island = [-1] * size
    next_id = 0
    for start in range(size):
        if island[start] >= 0:
            continue
        island[start] = next_id
        stack = [start]
        while stack:
            gpu = stack.pop()
            for peer in range(size):
                if island[peer] < 0 and peer != gpu and is_direct_link(matrix[gpu][peer]):
                    island[peer] = next_id
                    stack.append(peer)
        next_id += 1
    return island


def island_count(facts: Mapping[str, Any]) -> int | None:
    """How many islands a node's GPUs form, from its facts; None without GPUs or when the
    link matrix does not cover every GPU (unknown, not guessed)."""
    gpus = facts.get("gpus") or []
    matrix = (facts.get("topology") or {}).get("matrix") or []
    if not gpus or len(matrix) != len(gpus):
        return None
    return len(set(islands(matrix)))
