"""Let global options follow the command: `gpupoolctl inventory -o json` as well as
`gpupoolctl -o json inventory`.

Click only accepts a group's options before its sub-command. Operators type them anywhere,
so before parsing we move each global option found after the command path to the front,
unless the command itself defines an option of that name: `-f` is a command's own wherever
it has one (`partition plan/apply/assert -f FILE`, `export k8s -f LAYOUTS`, `logs -f`) and
only elsewhere the deprecated global `-f N` for `--forks`. Nothing after `--` is touched:
that belongs to the user's job.
"""

from __future__ import annotations

from typing import Any


def hoist_global_options(args: list[str], root: Any) -> list[str]:
    root_opts = _option_arity(root)
    leaf, path_end = _leaf_command(args, root, root_opts)
    if leaf is root:
        return args
    leaf_arity = _option_arity(leaf)
    leaf_names = set(leaf_arity)
    # A command like `submit` stops parsing options at its first plain word: what follows is
    # the user's own command line (`submit -- python train.py -f 3`) and must stay as it is.
    stops_at_word = not interspersed(leaf)
    head, tail = args[:path_end], args[path_end:]
    hoisted: list[str] = []
    kept: list[str] = []
    index = 0
    while index < len(tail):
        token = tail[index]
        if token == "--" or (stops_at_word and not token.startswith("-")):
            kept.extend(tail[index:])
            break
        name, _, inline_value = token.partition("=")
        takes_value = root_opts.get(name)
        if takes_value is not None and name not in leaf_names:
            hoisted.append(token)
            if takes_value and not inline_value and index + 1 < len(tail):
                hoisted.append(tail[index + 1])
                index += 1
        else:
            kept.append(token)
            if leaf_arity.get(name) and not inline_value and index + 1 < len(tail):
                kept.append(tail[index + 1])  # the command's own option value, not a word
                index += 1
        index += 1
    return hoisted + head + kept if hoisted else args


def interspersed(command: Any) -> bool:
    """Whether the command takes options after its plain words (not `submit`'s argv)."""
    settings = getattr(command, "context_settings", None) or {}
    return bool(settings.get("allow_interspersed_args", True))


def _option_arity(command: Any) -> dict[str, bool]:
    """Option name -> whether it takes a value."""
    arity: dict[str, bool] = {}
    for param in getattr(command, "params", []):
        if getattr(param, "param_type_name", "") != "option":
            continue
        takes_value = not (getattr(param, "is_flag", False) or getattr(param, "count", False))
        for name in (*param.opts, *param.secondary_opts):
            arity[name] = takes_value
    return arity


def _leaf_command(args: list[str], root: Any, root_opts: dict[str, bool]) -> tuple[Any, int]:
    """Walk the sub-command names in args; return the deepest command and where its path ends."""
    command = root
    options = root_opts
    index = path_end = 0
    while index < len(args):
        token = args[index]
        if token == "--":
            break
        if token.startswith("-"):
            name = token.partition("=")[0]
            if options.get(name) and "=" not in token:
                index += 1  # skip the option's value
            index += 1
            continue
        children = getattr(command, "commands", None)
        if not children or token not in children:
            break
        command = children[token]
        options = _option_arity(command)
        index += 1
        path_end = index
    return command, path_end
