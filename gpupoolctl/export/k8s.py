"""The pool for Kubernetes and NVIDIA's GPU operator: a mig-parted ConfigMap and node labels.

mig-manager (the GPU operator's MIG component) reads a mig-parted v1 config from a ConfigMap
(key `config.yaml`) and applies, on each node, the named config that the node's label
`nvidia.com/mig.config` selects. So the export is:

- one ConfigMap, `gpupoolctl-mig-parted-config`, holding one named config per distinct
  current layout (plus `all-disabled`, the operator's default), with only the fields
  mig-parted accepts;
- per node, `nvidia.com/mig.config=<that name>` (MIG-capable nodes only), and gpupoolctl's
  informational labels under `gpupoolctl.io/` (pool, host, GPU vendor, model, count and
  NVLink/xGMI island count).

Why the labels are not YAML objects: `kubectl apply` of a partial `Node` (name and labels
only) creates that Node when it does not exist, a phantom that never becomes Ready, and
records a last-applied annotation on every real one. Labels are therefore given as
`kubectl label node NAME k=v ... --overwrite` lines (`commands()`, which also applies the
ConfigMap first), and as a plain `labels:` mapping per node for tools (`to_dict()`). The
manifest (`manifest()`) holds only what `kubectl apply -f -` can safely apply.

Config names are stable: `all-disabled` when every MIG-capable GPU of a node has MIG off,
otherwise `gpupoolctl-` and a hash of the layout, so re-exporting an unchanged pool changes
no label.

With a layouts file (`layouts`: its labels in mig-parted's subset, export.migparted), the
ConfigMap also holds one config per label of the file, under the label's own name
(`inference`, `training`), so that relabelling a node (`nvidia.com/mig.config=training`)
makes mig-manager switch it. Each node is labelled with the first of the file's configs
that holds on it now (every MIG-capable GPU selected, the layout as asked), so applying the
export changes nothing on the node; a node that holds none keeps its current-state config
as above. A label of the file named `all-disabled` replaces the default one.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.errors import SourceError, UsageError

CONFIGMAP_NAME = "gpupoolctl-mig-parted-config"
CONFIG_KEY = "config.yaml"
DEFAULT_NAMESPACE = "gpu-operator"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
LABEL_PREFIX = "gpupoolctl.io"
ALL_DISABLED = "all-disabled"
ALL_DISABLED_ENTRIES: list[dict[str, Any]] = [{"devices": "all", "mig-enabled": False}]
NODE_NAME_VAR = "k8s_node_name"  # an inventory var naming the host's Kubernetes node

# Kubernetes' label syntax (apimachinery validation: IsQualifiedName, IsValidLabelValue).
MAX_NAME = 63
MAX_PREFIX = 253
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_DNS_LABEL_RE = re.compile(_DNS_LABEL)
_NOT_NAME_CHAR = re.compile(r"[^-A-Za-z0-9_.]+")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


def valid_label_value(value: str) -> bool:
    """Empty, or at most 63 characters of [-A-Za-z0-9_.] starting and ending alphanumeric."""
    return value == "" or (len(value) <= MAX_NAME and _NAME.fullmatch(value) is not None)


def valid_label_key(key: str) -> bool:
    """`[prefix/]name`: the prefix a DNS subdomain of at most 253 characters, the name as
    a label value but not empty."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= MAX_PREFIX and _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return name != "" and valid_label_value(name)


def sanitize_label_value(text: str) -> str:
    """The nearest valid label value: other characters become '-', the ends are trimmed to
    alphanumerics, and the whole to 63 characters ("NVIDIA H100 80GB HBM3" becomes
    "NVIDIA-H100-80GB-HBM3"; nothing usable becomes "")."""
    value = _EDGE.sub("", _NOT_NAME_CHAR.sub("-", text))
    return _EDGE.sub("", value[:MAX_NAME])


