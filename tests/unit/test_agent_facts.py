"""facts.collect: merging drivers' GPUs, link blocks and warnings into one node answer."""

from __future__ import annotations

from typing import Any

from gpupoolctl.agent import facts


class FakeDriver:
    def __init__(self, vendor: str, count: int, level: str, warnings: list[str]) -> None:
        self.name = f"fake-{vendor}"
        self.vendor = vendor
        self.count = count
        self.level = level
        self.warnings = warnings
        self.closed = False

    def gpus(self) -> list[dict[str, Any]]:
        return [
            {"index": i, "uuid": f"{self.vendor}-{i}", "vendor": self.vendor}
            for i in range(self.count)
        ]

    def link_matrix(self) -> list[list[str]]:
        return [
            ["X" if i == j else self.level for j in range(self.count)] for i in range(self.count)
        ]

    def version(self) -> str | None:
        return "1.0"

    def close(self) -> None:
        self.closed = True


def test_two_vendors_meet_across_sys_and_warnings_are_passed_on(mocker):
    nvidia = FakeDriver("nvidia", 2, "NV4", ["memory: nvmlDeviceGetMemoryInfo: Unknown Error"])
    amd = FakeDriver("amd", 3, "XGMI", [])
    mocker.patch.object(facts, "open_drivers", return_value=([nvidia, amd], ["amd/smi: odd"]))
    node = facts.collect("n1", simulated=False)
    assert [g["uuid"] for g in node["gpus"]] == node["topology"]["gpus"]
    assert [g["index"] for g in node["gpus"]] == [0, 1, 2, 3, 4]
    matrix = node["topology"]["matrix"]
    assert matrix[0][1] == "NV4" and matrix[2][4] == "XGMI"
    assert matrix[1][2] == "SYS" and matrix[4][0] == "SYS"
    assert all(matrix[i][i] == "X" for i in range(5))
    assert node["warnings"] == [
        "amd/smi: odd",
        "nvidia/fake-nvidia: memory: nvmlDeviceGetMemoryInfo: Unknown Error",
    ]
    assert node["drivers"] == {"nvidia": "fake-nvidia", "amd": "fake-amd"}
    assert nvidia.closed and amd.closed
