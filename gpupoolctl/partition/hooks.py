"""Hooks files for `partition apply/reset --hooks FILE`: commands run on each node around the
apply.

Two spellings are accepted:

    # NVIDIA mig-parted's hooks file (api/hooks/v1), unchanged
    version: v1
    hooks:
      pre-apply-config:
        - command: /bin/systemctl
          args: [stop, kubelet]
          envs: {SYSTEMD_COLORS: "0"}    # optional
          workdir: /etc/nvidia-mig-manager  # optional

    # or plain argv lists per hook
    apply-exit:
      - [/bin/systemctl, start, kubelet]

Hooks: apply-start, pre-apply-mode, pre-apply-config, apply-exit (the agent's own list). The
agent runs each argv without a shell, so `envs` and `workdir` become an
`env [-C dir] K=V ... command args` prefix (GNU env; `-C` needs coreutils 8.28 or later).
"""

from __future__ import annotations

import os
from typing import Any

from gpupoolctl.agent.partition.request import HOOK_NAMES
from gpupoolctl.errors import SourceError
from gpupoolctl.hw.shown import shown

Hooks = dict[str, list[list[str]]]

__all__ = ["HOOK_NAMES", "Hooks", "load_hooks", "parse_hooks"]


def load_hooks(path: str | os.PathLike[str]) -> Hooks:
    """The hooks file at `path` as argv lists per hook name; SourceError naming the file."""
    from gpupoolctl.textfile import read_user_text

    where = str(path)
    return parse_hooks(read_user_text(path, "hooks file"), where)


def parse_hooks(text: str, source: str = "<stdin>") -> Hooks:
    """A hooks document (mig-parted hooks v1, or argv lists per hook) as argv lists."""
    from gpupoolctl.yamlsource import safe_load

    where = source
    document = safe_load(text, where)
    if isinstance(document, dict) and "hooks" in document:
        version = document.get("version")
        if version != "v1":
            raise SourceError(where, None, f"unknown hooks file version {shown(version)} (want v1)")
        document = document["hooks"]
    if not isinstance(document, dict):
        raise SourceError(where, None, "expected a map of hook names to lists of commands")
    hooks: Hooks = {}
    for name, commands in document.items():
        if name not in HOOK_NAMES:
            raise SourceError(
                where, None, f"unknown hook {shown(name)}; valid: {', '.join(HOOK_NAMES)}"
            )
        if not isinstance(commands, list):
            raise SourceError(where, None, f"hook {name}: expected a list of commands")
        hooks[name] = [_argv(where, name, command) for command in commands]
    return hooks


def _argv(where: str, hook: str, command: Any) -> list[str]:
    if isinstance(command, list):
        if not command or not all(isinstance(a, str | int | float) for a in command):
            raise SourceError(where, None, f"hook {hook}: a command is a non-empty argv list")
        return [str(a) for a in command]
    if isinstance(command, str):
        raise SourceError(
            where,
            None,
            f"hook {hook}: {shown(command)} is a string; hooks run without a shell, "
            "so give an argv list (or mig-parted's command/args)",
        )
    if not isinstance(command, dict) or not isinstance(command.get("command"), str):
        raise SourceError(where, None, f"hook {hook}: each entry needs a 'command'")
    unknown = set(command) - {"command", "args", "envs", "workdir"}
    if unknown:
        keys = ", ".join(shown(k) for k in sorted(unknown, key=str))
        raise SourceError(where, None, f"hook {hook}: unknown key(s) {keys}")
    args = command.get("args") or []
    envs = command.get("envs") or {}
    if not isinstance(args, list) or not isinstance(envs, dict):
        raise SourceError(where, None, f"hook {hook}: 'args' is a list and 'envs' a map")
    argv = [command["command"], *(str(a) for a in args)]
    prefix: list[str] = []
    if command.get("workdir"):
        prefix += ["-C", str(command["workdir"])]
    prefix += [f"{key}={value}" for key, value in envs.items()]
    return ["env", *prefix, *argv] if prefix else argv
