"""Islands from link matrices, checked against a union-find written independently."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.hw.topology import islands

LEVELS = ["NV12", "NV18", "XGMI", "PIX", "PXB", "PHB", "NODE", "SYS"]


def test_dgx_is_one_island_and_pcie_cards_are_alone():
    dgx = [["X" if i == j else "NV18" for j in range(8)] for i in range(8)]
    assert islands(dgx) == [0] * 8
    pcie = [
        ["X" if i == j else ("PIX" if i // 2 == j // 2 else "SYS") for j in range(4)]
        for i in range(4)
    ]
    assert islands(pcie) == [0, 1, 2, 3]
    bridged = [
        ["X", "NV4", "SYS", "SYS"],
        ["NV4", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "NV4"],
        ["SYS", "SYS", "NV4", "X"],
    ]
    assert islands(bridged) == [0, 0, 1, 1]
    assert islands([]) == []


@st.composite
def matrices(draw):
    size = draw(st.integers(0, 9))
    matrix = [["X"] * size for _ in range(size)]
    for i in range(size):
        for j in range(i + 1, size):
            matrix[i][j] = matrix[j][i] = draw(st.sampled_from(LEVELS))
    return matrix


@given(matrices())
def test_matches_union_find(matrix):
    parent = list(range(len(matrix)))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, row in enumerate(matrix):
        for j, level in enumerate(row):
            if i != j and (level.startswith("NV") or level == "XGMI"):
                parent[find(i)] = find(j)
    got = islands(matrix)
    for i in range(len(matrix)):
        for j in range(len(matrix)):
            assert (got[i] == got[j]) == (find(i) == find(j))
    # Numbered by lowest member: the first GPU of each new island gets the next number.
    seen = []
    for number in got:
        if number not in seen:
            seen.append(number)
    assert seen == list(range(len(seen)))
