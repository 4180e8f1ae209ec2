"""The `facts` verb: everything the workstation needs to know about a node, in one answer."""

from __future__ import annotations

import platform
import socket
from typing import Any

from gpupoolctl import __version__
from gpupoolctl.agent.drivers import open_drivers
from gpupoolctl.agent.partition import lock as partition_lock
from gpupoolctl.hw.model import NodeFacts


def collect(
    host: str,
    simulated: bool,
    allow_cli: bool = True,
    network: dict[str, Any] | None = None,
) -> NodeFacts:
    """`network`: the node's NICs when something other than this machine's sysfs knows them
    (a simulated node's state file); None reads sysfs."""
    drivers, warnings = open_drivers(allow_cli=allow_cli)
    try:
        gpus: list[Any] = []
        blocks: list[list[list[str]]] = []
        versions: dict[str, str | None] = {}
        used: dict[str, str] = {}
        for driver in drivers:
            driver_gpus = driver.gpus()
            gpus.extend(driver_gpus)
            blocks.append(driver.link_matrix())
            versions[driver.vendor] = driver.version()
            used[driver.vendor] = driver.name
            # Per-field problems a driver met while reading (a field it could not read).
            warnings.extend(
                f"{driver.vendor}/{driver.name}: {message}"
                for message in getattr(driver, "warnings", [])
            )
    finally:
        for driver in drivers:
            driver.close()
    for position, gpu in enumerate(gpus):
        gpu["index"] = position if len(drivers) > 1 else gpu["index"]
    if network is None:
        from gpupoolctl.agent.network import read_network

        network, network_warnings = read_network()
        warnings.extend(network_warnings)
    return {
        "host": host,
        "hostname": socket.gethostname(),
        "agent_version": __version__,
        "python": platform.python_version(),
        "sim": simulated,
        "drivers": used,
        "driver_versions": versions,
        "gpus": gpus,
        "topology": {"gpus": [g["uuid"] for g in gpus], "matrix": merge_blocks(blocks)},
        "warnings": warnings,
        "network": network,
        # A `partition` run holds the node now: its GPUs may be half changed (a workstation
        # that was interrupted reads the node again later, and waits while this is true).
        "partition_running": partition_lock.running(),
    }


def merge_blocks(blocks: list[list[list[str]]]) -> list[list[str]]:
    """Join per-vendor matrices into one: GPUs of different vendors only meet across the
    system interconnect, which nvidia-smi calls SYS."""
    size = sum(len(block) for block in blocks)
    matrix = [["SYS"] * size for _ in range(size)]
    offset = 0
    for block in blocks:
        for i, row in enumerate(block):
            for j, level in enumerate(row):
                matrix[offset + i][offset + j] = level
        offset += len(block)
    return matrix
