"""The `train` workload: data-parallel training steps across all of a job's GPUs, on one node
or several, with the job's own time split into compute and communication.

Every step is compute (each GPU's share of the batch, forward and backward) and then a ring
all-reduce of the gradients (bf16: 2 bytes per parameter) over every GPU of the job. The ring's
time is the closed form

    t = 2(N-1)/N * bytes / B_min + 2(N-1) * latency

for N ranks, where B_min is the bandwidth (one direction) of the slowest link in the ring and
latency the largest per-hop latency on it: NVLink/xGMI inside an island, PCIe inside a node
without a fabric link, the NICs between nodes, the WAN between sites. The link class of B_min
is what bounded the step ("bound_by").

On a simulated node ($GPUPOOL_SIM_STATE) the step is modelled and time passes for real
(sleep, times --time-scale): compute from the card's datasheet BF16 TFLOPs (times the share a
MIG instance or AMD partition holds), links from the datasheet figures below, shared fairly by
every sim job using them at that moment (one peers folder per shared link, as the `sim`
workload shares a node). On a real node with PyTorch, see train_torch.py; without it, exit 3.

The nodes of a multi-node job really meet, with the rendezvous variables `submit` sets
(GPUPOOL_NODE_RANK, GPUPOOL_NNODES, GPUPOOL_MASTER_ADDR/PORT): node 0 listens, the others
connect (stdlib sockets, bounded time-outs); every step is a barrier among them, and node 0
decides the step's time from every node's links. A peer that never comes: exit 4.

When it ends, each node writes its report atomically to $GPUPOOL_JOB_DIR/report.json (the
agent's poll hands it to the admin side; see report.py) and prints one JSON line on stdout.
With $GPUPOOL_CHECKPOINT_DIR, node 0 saves the step reached (`train.json`, atomically) every
--checkpoint-every steps and when stopped; a later try resumes from it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from gpupoolctl.agent.workloads import (
    EXIT_OK,
    EXIT_RENDEZVOUS,
    EXIT_UNSUPPORTED,
    Stopped,
    raise_stopped,
)
from gpupoolctl.agent.workloads import report as report_file
from gpupoolctl.agent.workloads.train_checkpoint import Checkpoint

MAX_STEPS = 1_000_000
MAX_PARAMS = 1e13
MAX_BATCH = 1 << 20
MAX_TIME_SCALE = 1e3
DEFAULT_PARAMS = 1e9
DEFAULT_BATCH = 4
DEFAULT_STEPS = 20
DEFAULT_TOKENS = 512  # tokens per sample, for the default FLOPs per sample
DEFAULT_CHECKPOINT_STEPS = 5
DEFAULT_RENDEZVOUS_S = 60.0
BYTES_PER_PARAM = 2  # bf16 gradients
LINK_PEERS = ".link-peers"  # under the node's jobs root (per node) or above it (shared: WAN)
PRUNE_EVERY_S = 1.0

LINK_CLASSES = ("nvlink", "xgmi", "pcie", "nic", "wan")


def default_flops_per_sample(params: float) -> float:
    """6 FLOPs per parameter per token (forward 2, backward 4: Kaplan et al. 2020, "Scaling
    Laws for Neural Language Models", C ~ 6N per token) times DEFAULT_TOKENS tokens."""
    return 6.0 * params * DEFAULT_TOKENS


# -- datasheet figures -------------------------------------------------------------------------

# Dense BF16 tensor throughput, TFLOP/s, from each vendor's datasheet (the "with sparsity"
# figures are twice these). Matched as case-insensitive substrings of the card's name, first
# match wins: specific names first.
#   NVIDIA H200 datasheet: 1,979 TFLOPS BF16 with sparsity -> 989.
#   NVIDIA H100 datasheet: SXM 1,979 / NVL 1,671 / PCIe 1,513 with sparsity -> 989 / 835 / 756.
#   NVIDIA A100 datasheet: BF16 Tensor Core 312 (624 with sparsity), SXM and PCIe alike.
#   NVIDIA B200 (HGX B200 datasheet): 4.5 PFLOPS BF16 with sparsity per GPU -> 2,250.
#   NVIDIA L40S datasheet: 733 with sparsity -> 362; L40: 362 -> 181; L4: 242 -> 121;
#   A30: 330 -> 165.
#   AMD Instinct MI300X / MI325X datasheets: 1,307.4 TFLOPS BF16 dense; MI355X: 2,500 (dense
#   FP16/BF16, AMD's MI355X product page); MI350X: 2,300.
TFLOPS_BF16: tuple[tuple[str, float], ...] = (
    ("H200", 989.0),
    ("H100 NVL", 835.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("A100", 312.0),
    ("B200", 2250.0),
    ("L40S", 362.0),
    ("L40", 181.0),
    ("A30", 165.0),
    ("L4", 121.0),
    ("MI355X", 2500.0),
    ("MI350X", 2300.0),
    ("MI325X", 1307.4),
    ("MI300X", 1307.4),
)

# One direction of one GPU's fabric bandwidth inside an island, GB/s.
#   NVLink: NVIDIA's datasheets give the total both ways per GPU: A100 SXM (NVLink 3) 600 GB/s,
#   H100 SXM (NVLink 4) 900 GB/s, B200 (NVLink 5) 1.8 TB/s; one direction is half.
NVLINK_GBPS_BY_VERSION: dict[int, float] = {3: 300.0, 4: 450.0, 5: 900.0}
#   AMD Instinct MI300X datasheet: 128 GB/s per Infinity Fabric link (both ways), 7 links to
#   the other 7 GPUs of the platform, 896 GB/s peer-to-peer in all; one direction: 448 GB/s
#   (RCCL's rings spread over all seven links, as NCCL's do over a GPU's NVLinks).
XGMI_GBPS = 448.0

# PCIe x16, one direction, GB/s (PCI-SIG: 8 / 16 / 32 GT/s per lane for Gen3 / 4 / 5 with
# 128b/130b encoding: 16 lanes * rate * 128/130 / 8 bits).
PCIE_X16_GBPS: dict[int, float] = {g: 16 * r * 128 / 130 / 8 for g, r in ((3, 8), (4, 16), (5, 32))}
# Each card's PCIe generation (its datasheet's "PCIe Gen4 x16" / "Gen5 x16" line).
PCIE_GEN_BY_NAME: tuple[tuple[str, int], ...] = (
    ("H200", 5),
    ("H100", 5),
    ("B200", 5),
    ("A100", 4),
    ("L40", 4),  # L40 and L40S
    ("A30", 4),
    ("L4", 4),
    ("MI3", 5),  # MI300X, MI325X, MI350X, MI355X: PCIe Gen5 x16 host interface
)

# Per-hop latency, seconds. No datasheet gives a collective's per-hop latency; these are
# NCCL's own model of it (NVIDIA/nccl src/graph/tuning.cc, hwLat, Ring algorithm, Simple
# protocol: NVLink 3.4 us, PCI 5.7 us, NET 14 us). RCCL, NCCL's fork, keeps the same table:
# xGMI takes NVLink's figure. The WAN's is half the site link's round trip (rtt_ms / 2),
# plus the NICs' at each end.
LATENCY_S: dict[str, float] = {
    "nvlink": 3.4e-6,
    "xgmi": 3.4e-6,
    "pcie": 5.7e-6,
    "nic": 14e-6,
}


class Unsupported(Exception):
    """This job cannot be modelled or run here (no NICs for a multi-node job, no site link,
    no PyTorch on a real node): exit 3 with the reason."""


class RendezvousFailed(Exception):
    """The job's nodes did not meet (a peer never came, or left): exit 4."""


# -- the ring ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """One hop class of the ring as the job sees it now: its share of the bandwidth (one
    direction, GB/s) and its per-hop latency (s)."""

    kind: str
    gbps: float
    latency: float


def ring_allreduce(ranks: int, nbytes: float, links: Sequence[Link]) -> tuple[float, str | None]:
    """(seconds, bounding link class) of a ring all-reduce of `nbytes` over `ranks` ranks
    whose hops are `links`: 2(N-1)/N * bytes / B_min + 2(N-1) * latency_max. One rank, or
    nothing to reduce: (0.0, None)."""
    if ranks <= 1 or nbytes <= 0 or not links:
        return 0.0, None
    slowest = min(links, key=lambda link: (link.gbps, -LINK_CLASSES.index(link.kind)))
    if not slowest.gbps > 0:
        raise ValueError(f"a {slowest.kind} link with no bandwidth")
    latency = max(link.latency for link in links)
    steps = 2 * (ranks - 1)
    seconds = steps / ranks * nbytes / (slowest.gbps * 1e9) + steps * latency
    return seconds, slowest.kind


# -- the node as the sim describes it ----------------------------------------------------------


def _match(table: Sequence[tuple[str, Any]], name: str) -> Any:
    lowered = name.lower()
    for fragment, value in table:
        if fragment.lower() in lowered:
            return value
    return None


def _name(gpu: Mapping[str, Any]) -> str:
    return str(gpu.get("name") or gpu.get("market_name") or gpu.get("product") or "")


@dataclass
class SimNode:
    """This node's part of the job: its devices' speed and the links its ranks use."""

    gpus: int  # ranks on this node
    tflops: float  # the slowest local rank's BF16 TFLOP/s (times its slice share)
    fabric: str  # "nvlink" | "xgmi" | "pcie": between this node's ranks
    fabric_gbps: float  # one direction, per GPU
    pcie_roots: tuple[str, ...]  # host bridges the ranks sit under (a PCIe ring shares them)
    nic_gbps: float | None  # the node's up compute NICs, GB/s; None: the state has no NICs
    nic_note: str | None = None
    devices: tuple[str, ...] = ()


def describe_node(state: Mapping[str, Any], env: Mapping[str, str]) -> SimNode:
    """This node's ranks, speed and links from its sim state and the job's visibility
    variables. Unsupported when no simulated device is visible or a card is unknown."""
    from gpupoolctl.agent.workloads import sim

    cuda = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    rocr = env.get("ROCR_VISIBLE_DEVICES", "").strip()
    hip = env.get("HIP_VISIBLE_DEVICES", "").strip()
    try:
        if cuda and sim._gpus(state, "nvidia"):
            slices = sim._nvidia_slices(sim._gpus(state, "nvidia"), cuda)
            vendor = "nvidia"
        elif (rocr or hip) and sim._gpus(state, "amd"):
            slices = sim._amd_slices(sim._gpus(state, "amd"), rocr, hip)
            vendor = "amd"
        else:
            raise Unsupported("train: no simulated device is visible to this job")
    except sim.LookupFailed as exc:
        raise Unsupported(f"train: {exc}") from None
    if not slices:
        raise Unsupported("train: no simulated device is visible to this job")
    speeds = []
    for _, gpu, share in slices:
        tflops = _match(TFLOPS_BF16, _name(gpu))
        if tflops is None:
            raise Unsupported(f"train: no BF16 TFLOPs figure for {_name(gpu)!r}")
        speeds.append(tflops * share)
    cards = [gpu for _, gpu, _ in slices]
    fabric, fabric_gbps = _fabric(vendor, cards)
    roots = sorted({str((gpu.get("pcie") or {}).get("host_bridge") or "hb") for gpu in cards})
    nic_gbps, note = nic_bandwidth(state)
    return SimNode(
        gpus=len(slices),
        tflops=min(speeds),
        fabric=fabric,
        fabric_gbps=fabric_gbps,
        pcie_roots=tuple(roots),
        nic_gbps=nic_gbps,
        nic_note=note,
        devices=tuple(name for name, _, _ in slices),
    )


def _pcie_gbps(cards: Sequence[Mapping[str, Any]]) -> float:
    gens = [_match(PCIE_GEN_BY_NAME, _name(gpu)) or 4 for gpu in cards]
    return PCIE_X16_GBPS[min(gens)]


def _fabric(vendor: str, cards: Sequence[Mapping[str, Any]]) -> tuple[str, float]:
    """nvlink/xgmi when every card is in one island (NVLinks to the same switch, or one AMD
    hive), else pcie; with the per-GPU bandwidth one way."""
    if vendor == "nvidia":
        islands = set()
        for gpu in cards:
            links = [x for x in gpu.get("nvlinks") or [] if isinstance(x, dict) and x.get("active")]
            if not links:
                islands.add(None)
                continue
            islands.add(frozenset(str(x.get("remote_bus_id")) for x in links))
        version = next((gpu.get("nvlink_version") for gpu in cards), None)
        gbps = NVLINK_GBPS_BY_VERSION.get(int(version)) if isinstance(version, int) else None
        if None not in islands and len(islands) == 1 and gbps:
            return "nvlink", gbps
    else:
        hives = {str(gpu.get("hive") or "") for gpu in cards}
        if len(hives) == 1 and "" not in hives:
            return "xgmi", XGMI_GBPS
    return "pcie", _pcie_gbps(cards)


# Which NICs carry a job's traffic between nodes: the node's fastest kind of fabric. A DGX
# H100 has eight 400 Gb/s InfiniBand ports for the compute fabric beside RoCE ports for
# storage and in-band management and a 10 GbE port; NCCL uses the InfiniBand ones.
NIC_KIND_ORDER = ("infiniband", "roce", "ethernet")


def nic_bandwidth(state: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """(GB/s, None): the up compute NICs' speeds (Gb/s) summed, / 8, from the sim state's
    `network.nics` ([{name, kind, speed_gbps, state}]); compute NICs are those of the
    fastest kind present (NIC_KIND_ORDER). (None, why) without any."""
    network = state.get("network")
    nics = network.get("nics") if isinstance(network, dict) else None
    if not isinstance(nics, list):
        return None, "the node's sim state has no network.nics section"
    by_kind: dict[str, float] = {}
    for nic in nics:
        if not isinstance(nic, dict) or str(nic.get("state", "up")).lower() != "up":
            continue
        kind = str(nic.get("kind") or "ethernet").lower()
        speed = nic.get("speed_gbps")
        if _positive(speed):
            by_kind[kind] = by_kind.get(kind, 0.0) + float(speed)
    for kind in NIC_KIND_ORDER + tuple(sorted(by_kind)):
        if by_kind.get(kind):
            return by_kind[kind] / 8.0, None
    return None, "the node has no NIC that is up"


# -- sites -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SiteLink:
    sites: tuple[str, str]
    gbps: float  # Gb/s
    rtt_ms: float


def parse_site_links(text: str | None) -> list[SiteLink]:
    """GPUPOOL_SITE_LINKS: a JSON list of {"sites": [a, b], "gbps": n, "rtt_ms": n}; bad
    entries are skipped."""
    if not text:
        return []
    try:
        data = json.loads(text)
    except ValueError:
        return []
    out = []
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, dict):
            continue
        sites, gbps, rtt = item.get("sites"), item.get("gbps"), item.get("rtt_ms", 0)
        if not isinstance(sites, list) or len(sites) != 2:
            continue
        if not all(isinstance(s, str) and s for s in sites):
            continue
        if not _positive(gbps) or not (_positive(rtt) or rtt == 0):
            continue
        out.append(SiteLink((sites[0], sites[1]), float(gbps), float(rtt)))
    return out


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def site_link(links: Sequence[SiteLink], a: str, b: str) -> SiteLink | None:
    for link in links:
        if {a, b} == set(link.sites):
            return link
    return None


def wan_key(a: str, b: str) -> str:
    first, second = sorted((a, b))
    return "wan-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in f"{first}--{second}")


# -- shared links: one peers folder per link ---------------------------------------------------


class LinkShares:
    """This job's entries in the peers folders of the shared links it uses; count(key) is how
    many sim jobs use that link now (this one included)."""

    def __init__(self, node_root: Path, shared_root: Path, pid: int | None = None) -> None:
        self.node_root = node_root  # <jobs root>/.link-peers: this node's links
        self.shared_root = shared_root  # <jobs root>/../.link-peers: links between nodes
        self.pid = os.getpid() if pid is None else pid
        self._peers: dict[str, Any] = {}
        self._next_prune = 0.0

    @classmethod
    def for_job(cls, env: Mapping[str, str]) -> LinkShares:
        from gpupoolctl.agent.workloads.sim import Peers

        root = Peers.for_job(env).folder.parent  # the node's jobs root
        return cls(root / LINK_PEERS, root.parent / LINK_PEERS)

    def join(self, key: str, shared: bool = False) -> None:
        from gpupoolctl.agent.workloads.sim import Peers

        if key in self._peers:
            return
        base = self.shared_root if shared else self.node_root
        peers = Peers(base / key, self.pid)
        peers.join()  # UnsafeFolder when the folder is not this user's alone
        self._peers[key] = peers

    def count(self, key: str) -> int:
        peers = self._peers.get(key)
        if peers is None:
            return 1
        now = time.monotonic()
        if now >= self._next_prune:
            for each in self._peers.values():
                each.prune()
            self._next_prune = now + PRUNE_EVERY_S
        return int(peers.count())

    def leave(self) -> None:
        for peers in self._peers.values():
            peers.leave()
        self._peers.clear()


def node_links(node: SimNode, shares: LinkShares, multi_node: bool) -> list[Link]:
    """This node's hops of the ring now: between its own ranks (a PCIe ring shares the host
    bridges with the node's other PCIe rings; an NVLink/xGMI island's switch is non-blocking,
    so disjoint GPUs do not share it), and its NICs when the ring leaves the node."""
    out = []
    if node.gpus > 1:
        if node.fabric == "pcie":
            users = max(shares.count(f"pcie-{root}") for root in node.pcie_roots)
            out.append(Link("pcie", node.fabric_gbps / users, LATENCY_S["pcie"]))
        else:
            out.append(Link(node.fabric, node.fabric_gbps, LATENCY_S[node.fabric]))
    if multi_node and node.nic_gbps is not None:
        out.append(Link("nic", node.nic_gbps / shares.count("nic"), LATENCY_S["nic"]))
    return out


# -- checkpoints -------------------------------------------------------------------------------


# -- the nodes meet ----------------------------------------------------------------------------


class _Channel:
    """JSON lines over one socket, each read bounded by a deadline."""

    def __init__(self, sock: socket.socket, who: str) -> None:
        self.sock = sock
        self.who = who
        self._buffer = b""

    def send(self, value: Mapping[str, Any]) -> None:
        try:
            self.sock.sendall(json.dumps(value, sort_keys=True).encode() + b"\n")
        except OSError as exc:
            raise RendezvousFailed(f"{self.who} left: {exc}") from None

    def recv(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RendezvousFailed(f"{self.who} said nothing for {timeout:g} s")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:  # noqa: UP041 (not TimeoutError before 3.10)
                continue
            except OSError as exc:
                raise RendezvousFailed(f"{self.who} left: {exc}") from None
            if not chunk:
                raise RendezvousFailed(f"{self.who} left (connection closed)")
            self._buffer += chunk
            if len(self._buffer) > 1 << 20:
                raise RendezvousFailed(f"{self.who} sent a line over 1 MiB")
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            value = json.loads(line)
        except ValueError:
            raise RendezvousFailed(f"{self.who} sent something that is not JSON") from None
        if not isinstance(value, dict):
            raise RendezvousFailed(f"{self.who} sent something that is not a JSON object")
        return value

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


@dataclass
class Rendezvous:
    rank: int
    nnodes: int
    address: str
    port: int
    token: str  # the job id and run: a stray connection from another job is turned away
    timeout: float
    channels: list[_Channel] = field(default_factory=list)  # node 0: one per other node

    @classmethod
    def from_env(cls, env: Mapping[str, str], timeout: float) -> Rendezvous:
        try:
            rank = int(env.get("GPUPOOL_NODE_RANK") or 0)
            nnodes = int(env.get("GPUPOOL_NNODES") or 1)
            port = int(env.get("GPUPOOL_MASTER_PORT") or 0)
        except ValueError:
            raise RendezvousFailed("GPUPOOL_NODE_RANK/NNODES/MASTER_PORT are not numbers") from None
        if nnodes < 1 or not 0 <= rank < nnodes:
            raise RendezvousFailed(f"node rank {rank} is not within {nnodes} node(s)")
        address = env.get("GPUPOOL_MASTER_ADDR") or ""
        if nnodes > 1 and (not address or not 0 < port < 65536):
            raise RendezvousFailed("a multi-node job needs GPUPOOL_MASTER_ADDR and _PORT")
        token = f"{env.get('GPUPOOL_JOB_ID') or ''}/{env.get('GPUPOOL_RUN') or '1'}"
        return cls(rank, nnodes, address, port, token, timeout)

    def meet(self, hello: dict[str, Any]) -> list[dict[str, Any]]:
        """Node 0: every node's hello, in rank order (its own first). Other nodes: connect,
        send theirs, get node 0's answer (the list)."""
        if self.nnodes == 1:
            return [hello]
        if self.rank == 0:
            return self._listen(hello)
        return self._connect(hello)

    def _listen(self, hello: dict[str, Any]) -> list[dict[str, Any]]:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind(("", self.port))
        except OSError as exc:
            server.close()
            raise RendezvousFailed(f"node 0 cannot listen on port {self.port}: {exc}") from None
        server.listen(self.nnodes)
        deadline = time.monotonic() + self.timeout
        by_rank: dict[int, tuple[_Channel, dict[str, Any]]] = {}
        try:
            while len(by_rank) < self.nnodes - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(1, self.nnodes)) - set(by_rank))
                    raise RendezvousFailed(
                        f"node(s) {', '.join(map(str, missing))} of {self.nnodes} never came "
                        f"to {self.address}:{self.port} within {self.timeout:g} s"
                    )
                server.settimeout(left)
                try:
                    sock, peer = server.accept()
                except socket.timeout:  # noqa: UP041 (not TimeoutError before 3.10)
                    continue
                channel = _Channel(sock, f"a connection from {peer[0]}")
                try:
                    them = channel.recv(min(left, 10.0))
                except RendezvousFailed:
                    channel.close()
                    continue
                rank = them.get("rank")
                if (
                    them.get("token") != self.token
                    or not isinstance(rank, int)
                    or not 0 < rank < self.nnodes
                    or rank in by_rank
                ):
                    channel.close()  # not one of ours (another job, a scan): turned away
                    continue
                channel.who = f"node {rank}"
                by_rank[rank] = (channel, them)
        except BaseException:
            for channel, _ in by_rank.values():
                channel.close()
            raise
        finally:
            server.close()
        self.channels = [by_rank[r][0] for r in range(1, self.nnodes)]
        everyone = [hello] + [by_rank[r][1] for r in range(1, self.nnodes)]
        for channel in self.channels:
            channel.send({"nodes": everyone})
        return everyone

    def _connect(self, hello: dict[str, Any]) -> list[dict[str, Any]]:
        deadline = time.monotonic() + self.timeout
        last = "no answer"
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RendezvousFailed(
                    f"node 0 never answered at {self.address}:{self.port} within "
                    f"{self.timeout:g} s ({last})"
                )
            try:
                sock = socket.create_connection((self.address, self.port), timeout=min(left, 5.0))
                break
            except OSError as exc:
                last = str(exc)
                time.sleep(min(0.2, max(0.0, left)))
        channel = _Channel(sock, "node 0")
        channel.send({**hello, "token": self.token, "rank": self.rank})
        answer = channel.recv(max(0.1, deadline - time.monotonic()) + self.timeout)
        nodes = answer.get("nodes")
        if not isinstance(nodes, list):
            channel.close()
            raise RendezvousFailed("node 0 answered without the node list")
        self.channels = [channel]
        return nodes

    def close(self) -> None:
        for channel in self.channels:
            channel.close()


