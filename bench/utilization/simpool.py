"""The bundled simulated pool's slices, as is or partitioned by a playbooks/layouts.yaml label.

The layout is really applied: a fresh sim state in a temporary folder, facts read by the
agent (local transport), `partition.plan_host` for every host, the plan's ops run by the
agent's `partition` verb, facts read again, and `ledger.slices_from_facts` on them, i.e.
exactly the slices `gpupoolctl partition apply` followed by `gpupoolctl pool` would record.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpupoolctl.inventory import load_inventory  # noqa: E402
from gpupoolctl.ledger import slices_from_facts  # noqa: E402
from gpupoolctl.partition import load_spec, plan_host  # noqa: E402
from gpupoolctl.remote import run_agent  # noqa: E402
from gpupoolctl.remote.target import target_from_vars  # noqa: E402

INVENTORY = ROOT / "inventories" / "sim.yaml"
LAYOUTS = ROOT / "playbooks" / "layouts.yaml"


def pool_slices(label: str | None, layouts: Path = LAYOUTS) -> list[dict[str, Any]]:
    """Slices of the bundled pool, after applying `label` of `layouts` (None: as shipped)."""
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-sim-") as folder:
        return applied(label, Path(folder), layouts)


def applied(label: str | None, folder: Path, layouts: Path = LAYOUTS) -> list[dict[str, Any]]:
    """pool_slices, the nodes' simulated state left in `folder` (their sim state_dir): the
    cards as the layout left them, for an agent to read and re-cut later."""
    old = os.environ.get("GPUPOOL_SIM_DIR")
    os.environ["GPUPOOL_SIM_DIR"] = str(folder)
    try:
        hosts = list(load_inventory(INVENTORY).hosts.values())
        targets = {h.name: target_from_vars(h.name, h.vars) for h in hosts}
        facts = _facts(targets)
        if label is not None:
            spec = load_spec(layouts)
            for host in hosts:
                plan = plan_host(spec, label, host.name, host.groups, facts[host.name])
                if plan.errors:
                    raise RuntimeError(f"{host.name}: {plan.errors}")
                if plan.changed:
                    request = {"verb": "partition", "args": plan.agent_args(False)}
                    result = run_agent([targets[host.name]], request)[0]
                    if not result.ok or not all(g["ok"] for g in result.data["gpus"]):
                        raise RuntimeError(f"{host.name}: {result.error or result.data}")
            facts = _facts(targets)
        return [s for name, data in facts.items() for s in slices_from_facts(name, data)]
    finally:
        if old is None:
            os.environ.pop("GPUPOOL_SIM_DIR", None)
        else:
            os.environ["GPUPOOL_SIM_DIR"] = old


def sim_specs(folder: Path) -> dict[str, dict[str, Any]]:
    """host -> the sim spec an agent request carries for it (its template, its state in
    `folder`), for the bundled pool's hosts."""
    hosts = load_inventory(INVENTORY).hosts.values()
    return {h.name: {"template": str(h.vars["sim"]), "state_dir": str(folder)} for h in hosts}


def _facts(targets: dict[str, Any]) -> dict[str, dict[str, Any]]:
    results = run_agent(list(targets.values()), {"verb": "facts", "args": {}})
    bad = [f"{r.name}: {r.error}" for r in results if not r.ok]
    if bad:
        raise RuntimeError("; ".join(bad))
    return {r.name: r.data for r in results}


def rename(slices: list[dict[str, Any]], old: str, new: str) -> list[dict[str, Any]]:
    """A host's slices under another host name (ids, islands and uuids follow)."""
    out = []
    for entry in slices:
        copy = dict(entry)
        copy["host"] = new
        copy["id"] = new + entry["id"][len(old) :]
        copy["island"] = new + str(entry.get("island") or "")[len(old) :]
        copy["uuid"] = f"{entry.get('uuid')}-{new}"
        copy["gpu_uuid"] = f"{entry.get('gpu_uuid')}-{new}"
        out.append(copy)
    return out
