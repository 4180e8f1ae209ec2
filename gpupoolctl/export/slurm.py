"""The pool for Slurm: the slices of each node as typed `gpu` GRES.

Two pieces, as Slurm wants them:

- for slurm.conf, `GresTypes=gpu` and one line per node,
  `NodeName=sg-dgx02 Gres=gpu:h100:6,gpu:h100_1g.10gb:7,gpu:h100_3g.40gb:2`;
- gres.conf, `AutoDetect=off` and one line per node and type,
  `NodeName=sg-dgx02 Name=gpu Type=h100_1g.10gb Count=7 [File=...]`.

GRES type names (what a job asks for: `--gres=gpu:h100_1g.10gb:1`):

- a whole card: its model's short name (`h100`, `a100`, `mi300x`, `l40s`); when two models in
  the export share a short name, both use their longer names (`a100-pcie-40gb`,
  `a100-sxm4-80gb`), so different cards never pool into one type;
- a MIG instance: model and profile (`h100_1g.10gb`), as Slurm's own NVML detection names
  them: a 1g.10gb on an H100 is not the one on an A100 80GB;
- an AMD partition: model and modes (`mi300x_cpx.nps4`); an SR-IOV VF: model and VF count
  (`l40s_vf.4`, one of four).

Names are lowercase `[a-z0-9._-]`, start with a letter (so a type never reads as a count) and
are at most 63 characters. Slurm identifies a type by a 32-bit hash of its name
(`gres_build_id`), not by the text, so two names with the same hash would be one type to it:
`slurm_type_id` mirrors that hash and the export renames until every type's id is distinct.

Device files: Slurm's gres/gpu plugin drops every GPU line without `File=` (slurmd logs
"Removing file-less GPU" and the node is drained for a GRES count mismatch), and slurmd waits
until each `File=` path exists. The ledger knows no device paths, so by default the lines are
count-only (right for slurmctld, and the export says why slurmd will not accept them); with
`placeholder_dir` every slice gets a stand-in file `<dir>/<host>/gpu<k>`, what simulated nodes
need (create them as character devices, e.g. `mknod <path> c 1 3`, so that Slurm also sets
CUDA_VISIBLE_DEVICES). Order is deterministic: nodes by name, types by kind then name.

Drains (`gpupoolctl drain`, or `health`'s own): a drained card's slices are left out of the
GRES, so Slurm places nothing there either; a drained host keeps its node line (Slurm must
know the node) and gets `DownNodes=<host> State=DRAIN Reason="..."`, so that it takes no
jobs until the drain is lifted and the export written again.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.errors import UsageError
from gpupoolctl.hw.slice import card_key

GRES_NAME = "gpu"
MAX_TYPE = 63
KIND_ORDER = ("gpu", "mig", "partition", "vf")
# Words that name the vendor or product line rather than the card.
VENDOR_WORDS = frozenset({"nvidia", "amd", "instinct", "tesla"})

_LEGAL_TYPE = re.compile(r"[a-z][a-z0-9._-]*")
_NOT_TYPE_CHAR = re.compile(r"[^a-z0-9._-]+")
_WORD_SPLIT = re.compile(r"[^a-z0-9.]+")
# Slurm node names and the placeholder paths built from them: no spaces, brackets or commas
# (those are hostlist syntax), no '=' or '#' (config syntax).
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_PATH = re.compile(r"/[A-Za-z0-9._/-]*")


def slurm_type_id(name: str) -> int:
    """Slurm's id of a GRES type name (gres_build_id in src/common/gres.c): each byte shifted
    by 0, 8, 16, 24, 0, ... bits and summed modulo 2**32."""
    total = 0
    for position, byte in enumerate(name.encode()):
        total += byte << (8 * (position % 4))
    return total % 2**32


def is_legal_type(name: str) -> bool:
    """A type name Slurm parses as one token everywhere: slurm.conf, gres.conf, --gres."""
    return (
        len(name) <= MAX_TYPE
        and _LEGAL_TYPE.fullmatch(name) is not None
        and "no_consume" not in name
    )


def sanitize_type(text: str) -> str:
    """Lowercase, runs of other characters to one '-', a letter first, at most 63 characters."""
    cleaned = _clean(text)
    if not cleaned or not cleaned[0].isalpha():
        cleaned = f"gpu-{cleaned}".rstrip("-")
    return _shorten(cleaned, text)


def _clean(text: str) -> str:
    return _legal(_NOT_TYPE_CHAR.sub("-", text.lower()).strip("-._"))


def _shorten(name: str, source: str, limit: int = MAX_TYPE) -> str:
    if len(name) <= limit:
        return name
    digest = f"{zlib.crc32(source.encode()):08x}"
    return f"{name[: limit - len(digest) - 1].rstrip('-._')}-{digest}"


def _legal(name: str) -> str:
    # Slurm reads "no_consume" inside a GRES spec as a flag, wherever the pieces met.
    return name.replace("no_consume", "no-consume")


def _natural(text: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _model_words(model: str) -> list[str]:
    words = [w.strip(".") for w in _WORD_SPLIT.split(model.lower())]
    return [w for w in words if w and w not in VENDOR_WORDS]


def model_short_name(model: str | None, vendor: str | None = None) -> str:
    """`NVIDIA H100 80GB HBM3` -> `h100`: the words up to the first with a digit in it."""
    words = _model_words(model or "")
    if not words:
        return sanitize_type(vendor or "gpu")
    taken: list[str] = []
    for word in words:
        taken.append(word)
        if any(ch.isdigit() for ch in word):
            break
    return sanitize_type("-".join(taken))


def model_long_name(model: str | None, vendor: str | None = None) -> str:
    """`NVIDIA A100-PCIE-40GB` -> `a100-pcie-40gb`: every word but the vendor's."""
    words = _model_words(model or "")
    return sanitize_type("-".join(words)) if words else sanitize_type(vendor or "gpu")