# -- the run -----------------------------------------------------------------------------------


@dataclass
class Totals:
    steps: int = 0
    compute_s: float = 0.0
    comm_s: float = 0.0
    comm_links: dict[str, float] = field(default_factory=dict)
    model_step_s: list[float] = field(default_factory=list)  # modelled step times, unscaled

    def bound_by(self) -> str | None:
        if not self.comm_links:
            return None
        return max(self.comm_links, key=lambda k: (self.comm_links[k], -LINK_CLASSES.index(k)))


def decide_step(
    hellos: Sequence[Mapping[str, Any]],
    reports: Sequence[Mapping[str, Any]],
    wan: Mapping[tuple[int, int], Link],
    nbytes: float,
) -> dict[str, Any]:
    """Node 0's decision for one step from every node's report ({"compute_s", "links":
    [[kind, gbps, latency], ...]}): the slowest node's compute, and the ring over all ranks
    through every node's links and the WAN hops between consecutive nodes."""
    ranks = sum(int(h.get("gpus") or 0) for h in hellos)
    links = [Link(str(k), float(g), float(t)) for r in reports for k, g, t in r.get("links") or []]
    links += list(wan.values())
    comm, bound = ring_allreduce(ranks, nbytes, links)
    compute = max(float(r.get("compute_s") or 0.0) for r in reports)
    return {"compute_s": compute, "comm_s": comm, "bound_by": bound}


