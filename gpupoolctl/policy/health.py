"""The `health:` section of a pool policy file: when a node that stopped answering is lost.

health:
  node-dead-after: 90s      # silent this long (with running jobs): declared lost
  return-to-service: auto   # auto | manual: whether a lost node that answers again is
                            # put back to work by itself (after its stale runs are killed)
"""

from __future__ import annotations

import yaml

from gpupoolctl.hw.shown import shown
from gpupoolctl.policy.model import RETURN_TO_SERVICE, HealthPolicy
from gpupoolctl.policy.sections import section_keys
from gpupoolctl.policy.values import duration_s
from gpupoolctl.yamlsource import YamlSource

SECTION_KEYS = ("node-dead-after", "return-to-service")
# Below a few seconds one slow answer (a loaded node, a long link) would lose a node; above
# a day a lost node's jobs would wait for nothing.
MIN_NODE_DEAD_AFTER_S = 5.0
MAX_NODE_DEAD_AFTER_S = 86400.0


def parse_health(reader: YamlSource, node: yaml.Node) -> HealthPolicy:
    """The section at `node`; `health:` with nothing under it keeps the defaults."""
    defaults = HealthPolicy()
    if isinstance(node, yaml.ScalarNode) and reader.scalar(node) is None:
        return defaults
    keys = section_keys(reader, node, "health", SECTION_KEYS)
    dead_after = defaults.node_dead_after_s
    if "node-dead-after" in keys:
        value_node = keys["node-dead-after"][1]
        with reader.at(value_node):
            dead_after = duration_s(
                reader.scalar(value_node), "health.node-dead-after", most_s=MAX_NODE_DEAD_AFTER_S
            )
        if dead_after < MIN_NODE_DEAD_AFTER_S:
            raise reader.fail(
                value_node,
                f"health.node-dead-after: {shown(reader.scalar(value_node))} is too short; "
                f"expected at least {MIN_NODE_DEAD_AFTER_S:g}s (one slow answer is not a loss)",
            )
    back = defaults.return_to_service
    if "return-to-service" in keys:
        value_node = keys["return-to-service"][1]
        value = reader.scalar(value_node)
        if value not in RETURN_TO_SERVICE:
            raise reader.fail(
                value_node,
                f"health.return-to-service: {shown(value)}; expected "
                f"{' or '.join(RETURN_TO_SERVICE)}",
            )
        back = str(value)
    return HealthPolicy(node_dead_after_s=dead_after, return_to_service=back)
