"""`partition profiles --model` as people say it: a short name or part of one, any case; and
a model that can be cut into nothing answers with no rows, not an error."""

from __future__ import annotations

import pytest

from gpupoolctl.errors import UsageError
from gpupoolctl.partition.profiles import names_model, profile_table, resolve_model


def keys(model: str) -> list[str]:
    return [entry.key for _, entry in resolve_model(model)]


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("H100", ["H100-SXM5-80GB", "H100-NVL-94GB", "H100-96GB"]),
        ("h100", ["H100-SXM5-80GB", "H100-NVL-94GB", "H100-96GB"]),
        ("A100", ["A100-SXM4-40GB", "A100-SXM4-80GB"]),
        ("h200", ["H200-141GB"]),  # not GH200: a name's part starts a word
        ("mi300", ["mi300x"]),
        ("l40s", ["L40S"]),
        ("A100-SXM4-40GB", ["A100-SXM4-40GB"]),  # a whole name is that model alone
        ("NVIDIA H100 80GB HBM3", ["H100-SXM5-80GB"]),
        ("0x233010de", ["H100-SXM5-80GB"]),
    ],
)
def test_short_model_names_find_their_models(model: str, expected: list[str]) -> None:
    assert keys(model) == expected


def test_every_h100_row_is_an_h100_model() -> None:
    models, rows = profile_table("H100")
    assert models == ["H100-SXM5-80GB", "H100-NVL-94GB", "H100-96GB"]
    assert rows and {row["model"] for row in rows} == set(models)


def test_a_model_without_mig_or_amd_modes_has_no_rows() -> None:
    assert profile_table("L40S") == (["L40S"], [])


def test_unknown_models_are_still_usage_errors() -> None:
    for model in ("Z9000", "", "100"):
        with pytest.raises(UsageError, match="unknown GPU model"):
            profile_table(model)


def test_names_model_matches_a_driver_reported_name() -> None:
    assert names_model("a100", ["NVIDIA A100-PCIE-40GB"])
    assert not names_model("100", ["NVIDIA A100-PCIE-40GB"])
    assert not names_model("h200", ["NVIDIA GH200 480GB"])