def wan_hops(
    sites: Sequence[str | None], site_links: Sequence[SiteLink], nic_latency: float
) -> dict[tuple[int, int], tuple[str, SiteLink]]:
    """The ring's hops between consecutive nodes (and last back to first) that cross sites,
    with their site link; Unsupported when two sites have none."""
    n = len(sites)
    out: dict[tuple[int, int], tuple[str, SiteLink]] = {}
    if n < 2:
        return out
    for i in range(n):
        j = (i + 1) % n
        a, b = sites[i], sites[j]
        if not a or not b or a == b or (j, i) in out:
            continue
        link = site_link(site_links, a, b)
        if link is None:
            raise Unsupported(
                f"train: nodes {i} and {j} are at sites {a!r} and {b!r}, and GPUPOOL_SITE_LINKS "
                "names no link between them"
            )
        out[(i, j)] = (wan_key(a, b), link)
    return out


def _sites(env: Mapping[str, str], nnodes: int) -> list[str | None]:
    raw = [s.strip() or None for s in (env.get("GPUPOOL_NODE_SITES") or "").split(",")]
    if len(raw) != nnodes:
        return [None] * nnodes
    return raw


@dataclass(frozen=True)
class Options:
    params: float = DEFAULT_PARAMS
    batch: int = DEFAULT_BATCH
    steps: int = DEFAULT_STEPS
    flops_per_sample: float | None = None
    time_scale: float = 1.0
    checkpoint_every: int = DEFAULT_CHECKPOINT_STEPS
    rendezvous_timeout: float = DEFAULT_RENDEZVOUS_S

    @property
    def flops(self) -> float:
        fps = self.flops_per_sample
        return fps if fps is not None else default_flops_per_sample(self.params)

    @property
    def gradient_bytes(self) -> float:
        return BYTES_PER_PARAM * self.params


