"""The benchmarks' scripts are not a package: they import each other with their folder on
sys.path. Tests that import them put bench/utilization (and the repository) there first."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UTILIZATION = REPO / "bench" / "utilization"

for _path in (str(REPO), str(UTILIZATION)):
    if _path not in sys.path:
        sys.path.insert(0, _path)
