"""The keys of a policy file's mappings: the same checks and messages in every section."""

from __future__ import annotations

import yaml

from gpupoolctl.hw.shown import shown
from gpupoolctl.yamlsource import YamlSource, did_you_mean


def section_keys(
    reader: YamlSource, node: yaml.Node, what: str, valid: tuple[str, ...]
) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    """A section's (or rule's) keys -> (key node, value node), in file order; one line at
    the first key outside `valid`, naming it, its likely spelling and the known keys."""
    if not isinstance(node, yaml.MappingNode):
        raise reader.fail(node, f"{what}: expected a mapping of {', '.join(valid)}")
    keys = reader.mapping(node, what)
    for key, (key_node, _) in keys.items():  # file order: the first bad key is named
        if key not in valid:
            raise reader.fail(
                key_node,
                f"{what}: unknown key {shown(key)}{did_you_mean(key, valid)}; "
                f"known keys: {', '.join(valid)}",
            )
    return keys