def run(
    options: Options,
    env: Mapping[str, str],
    out: TextIO,
    err: TextIO,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    from gpupoolctl.agent.workloads import sim

    state, why = sim.load_state(env)
    if state is None:
        from gpupoolctl.agent.workloads import train_torch

        return train_torch.run(options, env, out, err, why=why)
    try:
        node = describe_node(state, env)
        rendezvous = Rendezvous.from_env(env, options.rendezvous_timeout)
    except Unsupported as exc:
        err.write(f"{exc}\n")
        return EXIT_UNSUPPORTED
    except RendezvousFailed as exc:
        err.write(f"train: {exc}\n")
        return EXIT_RENDEZVOUS
    multi = rendezvous.nnodes > 1
    if multi and node.nic_gbps is None:
        err.write(
            f"train: a {rendezvous.nnodes}-node job needs the node's NICs, and {node.nic_note}; "
            "cannot model the traffic between nodes\n"
        )
        return EXIT_UNSUPPORTED
    shares = LinkShares.for_job(env)
    handled = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    previous: dict[int, Any] = {}
    checkpoint = Checkpoint.for_job(env) if rendezvous.rank == 0 else None
    reached = [0]
    try:
        # Only the main thread may take signals (a test runs two nodes as threads).
        if threading.current_thread() is threading.main_thread():
            for signum in handled:
                previous[signum] = signal.signal(signum, raise_stopped)
        try:
            return _run(
                options, env, out, err, sleep, node, rendezvous, shares, checkpoint, reached
            )
        finally:
            shares.leave()
            rendezvous.close()
    except sim.UnsafeFolder as exc:
        err.write(f"train: {exc}\n")
        return EXIT_UNSUPPORTED
    except Stopped as stopped:
        if checkpoint is not None:
            with contextlib.suppress(OSError):
                checkpoint.save(options.steps, options.params, reached[0])
        signal.pthread_sigmask(signal.SIG_BLOCK, handled)
        signal.signal(stopped.signum, signal.SIG_DFL)
        os.kill(os.getpid(), stopped.signum)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {stopped.signum})
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _run(
    options: Options,
    env: Mapping[str, str],
    out: TextIO,
    err: TextIO,
    sleep: Callable[[float], None],
    node: SimNode,
    rendezvous: Rendezvous,
    shares: LinkShares,
    checkpoint: Checkpoint | None,
    reached: list[int],
) -> int:
    multi = rendezvous.nnodes > 1
    site = _sites(env, rendezvous.nnodes)[rendezvous.rank]
    start_step = 0
    if checkpoint is not None:
        start_step, note = checkpoint.load(options.steps, options.params)
        if note:
            err.write(f"train: {note}\n")
    hello = {"rank": rendezvous.rank, "gpus": node.gpus, "site": site, "start": start_step}
    try:
        hellos = rendezvous.meet(hello)
    except RendezvousFailed as exc:
        err.write(f"train: {exc}\n")
        return EXIT_RENDEZVOUS
    ranks = sum(int(h.get("gpus") or 0) for h in hellos)
    start_step = int(hellos[0].get("start") or 0)
    reached[0] = start_step
    # Join the shared links this job uses: this node's PCIe roots (a PCIe ring), its NICs
    # (the ring leaves the node), and, on node 0 for the whole job, each WAN pair crossed.
    if node.gpus > 1 and node.fabric == "pcie":
        for root in node.pcie_roots:
            shares.join(f"pcie-{root}")
    if multi:
        shares.join("nic")
    wan: dict[tuple[int, int], tuple[str, SiteLink]] = {}
    if rendezvous.rank == 0 and multi:
        try:
            wan = wan_hops(
                [h.get("site") for h in hellos],
                parse_site_links(env.get("GPUPOOL_SITE_LINKS")),
                LATENCY_S["nic"],
            )
        except Unsupported as exc:
            err.write(f"{exc}\n")
            return EXIT_UNSUPPORTED
        for key, _ in wan.values():
            shares.join(key, shared=True)
    totals = Totals()
    compute_each = options.batch * options.flops / (node.tflops * 1e12)
    began = time.monotonic()
    try:
        for step in range(start_step, options.steps):
            step_start = time.monotonic()
            mine: dict[str, Any] = {
                "step": step,
                "compute_s": compute_each,
                "links": [[x.kind, x.gbps, x.latency] for x in node_links(node, shares, multi)],
            }
            if rendezvous.rank == 0:
                reports = [mine]
                for channel in rendezvous.channels:
                    reports.append(channel.recv(rendezvous.timeout))
                hops = {
                    pair: Link("wan", link.gbps / 8.0 / shares.count(key), link.rtt_ms / 2000.0)
                    for pair, (key, link) in wan.items()
                }
                decision = decide_step(hellos, reports, hops, options.gradient_bytes)
                decision["step"] = step
                for channel in rendezvous.channels:
                    channel.send(decision)
            else:
                rendezvous.channels[0].send(mine)
                decision = rendezvous.channels[0].recv(rendezvous.timeout + 600.0)
                if decision.get("step") != step:
                    raise RendezvousFailed(f"node 0 is at step {decision.get('step')}, not {step}")
            met = time.monotonic()
            compute = float(decision["compute_s"]) * options.time_scale
            comm = float(decision["comm_s"]) * options.time_scale
            sleep(compute)
            computed = time.monotonic()
            if comm > 0:
                sleep(comm)
            step_end = time.monotonic()
            # Waiting at the barrier for the slowest node is part of the all-reduce, as it is
            # in a real one: communication is the step's time outside its compute.
            measured_comm = (met - step_start) + (step_end - computed)
            totals.steps += 1
            totals.compute_s += computed - met
            totals.comm_s += measured_comm
            bound = decision.get("bound_by")
            if bound and ranks > 1:
                totals.comm_links[bound] = totals.comm_links.get(bound, 0.0) + measured_comm
            totals.model_step_s.append(float(decision["compute_s"]) + float(decision["comm_s"]))
            reached[0] = step + 1
            if checkpoint is not None and reached[0] % options.checkpoint_every == 0:
                checkpoint.save(options.steps, options.params, reached[0])
    except RendezvousFailed as exc:
        err.write(f"train: {exc} at step {reached[0]}\n")
        return EXIT_RENDEZVOUS
    if checkpoint is not None:
        checkpoint.save(options.steps, options.params, reached[0])
    samples = totals.steps * options.batch * ranks
    report = {
        "v": 1,
        "workload": "train",
        "samples": samples,
        "steps": totals.steps,
        "compute_s": round(totals.compute_s, 6),
        "comm_s": round(totals.comm_s, 6),
        "comm_links": {k: round(v, 6) for k, v in totals.comm_links.items()},
        "bound_by": totals.bound_by(),
    }
    report_file.write(env, report)
    steps_model = totals.model_step_s
    summary = {
        **report,
        "node_rank": rendezvous.rank,
        "nnodes": rendezvous.nnodes,
        "ranks": ranks,
        "devices": list(node.devices),
        "fabric": node.fabric,
        "resumed_from": start_step,
        "elapsed": round(time.monotonic() - began, 6),
        "model_step_s": round(sum(steps_model) / len(steps_model), 6) if steps_model else None,
        "time_scale": options.time_scale,
    }
    out.write(json.dumps(summary, sort_keys=True) + "\n")
    out.flush()
    return EXIT_OK


__all__ = [
    "LATENCY_S",
    "Link",
    "Options",
    "ring_allreduce",
    "run",
]