@dataclass
class NodeLabels:
    node: str  # the Kubernetes node name
    host: str  # the inventory host it came from
    mig_config: str | None  # the config name mig-manager applies; None: no MIG-capable GPU
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class K8sExport:
    namespace: str
    configs: dict[str, list[dict[str, Any]]]  # config name -> mig-parted entries
    nodes: list[NodeLabels]
    layouts: list[str] = field(default_factory=list)  # the configs from a layouts file

    def config_text(self) -> str:
        """The ConfigMap's config.yaml: a mig-parted v1 config."""
        import yaml

        document = {"version": "v1", "mig-configs": self.configs}
        return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)

    def configmap(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": CONFIGMAP_NAME,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": "gpupoolctl"},
            },
            "data": {CONFIG_KEY: self.config_text()},
        }

    def manifest(self) -> str:
        """YAML that `kubectl apply -f -` accepts: the ConfigMap (config.yaml as a block)."""
        return "---\n" + _dump_block_strings(self.configmap())

    def commands(self) -> str:
        """A POSIX shell script: apply the ConfigMap, then label each node (the config must
        exist before a label names it, or mig-manager fails that node)."""
        lines = [
            "#!/bin/sh",
            "# Written by `gpupoolctl export k8s --format commands`; run it with kubectl's",
            "# context on the cluster: it applies the ConfigMap, then labels each node.",
            "kubectl apply -f - <<'GPUPOOLCTL_EOF' || exit 1",
            self.manifest().rstrip("\n"),
            "GPUPOOLCTL_EOF",
        ]
        for node in self.nodes:
            pairs = " ".join(shlex.quote(f"{k}={v}") for k, v in node.labels.items())
            lines.append(f"kubectl label node {shlex.quote(node.node)} --overwrite {pairs}")
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        """For tools: the ConfigMap object, the configs, and a labels mapping per node."""
        return {
            "namespace": self.namespace,
            "configmap": self.configmap(),
            "configs": self.configs,
            "layouts": self.layouts,
            "nodes": [
                {
                    "node": n.node,
                    "host": n.host,
                    "mig_config": n.mig_config,
                    "labels": n.labels,
                }
                for n in self.nodes
            ],
        }


def k8s_export(
    facts_by_host: Mapping[str, Mapping[str, Any]],
    *,
    pool: str,
    namespace: str = DEFAULT_NAMESPACE,
    node_names: Mapping[str, str] | None = None,
    layouts: Mapping[str, list[dict[str, Any]]] | None = None,
) -> K8sExport:
    """The ConfigMap configs and node labels for the hosts read (`facts_by_host`, in order).

    `node_names` maps an inventory host to its Kubernetes node name where they differ.
    `layouts`: a layouts file's labels as mig-parted configs (label -> entries), written
    under their own names; each node is labelled with the first that holds on it.
    """
    from gpupoolctl.export.migparted import config_holds, mig_capable, mig_entries

    check_namespace(namespace)
    named = dict(layouts or {})
    for label in named:
        check_config_label(label)
    configs: dict[str, list[dict[str, Any]]] = {
        ALL_DISABLED: [dict(e) for e in ALL_DISABLED_ENTRIES]
    }
    configs.update({label: [dict(e) for e in entries] for label, entries in named.items()})
    nodes = []
    for host, facts in facts_by_host.items():
        name: str | None = None
        if mig_capable(facts):
            holding = (
                label for label, entries in named.items() if config_holds(entries, host, facts)
            )
            name = next(holding, None)
            if name is None:
                entries = mig_entries(host, facts)
                name = config_name(entries)
                if name in named:  # the file's own config of that name, which does not hold
                    name = hashed_name(entries)
                if name != ALL_DISABLED:
                    configs[name] = entries
        node = (node_names or {}).get(host) or host
        check_node_name(host, node)
        nodes.append(NodeLabels(node, host, name, node_labels(host, facts, pool, name)))
    return K8sExport(namespace=namespace, configs=configs, nodes=nodes, layouts=list(named))