@dataclass(frozen=True, order=True)
class SliceKind:
    """What makes two slices interchangeable for Slurm: same card model, same kind, same
    profile. Distinct kinds always get distinct type names."""

    model: str
    vendor: str
    kind: str
    profile: str

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> SliceKind:
        kind = str(entry.get("kind") or "gpu")
        if kind not in KIND_ORDER:
            raise UsageError(f"slice {entry.get('id')!r} has unknown kind {kind!r}")
        return cls(
            model=str(entry.get("model") or ""),
            vendor=str(entry.get("vendor") or ""),
            kind=kind,
            profile="" if kind == "gpu" else str(entry.get("profile") or ""),
        )


def _profile_suffix(kind: SliceKind) -> str:
    """`_1g.10gb` (MIG), `_cpx.nps4` (AMD modes), `_vf.4` (one of four VFs), `` (whole)."""
    if kind.kind == "gpu":
        return ""
    cleaned = _clean(kind.profile.replace("/", "."))
    return "_" + (cleaned or kind.kind)


def type_names(kinds: Iterable[SliceKind]) -> dict[SliceKind, str]:
    """One legal, distinct GRES type name per slice kind, with distinct Slurm ids."""
    unique = sorted(set(kinds))
    models = sorted({(k.model, k.vendor) for k in unique})
    shorts = {m: model_short_name(m[0], m[1] or None) for m in models}
    crowded = {name for name, n in Counter(shorts.values()).items() if n > 1}
    model_names = {
        m: model_long_name(m[0], m[1] or None) if shorts[m] in crowded else shorts[m]
        for m in models
    }
    names: dict[SliceKind, str] = {}
    taken: set[str] = set()
    ids: set[int] = set()
    for kind in unique:
        base = model_names[(kind.model, kind.vendor)]
        suffix = _profile_suffix(kind)
        candidate = _legal(_shorten(base + suffix, repr(kind)))
        number = 1
        # Sanitizing may merge two models or profiles, and Slurm's hash may merge two names:
        # number the later ones (in sorted order, so the result is deterministic).
        while candidate in taken or slurm_type_id(candidate) in ids:
            number += 1
            stem = _shorten(base + suffix, repr(kind), MAX_TYPE - len(f"-{number}"))
            candidate = _legal(f"{stem}-{number}")
        names[kind] = candidate
        taken.add(candidate)
        ids.add(slurm_type_id(candidate))
    return names


