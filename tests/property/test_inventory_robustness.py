"""Property tests: malformed input of any shape gives a typed error, never a traceback."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupoolctl.errors import InventoryError, UsageError
from gpupoolctl.inventory import Inventory, load_inventory

# Text built from the characters that matter to both formats, so the parsers get deep.
inventory_text = st.lists(
    st.one_of(
        st.sampled_from(
            ["[g]", "[g:vars]", "[g:children]", "[all:vars]", "all:", "  hosts:", "  vars:",
             "  children:", "    h[1:3]:", "    g:", "h1 a=1", "x=[1,", "---", "- a", "h:22",
             "    k: {a: 1", "[", "]", "gpu[01:100]", "&anchor", "*alias", "<<: *a", "\t"]
        ),
        st.text(alphabet="[]:{}=,#;'\"- \tabgh01\\!*&|>", max_size=20),
    ),
    max_size=12,
).map("\n".join)  # fmt: skip


@given(inventory_text, st.sampled_from(["hosts.ini", "hosts.yml", "inventory", "inv.json"]))
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_any_text_loads_or_raises_inventory_error(text, name):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_text(text)
        try:
            inv = load_inventory(path)
        except InventoryError as exc:
            assert exc.path == str(path)
            assert exc.line is None or 1 <= exc.line <= text.count("\n") + 2
            return
        assert set(inv.hosts) <= set().union(*(g.hosts for g in inv.groups.values()))


INV = Inventory.from_hosts(["gpu[01:09]", "cpu[1:3]", "login"])


@given(st.text(alphabet="gpucl0129[]:,-/!&~*?@^()|.", max_size=25))
@settings(max_examples=400, deadline=None)
def test_any_limit_selects_or_raises_usage_error(limit):
    try:
        selection = INV.select(limit, cwd=Path("no-such-folder"))
    except (UsageError, InventoryError):
        return
    assert set(selection.names) <= set(INV.hosts)
