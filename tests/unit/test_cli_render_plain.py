"""gpupoolctl.cli.render.plain_table writes what tabulate's plain format would, or declines."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tabulate import tabulate

from gpupoolctl.cli.render import plain_table

ascii_cell = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12)
any_cell = st.text(max_size=8)
header = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=8)


def _tabulate(headers, body, align):
    return tabulate(body, headers=headers, tablefmt="plain", colalign=align, disable_numparse=True)


@st.composite
def tables(draw, cell=ascii_cell):
    width = draw(st.integers(1, 6))
    headers = draw(st.lists(header, min_size=width, max_size=width))
    align = draw(st.lists(st.sampled_from(["left", "right"]), min_size=width, max_size=width))
    body = draw(st.lists(st.lists(cell, min_size=width, max_size=width), max_size=6))
    return headers, body, align


@settings(max_examples=400, deadline=None)
@given(tables())
def test_same_text_as_tabulate(table):
    assert plain_table(*table) == _tabulate(*table)


@settings(max_examples=200, deadline=None)
@given(tables(cell=any_cell))
def test_same_text_or_declined(table):
    text = plain_table(*table)
    assert text is None or text == _tabulate(*table)


def test_the_jobs_table_with_no_jobs_and_with_some():
    headers = ["ID", "NAME", "STATE", "AGE", "EXIT"]
    align = ["left", "left", "left", "right", "right"]
    assert plain_table(headers, [], align) == "ID    NAME    STATE    AGE    EXIT"
    body = [["j-1", "train", "running", "3m", "-"], ["j-12", " x ", "done", "1h", "0"]]
    assert plain_table(headers, body, align) == _tabulate(headers, body, align)


def test_declines_what_it_does_not_measure():
    assert plain_table(["ID"], [["日本"]], ["left"]) is None  # wide characters
    assert plain_table(["ID"], [["a\nb"]], ["left"]) is None  # multi-line
    assert plain_table(["ID"], [["\x1b[1mx\x1b[0m"]], ["left"]) is None  # escapes