@dataclass(frozen=True)
class GresGroup:
    """Slices of one type on one node."""

    type: str
    kind: SliceKind
    slice_ids: tuple[str, ...]
    files: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        return len(self.slice_ids)

    def spec(self) -> str:
        return f"{GRES_NAME}:{self.type}:{self.count}"


@dataclass(frozen=True)
class SlurmNode:
    name: str
    groups: tuple[GresGroup, ...]

    def gres_spec(self) -> str:
        """The value of Gres= in slurm.conf, as `scontrol show node` prints it back."""
        return ",".join(group.spec() for group in self.groups)

    def counts(self) -> dict[str, int]:
        return {group.type: group.count for group in self.groups}


@dataclass(frozen=True)
class SlurmConfig:
    nodes: tuple[SlurmNode, ...]
    types: dict[str, SliceKind]  # type name -> what it stands for
    cpus: int | None = None
    real_memory_mib: int | None = None
    warnings: tuple[str, ...] = field(default=())
    drained: tuple[tuple[str, str], ...] = ()  # (host, reason) of drained hosts, by name

    def node(self, name: str) -> SlurmNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def node_line(self, node: SlurmNode) -> str:
        parts = [f"NodeName={node.name}"]
        if self.cpus is not None:
            parts.append(f"CPUs={self.cpus}")
        if self.real_memory_mib is not None:
            parts.append(f"RealMemory={self.real_memory_mib}")
        if node.groups:  # every card drained: the node has no GRES to offer
            parts.append(f"Gres={node.gres_spec()}")
        return " ".join(parts)

    def node_lines(self) -> str:
        """slurm.conf NodeName lines, one per node."""
        return "".join(self.node_line(node) + "\n" for node in self.nodes)

    def slurm_conf(self) -> str:
        """The slurm.conf fragment: GresTypes, the node lines, drained hosts' DownNodes."""
        down = "".join(
            f'DownNodes={host} State=DRAIN Reason="{reason}"\n' for host, reason in self.drained
        )
        return f"GresTypes={GRES_NAME}\n" + self.node_lines() + down

    def gres_conf(self) -> str:
        """A whole gres.conf (the same file serves every node and the controller)."""
        lines = ["AutoDetect=off"]
        for node in self.nodes:
            for group in node.groups:
                line = (
                    f"NodeName={node.name} Name={GRES_NAME} Type={group.type} Count={group.count}"
                )
                if group.files:
                    line += f" File={_file_spec(group.files)}"
                lines.append(line)
        return "\n".join(lines) + "\n"

    def device_files(self) -> list[str]:
        """Every File= path, in order (the placeholders a simulated node must create)."""
        return [path for node in self.nodes for group in node.groups for path in group.files]

    def text(self) -> str:
        """Both files in one stream, each under a comment naming it."""
        return (
            "# slurm.conf: add these lines\n"
            + self.slurm_conf()
            + "\n# gres.conf: the whole file, next to slurm.conf\n"
            + self.gres_conf()
        )


def _file_spec(files: tuple[str, ...]) -> str:
    """`/d/gpu[6-12]` when the files are one numbered run, else a comma list."""
    match = re.fullmatch(r"(.*?)(\d+)", files[0])
    if match:
        prefix, first = match.group(1), int(match.group(2))
        expected = tuple(f"{prefix}{first + k}" for k in range(len(files)))
        if files == expected:
            return files[0] if len(files) == 1 else f"{prefix}[{first}-{first + len(files) - 1}]"
    return ",".join(files)


