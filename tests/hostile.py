"""Hostile inputs shared by the bad-input tests (readers in-process, the CLI in a child)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def alias_bomb(levels: int = 9, width: int = 9) -> bytes:
    """An inventory with nine levels of nine aliases: under 1 KB, ~400 million nodes once
    anything walks it (the "billion laughs")."""
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    body = "\n".join("    " + line for line in lines)
    return f"all:\n  vars:\n{body}\n  hosts:\n    h1:\n".encode()


MEMORY_CAP = 1024 * 1024 * 1024  # far above what reading any hostile file may cost
CPU_CAP_S = 30


def _caps() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_CAP_S, CPU_CAP_S))


def capped(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command line in a child whose memory and CPU time are capped (setrlimit),
    in a HOME and sim folder of its own: a reader that runs away hits the cap, not the box."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env.update({"HOME": str(tmp_path), "GPUPOOL_SIM_DIR": str(tmp_path / "sim")})
    return subprocess.run(
        [sys.executable, "-m", "gpupoolctl.cli.main", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
        preexec_fn=_caps,
        timeout=120,
    )
