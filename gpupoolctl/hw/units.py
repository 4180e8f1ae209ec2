"""Memory figures as people read them. Stdlib only: shared by the scheduler's explanations,
the ledger and the CLI."""

from __future__ import annotations

MIB_PER_GIB = 1024


def gib_text(mib: int | float) -> str:
    """MiB as GiB with one decimal, rounded down: what is shown is what `--mem` compares,
    so asking for the figure a slice shows always fits it (a CPX partition of 24574 MiB is
    23.9, not 24.0; a 1g.10gb instance of 9984 MiB is 9.7, not 9.8)."""
    tenths = int(mib * 10 // MIB_PER_GIB)
    return f"{tenths // 10}.{tenths % 10}"
