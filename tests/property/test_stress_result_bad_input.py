"""The stress result reader (`stress report`, `stress compare`, baselines) fed damaged files:
a result the code itself wrote, cut short, spliced with hostile bytes, with values swapped
for values of other types, and bytes made up. Each answer is a RunResult that the text
report and compare can render, or one line naming the file; never another exception."""

from __future__ import annotations

import copy
import functools
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.errors import SourceError, UsageError
from gpupoolctl.stress import compare, report_text
from gpupoolctl.stress import result as results
from gpupoolctl.stress.backend import NoopBackend
from gpupoolctl.stress.runner import Ramp
from gpupoolctl.stress.scenario import Scenario, Workload
from tests.property.test_bad_input_readers import FUZZ, mutations


@functools.cache
def saved() -> bytes:
    """A real result: a short ramp on the no-op backend, written by results.save."""
    scenario = Scenario(
        name="fuzz",
        levels=(1, 2, 4, 8),
        warmup_s=0.0,
        hold_s=0.05,
        drain_s=0.5,
        job_timeout_s=1.0,
        workload=Workload("sleep", {"seconds": 0.01}),
    )
    outcome = Ramp(scenario, NoopBackend()).run()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.json"
        results.save(outcome, path)
        return path.read_bytes()


def read_and_render(path: Path) -> None:
    """What `stress report` and `stress compare` do with a file."""
    outcome = results.load(path)
    report_text.level_rows(outcome)
    report_text.knee_lines(outcome.knees)
    report_text.terminal_plot(outcome, outcome, color=False)
    results.to_csv_rows(outcome)
    results.dumps(outcome)
    original = results.from_dict(json.loads(saved()), "original")
    for a, b in ((outcome, original), (original, outcome)):
        try:
            compare.compare(a, b, compare.parse_tolerances(""), allow_other_workload=True)
        except compare.NotComparable as exc:
            # A readable result that shares no measured level with the other (its levels
            # retyped to an empty list, say): refused as the CLI refuses it, in one line.
            assert "\n" not in str(exc) and "nothing to compare" in str(exc), str(exc)


def check(data: bytes, name: str = "baseline.json") -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        try:
            read_and_render(path)
        except (SourceError, UsageError) as exc:
            message = str(exc)
            assert "\n" not in message, message
            assert message.startswith(f"{path}:") or message.startswith(f"{path} "), message


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


def paths(value: Any, where: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [where]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*where, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*where, index))
    return found


@st.composite
def retyped(draw: st.DrawFn) -> bytes:
    """The saved result with one to three values (or whole objects) replaced or removed."""
    data = json.loads(saved())
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(paths(data)))
        if not where:
            data = draw(JSON_VALUES)
            continue
        parent = data
        try:
            for step in where[:-1]:
                parent = parent[step]
            if draw(st.booleans()) or not isinstance(parent, dict):
                parent[where[-1]] = draw(JSON_VALUES)
            else:
                del parent[where[-1]]
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed the path
    return json.dumps(copy.deepcopy(data), indent=2).encode()


@given(data=st.data())
@FUZZ
def test_a_mutated_saved_result_is_read_or_refused_in_one_line(data: st.DataObject) -> None:
    check(data.draw(mutations(saved())))


@given(data=st.data())
@FUZZ
def test_a_result_with_values_of_other_types_is_read_or_refused_in_one_line(
    data: st.DataObject,
) -> None:
    check(data.draw(retyped()))


@given(raw=st.binary(max_size=400))
@FUZZ
def test_made_up_bytes_are_refused_in_one_line(raw: bytes) -> None:
    check(raw)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"[" * 100_000, ":1: stress result nested deeper than 100 levels"),
        (b'{"a": ' * 200 + b"1" + b"}" * 200, ":1: stress result nested deeper than 100"),
        (b"\x00\x01\x02binary\xff", ":1: stress result is not UTF-8 text"),
        (b'{\n  "format": "gpupoolctl-stress/1",\n  "x": \xc3\x28\n}', ":3: stress result is"),
        (b'{\n  "levels": [\n    NaN\n  ]\n}', ":3: expected a finite number, not NaN"),
        (b'{\n  "a": -Infinity\n}', ":2: expected a finite number, not -Infinity"),
        (b'{\n  "a": Infinity\n}', ":2: expected a finite number, not Infinity"),
        (b'{"a": 1e999}', ":1: expected a finite number, not 1e999"),
        (b'{"a": ' + b"9" * 5000 + b"}", ": expected a number of at most 4300 digits"),
        (b'{\n  "format": "gpupoolctl-stress/1",\n  "levels": [', ":3: not JSON: Expecting"),
        (b"", ":1: not JSON: Expecting value"),
        (b"[]", ": the file: expected an object, got a list"),
        (b'{"format": "gpupoolctl-stress/1", "levels": 3}', ": levels: expected a list, got 3"),
    ],
    ids=[
        "deep-list",
        "deep-object",
        "binary",
        "bad-utf8",
        "nan",
        "minus-inf",
        "inf",
        "float-overflow",
        "huge-int",
        "truncated",
        "empty",
        "a-list",
        "wrong-type",
    ],
)
def test_each_reported_kind_of_bad_file_is_one_line_naming_file_and_line(
    tmp_path: Path, data: bytes, expected: str
) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(data)
    with pytest.raises(SourceError) as caught:
        results.load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}{expected}"), message
    assert "\n" not in message


def test_a_truncated_saved_result_names_its_last_line(tmp_path: Path) -> None:
    text = saved()
    cut = text[: len(text) // 2]
    path = tmp_path / "r.json"
    path.write_bytes(cut)
    with pytest.raises(SourceError) as caught:
        results.load(path)
    assert caught.value.line == cut.count(b"\n") + 1
    assert str(caught.value).startswith(f"{path}:{caught.value.line}: not JSON")
