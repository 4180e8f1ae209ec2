"""The live view's keys: raw terminal input to key names, and what each key does to the
view's state (pane, selection, filter, details), on a real frame."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.board.frame import Filter, build_frame
from gpupoolctl.cli.top_live import DOWN, ENTER, ESC, TAB, UP, Ui, items, parse_keys, render
from gpupoolctl.ledger.state import State


def a_frame():
    state = State()
    state.apply({"seq": 1, "ts": "2026-12-02T09:00:00.000Z", "actor": "t", "op": "slices",
                 "data": {"hosts": ["n1"], "slices": [
                     {"id": f"n1/gpu{i}", "host": "n1", "gpu": i, "kind": "gpu",
                      "memory_mib": 40960, "site": "sg"} for i in range(3)]}})  # fmt: skip
    state.apply({"seq": 2, "ts": "2026-12-02T09:00:01.000Z", "actor": "t", "op": "enqueue",
                 "data": {"id": "q-2", "owner": "ann", "job": "j-2", "request": {}}})  # fmt: skip
    return build_frame(state, "2026-12-02T09:01:00.000Z", waiting={"j-2": "nothing fits"})


def test_arrows_escape_enter_tab_and_letters() -> None:
    assert parse_keys("q") == ["q"]
    assert parse_keys("\x1b[A\x1b[Bj") == [UP, DOWN, "j"]
    assert parse_keys("\x1bOA") == [UP]
    assert parse_keys("\x1b") == [ESC]
    assert parse_keys("\t\r\n") == [TAB, ENTER, ENTER]
    assert parse_keys("\x1b[Cx") == ["x"]  # another cursor key: ignored
    with pytest.raises(KeyboardInterrupt):
        parse_keys("\x03")


@given(st.text(max_size=40))
def test_any_input_parses_to_keys_without_error(text: str) -> None:
    if "\x03" in text:
        return
    keys = parse_keys(text)
    assert all(isinstance(k, str) and k for k in keys)


def test_moving_selecting_and_details() -> None:
    frame = a_frame()
    ui = Ui()
    assert items(frame, "nodes") == ["n1/gpu0", "n1/gpu1", "n1/gpu2"]
    for key in (DOWN, DOWN, DOWN, DOWN):
        ui.handle(key, frame)
    assert ui.selected["nodes"] == 2  # stops at the last GPU
    ui.handle(UP, frame)
    ui.handle(ENTER, frame)
    assert ui.detail == "gpu:n1/gpu1"
    assert not ui.handle("q", frame)  # q closes the details first
    assert ui.detail is None
    ui.handle(TAB, frame)
    ui.handle(TAB, frame)
    ui.handle(ENTER, frame)
    assert ui.detail == "job:j-2"
    ui.handle(ESC, frame)
    assert ui.handle("q", frame) is True


def test_typing_a_filter_applies_it_and_a_bad_one_is_said() -> None:
    frame = a_frame()
    ui = Ui()
    for key in ["/", *"host=n*", ENTER]:
        ui.handle(key, frame)
    assert ui.filter == Filter.parse("host=n*") and ui.typing is None
    ui.handle("/", frame)
    assert ui.typing == "host=n*"  # `/` starts from the filter in force
    for key in ["backspace"] * 7 + [*"colour=1", ENTER]:
        ui.handle(key, frame)
    assert ui.message is not None and "host=, owner= or team=" in ui.message
    assert ui.filter == Filter.parse("host=n*")  # the good one stays
    for key in ["/", *"abc", ESC]:
        ui.handle(key, frame)
    assert ui.filter == Filter.parse("host=n*")  # esc: nothing changed


@pytest.mark.parametrize("width", [60, 99, 100, 200])
def test_a_frame_draws_at_any_width_with_every_pane(width: int) -> None:
    from rich.console import Console

    console = Console(width=width, height=30, record=True, color_system=None)
    console.print(render(a_frame(), Ui(), width, 30))
    text = console.export_text()
    for pane in ("nodes", "jobs", "queue", "events"):
        assert f"─ {pane}" in text, (width, pane)
    assert "j-2" in text and "n1" in text