def slurm_config(
    slices: Iterable[Mapping[str, Any]],
    *,
    placeholder_dir: str | None = None,
    cpus: int | None = None,
    real_memory_mib: int | None = None,
    drains: Mapping[str, Mapping[str, Any]] | None = None,
) -> SlurmConfig:
    """The Slurm view of `slices` (the ledger's slice records: id, host, kind, profile, model,
    vendor), one node per host.

    drains: the ledger's drains by target ("host" or "host/gpuN"): drained cards' slices are
    left out, drained hosts get a DownNodes line.

    placeholder_dir: an absolute folder; every slice gets File=<dir>/<host>/gpu<k>, k counting
    the host's slices in export order. cpus / real_memory_mib: added to every node line when
    given (the facts know neither)."""
    if placeholder_dir is not None and (
        _PATH.fullmatch(placeholder_dir) is None or "//" in placeholder_dir
    ):
        raise UsageError(
            f"placeholder folder {placeholder_dir!r}: an absolute path of letters, digits "
            "and . _ - / is needed (Slurm reads File= as a host list)"
        )
    for name, value in (("CPUs", cpus), ("RealMemory", real_memory_mib)):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be at least 1, not {value}")
    drains = drains or {}
    by_host: dict[str, list[tuple[SliceKind, str]]] = defaultdict(list)
    for entry in slices:
        host = str(entry.get("host") or "")
        if _NODE_NAME.fullmatch(host) is None:
            raise UsageError(
                f"host {host!r} cannot be a Slurm NodeName (letters, digits, . _ - only)"
            )
        by_host.setdefault(host, [])
        if card_key(entry) in drains:
            continue  # a drained card: Slurm must not place there either
        by_host[host].append((SliceKind.of(entry), str(entry.get("id") or "")))
    names = type_names(kind for entries in by_host.values() for kind, _ in entries)
    nodes = tuple(_node(host, by_host[host], names, placeholder_dir) for host in sorted(by_host))
    warnings: list[str] = []
    if placeholder_dir is None and nodes:
        warnings.append(
            "gres.conf has no File= paths (the ledger knows no device files): slurmctld "
            "accepts it, but Slurm's gres/gpu plugin on slurmd drops file-less GPUs; give "
            "each line its File= (or use placeholder files for simulated nodes)"
        )
    drained = tuple(
        (host, _reason_text(drains[host].get("reason")))
        for host in sorted(by_host)
        if host in drains
    )
    return SlurmConfig(
        nodes=nodes,
        types={name: kind for kind, name in names.items()},
        cpus=cpus,
        real_memory_mib=real_memory_mib,
        warnings=tuple(warnings),
        drained=drained,
    )


def _reason_text(reason: Any) -> str:
    """A drain's reason as a slurm.conf value: one line, no quote or comment character."""
    text = " ".join(str(reason or "drained").replace('"', "'").replace("#", " ").split())
    return f"gpupoolctl: {text}"[:200]


def _node(
    host: str,
    entries: list[tuple[SliceKind, str]],
    names: Mapping[SliceKind, str],
    placeholder_dir: str | None,
) -> SlurmNode:
    grouped: dict[SliceKind, list[str]] = defaultdict(list)
    for kind, slice_id in entries:
        grouped[kind].append(slice_id)
    order = sorted(grouped, key=lambda k: (KIND_ORDER.index(k.kind), names[k]))
    groups: list[GresGroup] = []
    next_file = 0
    for kind in order:
        ids = tuple(sorted(grouped[kind], key=_natural))
        files: tuple[str, ...] = ()
        if placeholder_dir is not None:
            folder = placeholder_dir.rstrip("/")
            files = tuple(f"{folder}/{host}/gpu{next_file + k}" for k in range(len(ids)))
            next_file += len(ids)
        groups.append(GresGroup(type=names[kind], kind=kind, slice_ids=ids, files=files))
    return SlurmNode(name=host, groups=tuple(groups))
