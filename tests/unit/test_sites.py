"""Sites: gpupool_site_links (hw/sites.py, checked at inventory load), Target.site and
site_links, the site on facts and slices, and topology placement keeping a job on one site."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.errors import InventoryError
from gpupoolctl.hw.sites import SiteLink, SiteLinkError, link_between, parse_site_links
from gpupoolctl.inventory import load_inventory
from gpupoolctl.ledger import slices_from_facts
from gpupoolctl.remote.target import target_from_vars
from gpupoolctl.sched import JobRequest, NoFit, Placement, PoolView, place

ROOT = Path(__file__).resolve().parents[2]


def test_links_parse_with_sites_in_either_order():
    links = parse_site_links(
        [
            {"sites": ["singapore", "dubai"], "gbps": 10, "rtt_ms": 75.5},
            {"sites": ["a", "b"], "gbps": 0.5, "rtt_ms": 0},
        ]
    )
    assert links[0] == SiteLink(("dubai", "singapore"), 10.0, 75.5)
    assert link_between(links, "singapore", "dubai") is links[0]
    assert link_between(links, "dubai", "singapore") is links[0]
    assert link_between(links, "a", "dubai") is None
    assert parse_site_links(None) == ()


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"sites": ["a", "b"]}, "must be a list"),
        (["a-b"], "[0] must be a mapping"),
        ([{"sites": ["a", "b"], "gbps": 10}], "[0]: missing rtt_ms"),
        ([{"sites": ["a"], "gbps": 10, "rtt_ms": 1}], "two site names"),
        ([{"sites": ["a", "a"], "gbps": 10, "rtt_ms": 1}], "a link joins two sites"),
        ([{"sites": ["a", "b"], "gbps": "10G", "rtt_ms": 1}], "gbps must be a number"),
        ([{"sites": ["a", "b"], "gbps": True, "rtt_ms": 1}], "gbps must be a number"),
        ([{"sites": ["a", "b"], "gbps": 0, "rtt_ms": 1}], "gbps must be more than 0"),
        ([{"sites": ["a", "b"], "gbps": 1, "rtt_ms": -2}], "rtt_ms must be 0 or more"),
        ([{"sites": ["a", "b"], "gbps": 1, "rtt_ms": float("nan")}], "rtt_ms must be 0 or more"),
        ([{"sites": ["a", "b"], "gbps": 1, "rtt_ms": 1, "mtu": 9000}], "unknown key(s) 'mtu'"),
        (
            [
                {"sites": ["a", "b"], "gbps": 1, "rtt_ms": 1},
                {"sites": ["b", "a"], "gbps": 2, "rtt_ms": 1},
            ],
            "[1]: 'a'<->'b' is already given in gpupool_site_links[0]",
        ),
    ],
)
def test_bad_links_say_what_in_one_line(value: Any, words: str):
    with pytest.raises(SiteLinkError) as caught:
        parse_site_links(value)
    message = str(caught.value)
    assert words in message and "\n" not in message
    assert message.startswith("gpupool_site_links")


def test_a_bad_value_is_an_inventory_error_naming_the_file(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "all:\n"
        "  vars:\n"
        "    gpupool_site_links:\n"
        "      - {sites: [sg, dxb], gbps: fast, rtt_ms: 75}\n"
        "  hosts:\n"
        "    n1: {site: sg}\n"
    )
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    assert str(caught.value) == (
        f"{path}: gpupool_site_links[0]: gbps must be a number, got 'fast'"
    )


def test_target_site_and_links_from_vars():
    target = target_from_vars(
        "n1",
        {"site": "sg", "gpupool_site_links": [{"sites": ["sg", "dxb"], "gbps": 10, "rtt_ms": 75}]},
    )
    assert target.invalid is None
    assert target.site == "sg"
    assert target.site_links == (SiteLink(("dxb", "sg"), 10.0, 75.0),)
    plain = target_from_vars("n1", {})
    assert plain.site is None and plain.site_links == ()
    # Vars that did not come through load_inventory: only this host fails.
    bad = target_from_vars("n1", {"gpupool_site_links": "sg-dxb"})
    assert bad.invalid is not None and bad.invalid.startswith("host 'n1': gpupool_site_links")


def test_the_bundled_pool_links_singapore_and_dubai():
    for source in (ROOT / "inventories" / "sim.yaml", ROOT / "gpupoolctl" / "data" / "sim.yaml"):
        inventory = load_inventory(source)
        targets = [target_from_vars(h.name, h.vars) for h in inventory.hosts.values()]
        assert {t.site for t in targets} == {"singapore", "dubai"}
        link = link_between(targets[0].site_links, "singapore", "dubai")
        assert link is not None and link.gbps > 0 and 20 <= link.rtt_ms <= 200


def test_slices_carry_the_site_of_their_facts_only_when_known():
    from gpupoolctl.sim.state import build_initial

    facts_gpus = [
        {"index": i, "uuid": f"GPU-{i}", "vendor": "nvidia", "memory_total_mib": 81559}
        for i in range(2)
    ]
    facts: dict[str, Any] = {"gpus": facts_gpus, "topology": {"matrix": []}, "site": "sg"}
    assert {s.get("site") for s in slices_from_facts("n1", facts)} == {"sg"}
    facts["site"] = None
    assert all("site" not in s for s in slices_from_facts("n1", facts))
    assert build_initial("n1", "dgx-h100")["network"]["nics"]  # (the template has NICs)


def whole(host: str, gpu: int, site: str | None) -> dict[str, Any]:
    entry = {
        "id": f"{host}/gpu{gpu}",
        "host": host,
        "gpu": gpu,
        "kind": "gpu",
        "profile": None,
        "memory_mib": 81920,
        "vendor": "nvidia",
        "model": "NVIDIA H100 80GB HBM3",
        "bandwidth_class": "ultra",
        "island": f"{host}/island{gpu}",  # PCIe only: islands of one
        "uuid": f"GPU-{host}-{gpu}",
    }
    if site:
        entry["site"] = site
    return entry


def pool(layout: dict[str, tuple[str | None, int]]) -> list[dict[str, Any]]:
    return [whole(h, g, site) for h, (site, count) in layout.items() for g in range(count)]


def test_topology_keeps_a_multi_node_job_on_one_site_on_as_few_hosts_as_can_hold_it():
    # a1 (site a) sorts first: best-fit anywhere would start there and spill over to b1.
    slices = pool({"a1": ("a", 2), "b1": ("b", 1), "b2": ("b", 3), "b3": ("b", 2)})
    result = place(JobRequest(gpus=5), PoolView(slices), "topology")
    assert isinstance(result, Placement)
    assert result.hosts == ["b2", "b3"]  # site b; its two biggest hosts, not all three
    assert "no single island or host can hold 5" in result.why[1]
    assert any("site(s)" in line and "chose b" in line for line in result.why)
    scattered = place(JobRequest(gpus=5), PoolView(slices), "best-fit")
    assert isinstance(scattered, Placement) and "a1" in scattered.hosts


def test_topology_falls_back_to_anywhere_when_no_site_can_hold_it():
    slices = pool({"a1": ("a", 2), "b1": ("b", 2)})
    result = place(JobRequest(gpus=4), PoolView(slices), "topology")
    assert isinstance(result, Placement) and result.hosts == ["a1", "b1"]
    assert "no single island or host or site can hold 4" in result.why[1]


def test_hosts_without_a_site_are_in_no_site():
    slices = pool({"a1": (None, 2), "a2": (None, 2), "b1": ("b", 2), "b2": ("b", 1)})
    result = place(JobRequest(gpus=3), PoolView(slices), "topology")
    assert isinstance(result, Placement) and result.hosts == ["b1", "b2"]
    both = place(JobRequest(gpus=4), PoolView(slices), "topology")
    assert isinstance(both, Placement) and len(both.hosts) == 2  # anywhere


def test_the_host_glob_applies_inside_a_site():
    slices = pool({"a1": ("a", 2), "b1": ("b", 2), "b2": ("b", 2), "c9": ("b", 4)})
    result = place(JobRequest(gpus=3, host="[ab]*"), PoolView(slices), "topology")
    assert isinstance(result, Placement) and result.hosts == ["b1", "b2"]
    none = place(JobRequest(gpus=7, host="[ab]*"), PoolView(slices), "topology")
    assert isinstance(none, NoFit)
