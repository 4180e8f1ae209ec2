"""Option values the common way without pydantic: typer's own coercion where it has to work.

typer (0.29) turns every option value, defaults included, into its Python value through a
pydantic `TypeAdapter`, and imports pydantic (about 90 ms on a 2-core machine, more than
most commands' own work) on the first one. Nearly every value gpupoolctl parses is already
what pydantic would return, or a plain decimal number: for those, `FastCoercion` returns the
very value typer would. Anything else (a value to reject, "1_000", " 8", an unusual type)
goes through typer's own adapter unchanged, so errors and odd spellings behave exactly as
before; it only costs pydantic's import then. tests/unit/test_cli_coerce.py compares both
over many values.

`install(command)` gives each typer parameter of a click command (and of its sub-commands
already built) this coercion, in place of the one typer would build on first use. With a
typer that has no such coercion layer it does nothing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

try:
    from typer._coercion import RuntimeParam, build_runtime_param
    from typer._param_types import coerce_cli_choice, coerce_cli_path, routes_to_path
    from typer.core import _TyperParameter
except ImportError:  # a typer without the pydantic coercion layer: nothing to replace
    RuntimeParam = None  # type: ignore[assignment,misc]

_DIGITS = re.compile(r"[0-9]{1,15}")
_DECIMAL = re.compile(r"[0-9]{1,15}(?:\.[0-9]{1,15})?")


class Declined(Exception):
    """This value is left to typer's own coercion."""


def _in_range(value: int | float, info: Any) -> int | float:
    if info.min is not None and not value >= info.min:
        raise Declined
    if info.max is not None and not value <= info.max:
        raise Declined
    return value


def _number(annotation: type, value: Any, info: Any) -> int | float:
    if info.clamp:
        raise Declined
    kind = type(value)
    if annotation is int:
        if kind is int:
            return _in_range(value, info)
        if kind is str and _DIGITS.fullmatch(value):
            return _in_range(int(value), info)
    elif annotation is float:
        if kind is float and math.isfinite(value):
            return _in_range(value, info)
        if kind is int:
            return _in_range(float(value), info)
        if kind is str and _DECIMAL.fullmatch(value):
            return _in_range(float(value), info)
    raise Declined


def _path(annotation: Any, value: Any, info: Any, param: Any, ctx: Any) -> Any:
    path_type = info.path_type
    if path_type is None and isinstance(annotation, type) and issubclass(annotation, Path):
        path_type = annotation
    if path_type is not None and path_type is not str and path_type is not bytes:
        if path_type is not Path or type(value) is not str or not value:
            raise Declined
        value = Path(value)
    return coerce_cli_path(value, info, path_type=path_type, param=param, ctx=ctx)


def _leaf(annotation: Any, value: Any, info: Any, param: Any, ctx: Any) -> Any:
    """What typer's leaf adapter (typer._adapters.build_leaf_adapter) returns, in its order."""
    if info.parser is not None:
        return info.parser(value)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return coerce_cli_choice(
            value, choices=list(annotation), case_sensitive=info.case_sensitive, ctx=ctx
        )
    if annotation is int or annotation is float:
        return _number(annotation, value, info)
    if annotation is bool:
        if type(value) is bool:
            return value
        raise Declined
    if annotation is str:
        if type(value) is str:
            return value
        raise Declined
    if routes_to_path(annotation, info):
        return _path(annotation, value, info, param, ctx)
    raise Declined


if RuntimeParam is not None:

    @dataclass(frozen=True)
    class FastCoercion(RuntimeParam):
        """The value typer would give, without pydantic when the value is a plain one."""

        # typer's own coercion for this parameter, built only when a value is declined.
        fallback: list[Any] = field(default_factory=list, compare=False, repr=False)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return self._fast(value, param, ctx)
            except Exception:  # typer's own coercion decides, and says why
                pass
            if not self.fallback:
                self.fallback.append(build_runtime_param(param.type_descriptor))
            return self.fallback[0]._coerce_value(value, param=param, ctx=ctx)

        def _fast(self, value: Any, param: Any, ctx: Any) -> Any:
            annotation, info = self.annotation, self.parameter_info
            if get_origin(annotation) is list:
                (item_type,) = get_args(annotation)
                if not isinstance(value, (list, tuple)):
                    raise Declined
                return [_leaf(item_type, item, info, param, ctx) for item in value]
            return _leaf(annotation, value, info, param, ctx)


def install(command: Any) -> Any:
    """Give the command's typer parameters (and its built sub-commands') FastCoercion.

    Parameters are taken as the command parses (`get_params`): typer adds the completion
    options and click the help option after the command is made, and all of them coerce.
    """
    if RuntimeParam is None or getattr(command, "_fast_coercion", False):
        return command
    get_params = command.get_params

    def params_with_fast_coercion(ctx: Any) -> list[Any]:
        params = get_params(ctx)
        for param in params:
            _install(param)
        return params

    command.get_params = params_with_fast_coercion
    command._fast_coercion = True
    commands = getattr(command, "commands", None)
    if isinstance(commands, dict):  # a plain group: the lazy root installs on its own
        for sub in commands.values():
            install(sub)
    return command


def _install(param: Any) -> None:
    if not isinstance(param, _TyperParameter) or param._runtime_param is not None:
        return
    descriptor = param.type_descriptor
    if descriptor.file_annotation is not None or get_origin(descriptor.annotation) is tuple:
        return
    param._runtime_param = FastCoercion(
        parameter_info=descriptor.parameter_info, annotation=descriptor.annotation
    )
