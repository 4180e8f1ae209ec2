"""Parse a partition spec: NVIDIA mig-parted's v1 config plus gpupoolctl's additions.

Every valid mig-parted file parses unchanged and means the same thing:

    version: v1                      # required, exactly "v1"
    mig-configs:                     # label -> non-empty list of entries
      <label>:
        - devices: all | [0, 1]      # required; "devices: 7" is refused, as in mig-parted
          device-filter: "0x233010DE" | ["0x...", ...]   # optional PCI device ids
          mig-enabled: true|false    # required, unless the entry only sets the keys below
          mig-devices: {"1g.10gb": 7}  # required when enabled, empty when disabled

Additions (all optional):

    hosts: [sg-dgx01, a100]          # inventory host names, groups or globs; default all
    mig-devices: {"3g.40gb@4": 1}    # explicit placement: a GI at memory slot 4
    mig-devices: {"1c.3g.40gb@0": 3} # a GI at slot 0 holding three 1c compute instances
    compute-partition: CPX           # AMD: SPX, DPX, TPX, QPX, CPX
    memory-partition: NPS4           # AMD: NPS1, NPS2, NPS4, NPS8
    sriov-vfs: 4                     # SR-IOV virtual functions (0 disables)

Placements and counts coexist additively: a plain key `P: n` asks for n instances the
planner places; each `P@s` key adds one more GPU instance pinned at start slot s (its count is
the number of compute instances inside it: 1 for a full-GI profile). So
`{"1g.10gb": 2, "1g.10gb@6": 1}` means three 1g.10gb, one of them at slot 6.

Several entries may select the same GPU: as in mig-parted, later entries win, aspect by
aspect (MIG layout, AMD modes, SR-IOV), so an entry that only sets `sriov-vfs` does not undo
the MIG layout an earlier entry chose. Model-dependent checks (is this a profile of that
GPU? does the count fit?) happen when planning against facts; entries keep their lines so
those errors still name file:line.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import yaml

from gpupoolctl.errors import SourceError, UsageError
from gpupoolctl.hw.amd_modes import COMPUTE_MODE_NAMES, MEMORY_MODE_NAMES
from gpupoolctl.hw.mig_names import ProfileName, parse_profile_name
from gpupoolctl.hw.shown import shown
from gpupoolctl.yamlsource import YamlSource

ENTRY_KEYS: tuple[str, ...] = (
    "devices",
    "device-filter",
    "mig-enabled",
    "mig-devices",
    "hosts",
    "compute-partition",
    "memory-partition",
    "sriov-vfs",
)
_PCI_ID = re.compile(r"^0x[0-9a-fA-F]{1,8}$")


@dataclass(frozen=True)
class MigDevice:
    """One `mig-devices` key: `count` compute instances of `profile` (at `start` if pinned)."""

    key: str  # as written
    profile: ProfileName
    count: int
    start: int | None
    line: int


@dataclass(frozen=True)
class SpecEntry:
    source: str
    label: str
    line: int
    devices: Literal["all"] | tuple[int, ...]
    device_filter: tuple[str, ...] = ()  # upper-cased hex digits, "0x233010DE"
    hosts: tuple[str, ...] | None = None
    mig_enabled: bool | None = None
    mig_devices: tuple[MigDevice, ...] = ()
    compute_partition: str | None = None
    memory_partition: str | None = None
    sriov_vfs: int | None = None
    lines: Mapping[str, int] = field(default_factory=dict)

    def where(self, key: str | None = None) -> str:
        """'file:line' of the entry, or of one of its keys."""
        line = self.lines.get(key, self.line) if key else self.line
        return f"{self.source}:{line}"

    @property
    def all_devices(self) -> bool:
        return self.devices == "all"

    def matches_host(self, host: str, groups: Sequence[str]) -> bool:
        if self.hosts is None:
            return True
        names = (host, *groups)
        return any(fnmatch.fnmatchcase(name, pat) for pat in self.hosts for name in names)

    def matches_device(self, index: int, pci_device_id: str | None) -> bool:
        if self.device_filter and (
            not pci_device_id or _norm_pci(pci_device_id) not in self.device_filter
        ):
            return False
        return self.devices == "all" or index in self.devices

    @property
    def sets_amd(self) -> bool:
        return self.compute_partition is not None or self.memory_partition is not None


@dataclass(frozen=True)
class Spec:
    source: str
    labels: list[str]
    configs: Mapping[str, list[SpecEntry]]

    def config(self, label: str) -> list[SpecEntry]:
        if label not in self.configs:
            raise UsageError(
                f"{self.source}: no mig-config labelled {shown(label)}; valid: "
                f"{', '.join(self.labels)}"
            )
        return self.configs[label]


def _norm_pci(value: str) -> str:
    text = value.strip()
    digits = text[2:] if text[:2].lower() == "0x" else text
    return "0x" + digits.upper().rjust(8, "0")


def parse_spec(text: str, source: str = "<stdin>") -> Spec:
    """Parse a spec from text; SourceError names source:line and what was expected."""
    reader = YamlSource(text, source)
    root = reader.root()
    if root is None:
        raise SourceError(source, None, "empty file; expected 'version: v1' and 'mig-configs'")
    keys = reader.mapping(root, "the file", scalar_keys=True)
    if "version" not in keys:
        raise reader.fail(root, "missing required field 'version' (expected 'version: v1')")
    version = reader.scalar(keys["version"][1])
    if version != "v1":
        raise reader.fail(keys["version"][1], f"unknown version: {shown(version)}; expected v1")
    for key, (key_node, _) in keys.items():
        if key not in ("version", "mig-configs"):
            raise reader.fail(
                key_node, f"unexpected field {shown(key)}; valid: version, mig-configs"
            )
    if "mig-configs" not in keys:
        raise reader.fail(root, "missing required field 'mig-configs'")
    configs_node = keys["mig-configs"][1]
    configs: dict[str, list[SpecEntry]] = {}
    labels: list[str] = []
    items = reader.mapping(configs_node, "mig-configs", scalar_keys=True)
    if not items:
        raise reader.fail(configs_node, "at least one entry in 'mig-configs' is required")
    for label, (label_node, value) in items.items():
        if not isinstance(value, yaml.SequenceNode) or not value.value:
            raise reader.fail(
                label_node if not isinstance(value, yaml.SequenceNode) else value,
                f"mig-config {shown(label)} must be a non-empty list of entries",
            )
        configs[label] = [_entry(reader, label, node) for node in value.value]
        labels.append(label)
    return Spec(source=source, labels=labels, configs=configs)


def load_spec(path: str | os.PathLike[str]) -> Spec:
    """Read and parse a spec file ('-' reads stdin)."""
    name = os.fspath(path)
    if name == "-":
        import sys

        return parse_spec(sys.stdin.read(), "<stdin>")
    from gpupoolctl.textfile import read_user_text

    return parse_spec(read_user_text(name, "partition spec"), name)


def _entry(reader: YamlSource, label: str, node: yaml.Node) -> SpecEntry:
    what = f"mig-config {shown(label)} entry"
    items = reader.mapping(node, what, scalar_keys=True)
    lines: dict[str, int] = {}
    values: dict[str, yaml.Node] = {}
    for key, (key_node, value) in items.items():
        if key not in ENTRY_KEYS:
            raise reader.fail(
                key_node, f"unexpected field {shown(key)} in {what}; valid: {', '.join(ENTRY_KEYS)}"
            )
        lines[key] = key_node.start_mark.line + 1
        values[key] = value
    if "devices" not in values:
        raise reader.fail(node, f"missing required field 'devices' in {what}")
    devices = _devices(reader, values["devices"])
    device_filter: tuple[str, ...] = ()
    if "device-filter" in values:
        device_filter = _device_filter(reader, values["device-filter"])
    hosts = _hosts(reader, values["hosts"]) if "hosts" in values else None
    compute = _mode(reader, values.get("compute-partition"), COMPUTE_MODE_NAMES, "compute")
    memory = _mode(reader, values.get("memory-partition"), MEMORY_MODE_NAMES, "memory")
    sriov = None
    if "sriov-vfs" in values:
        sriov = reader.scalar(values["sriov-vfs"])
        if not isinstance(sriov, int) or isinstance(sriov, bool) or sriov < 0:
            raise reader.fail(values["sriov-vfs"], "sriov-vfs must be a whole number >= 0")
    mig_enabled = None
    if "mig-enabled" in values:
        mig_enabled = reader.scalar(values["mig-enabled"])
        if not isinstance(mig_enabled, bool):
            raise reader.fail(values["mig-enabled"], "mig-enabled must be true or false")
    elif compute is None and memory is None and sriov is None:
        raise reader.fail(
            node,
            f"missing required field 'mig-enabled' in {what} "
            "(optional only when the entry sets compute-partition, memory-partition or sriov-vfs)",
        )
    mig_devices: tuple[MigDevice, ...] = ()
    if "mig-devices" in values:
        mig_devices = _mig_devices(reader, values["mig-devices"])
        if mig_enabled is None:
            raise reader.fail(values["mig-devices"], "mig-devices needs mig-enabled: true")
        if not mig_enabled and any(d.count for d in mig_devices):
            raise reader.fail(
                values["mig-devices"], "MIG devices included when 'mig-enabled' is false"
            )
    elif mig_enabled:
        raise reader.fail(
            node, "missing required field 'mig-devices' when 'mig-enabled' is true (use {})"
        )
    return SpecEntry(
        source=reader.source,
        label=label,
        line=node.start_mark.line + 1,
        devices=devices,
        device_filter=device_filter,
        hosts=hosts,
        mig_enabled=mig_enabled,
        mig_devices=mig_devices,
        compute_partition=compute,
        memory_partition=memory,
        sriov_vfs=sriov,
        lines=lines,
    )


def _devices(reader: YamlSource, node: yaml.Node) -> Literal["all"] | tuple[int, ...]:
    expected = "devices must be 'all' or a list of GPU indexes such as [0, 1]"
    if isinstance(node, yaml.SequenceNode):
        out = []
        for item in node.value:
            value = reader.scalar(item)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise reader.fail(item, f"{expected}; got {shown(value)}")
            out.append(value)
        return tuple(out)
    value = reader.scalar(node)
    if value == "all":
        return "all"
    hint = f" (write [{value}])" if isinstance(value, int) and not isinstance(value, bool) else ""
    raise reader.fail(node, f"{expected}; got {shown(value)}{hint}")


def _device_filter(reader: YamlSource, node: yaml.Node) -> tuple[str, ...]:
    nodes = node.value if isinstance(node, yaml.SequenceNode) else [node]
    out = []
    for item in nodes:
        value = reader.scalar(item)
        if isinstance(value, int) and not isinstance(value, bool):
            value = f"0x{value:08X}"  # an unquoted 0x... is an int in YAML 1.1
        if not isinstance(value, str) or not _PCI_ID.match(value.strip()):
            raise reader.fail(
                item,
                'device-filter must be a PCI device id such as "0x233010DE" '
                f"or a list of them; got {shown(value)}",
            )
        out.append(_norm_pci(value))
    return tuple(out)


def _hosts(reader: YamlSource, node: yaml.Node) -> tuple[str, ...]:
    nodes = node.value if isinstance(node, yaml.SequenceNode) else [node]
    out = []
    for item in nodes:
        value = reader.scalar(item)
        if not isinstance(value, str) or not value.strip():
            raise reader.fail(
                item, f"hosts must be inventory host or group names; got {shown(value)}"
            )
        out.append(value.strip())
    if not out:
        raise reader.fail(node, "hosts must name at least one host or group")
    return tuple(out)


def _mode(
    reader: YamlSource, node: yaml.Node | None, valid: tuple[str, ...], key: str
) -> str | None:
    if node is None:
        return None
    value = reader.scalar(node)
    if isinstance(value, str) and value.strip().upper() in valid:
        return value.strip().upper()
    raise reader.fail(
        node, f"{key}-partition must be one of {', '.join(valid)}; got {shown(value)}"
    )


def _mig_devices(reader: YamlSource, node: yaml.Node) -> tuple[MigDevice, ...]:
    if isinstance(node, yaml.ScalarNode) and reader.scalar(node) is None:
        raise reader.fail(node, "mig-devices must be a mapping of profile to count (or {})")
    out = []
    parts = reader.mapping(node, "mig-devices", scalar_keys=True)
    for key, (key_node, value_node) in parts.items():
        line = key_node.start_mark.line + 1
        name, _, start_text = key.partition("@")
        try:
            profile = parse_profile_name(name)
        except ValueError as exc:
            raise reader.fail(key_node, f"{shown(key)} is not a MIG profile name: {exc}") from None
        start = None
        if _:
            if not start_text.isdigit():
                raise reader.fail(
                    key_node, f"{shown(key)}: a placement is written profile@start, e.g. 1g.10gb@2"
                )
            start = int(start_text)
        count = reader.scalar(value_node)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise reader.fail(value_node, f"count for {shown(key)} must be a whole number >= 0")
        if start is not None and not profile.is_ci_form and count != 1:
            raise reader.fail(
                value_node,
                f"{shown(key)} pins one GPU instance at slot {start}: its count must be 1 "
                f"(use several @start keys, or a plain {shown(name)} count)",
            )
        if start is not None and count == 0:
            raise reader.fail(value_node, f"{shown(key)}: a pinned instance needs a count >= 1")
        out.append(MigDevice(key=key, profile=profile, count=count, start=start, line=line))
    return tuple(out)