def check_config_label(label: str, source: str = "<layouts>") -> None:
    """A config name is the value of a node's nvidia.com/mig.config label: a layouts
    file's label that cannot be one is an error in that file."""
    if not label or not valid_label_value(label):
        raise SourceError(
            source,
            None,
            f"label {label!r} cannot name a config for mig-manager: the node label "
            f"{MIG_CONFIG_LABEL}=NAME takes at most {MAX_NAME} characters of letters, digits, "
            "'-', '_' and '.', starting and ending alphanumeric",
        )


def check_namespace(namespace: str) -> None:
    """A namespace is a DNS label; anything else is a usage error (before any work)."""
    if len(namespace) > MAX_NAME or not _DNS_LABEL_RE.fullmatch(namespace):
        raise UsageError(
            f"--namespace {namespace!r}: a Kubernetes namespace is at most 63 characters "
            "of lowercase letters, digits and '-', starting and ending alphanumeric"
        )


def check_node_name(host: str, node: str) -> None:
    """A Kubernetes node name is a DNS subdomain. Anything else names no node, and in the
    commands script a name such as `--all` or `--server=...` would be an option to kubectl
    (quoting keeps it one word, not a name)."""
    if len(node) > MAX_PREFIX or not _DNS_SUBDOMAIN.fullmatch(node):
        raise UsageError(
            f"host {host}: {node!r} is not a Kubernetes node name (lowercase letters, digits, "
            f"'-' and '.', at most {MAX_PREFIX} characters); set the host's {NODE_NAME_VAR} "
            "var to its node's name"
        )


def config_name(entries: list[dict[str, Any]]) -> str:
    """`all-disabled` when no entry enables MIG, else a name derived from the layout."""
    if all(not entry.get("mig-enabled") for entry in entries):
        return ALL_DISABLED
    return hashed_name(entries)


def hashed_name(entries: list[dict[str, Any]]) -> str:
    """`gpupoolctl-` and a hash of the layout."""
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()
    return f"gpupoolctl-{digest[:10]}"


def node_labels(
    host: str, facts: Mapping[str, Any], pool: str, mig_config: str | None
) -> dict[str, str]:
    """The labels one node gets; every key and value is valid Kubernetes label syntax."""
    from gpupoolctl.hw.topology import island_count

    gpus = list(facts.get("gpus") or [])
    labels: dict[str, str] = {}
    if mig_config is not None:
        labels[MIG_CONFIG_LABEL] = mig_config
    labels[f"{LABEL_PREFIX}/pool"] = sanitize_label_value(pool)
    labels[f"{LABEL_PREFIX}/host"] = sanitize_label_value(host)
    labels[f"{LABEL_PREFIX}/gpu.count"] = str(len(gpus))
    if gpus:
        labels[f"{LABEL_PREFIX}/gpu.vendor"] = _common(gpus, "vendor")
        labels[f"{LABEL_PREFIX}/gpu.model"] = _common(gpus, "model")
        islands = island_count(facts)
        if islands is not None:
            labels[f"{LABEL_PREFIX}/islands"] = str(islands)
    return labels


def _common(gpus: list[Mapping[str, Any]], key: str) -> str:
    """The GPUs' shared value of `key` as a label value; "mixed" when they differ."""
    values = {str(gpu.get(key) or "") for gpu in gpus}
    return sanitize_label_value(values.pop()) if len(values) == 1 else "mixed"


def _dump_block_strings(document: Any) -> str:
    """YAML with multi-line strings as literal blocks (`|`), readable in `kubectl get -o yaml`
    and in a diff; a local dumper, so yaml's global state is left alone."""
    import yaml

    class BlockDumper(yaml.SafeDumper):
        pass

    def represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    BlockDumper.add_representer(str, represent_str)
    return yaml.dump(document, Dumper=BlockDumper, sort_keys=False, default_flow_style=False)
