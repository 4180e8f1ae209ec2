"""Reading a JSON file a user named: bounded, strict, one SourceError for any trouble.

    data = load_json_file(path, "stress result")   # SourceError(path, line, ...) otherwise
    data = loads_json(text, name, "stress result")

The text is read by textfile.read_user_text (size cap, UTF-8, the line of a bad byte).
Nesting deeper than MAX_DEPTH is refused, with its line, before json.loads is asked
(json's C decoder recurses and a file of 100 000 `[` costs a RecursionError); NaN and
Infinity, which Python's json accepts but JSON does not have, are refused with their line;
so is a number too large for a float (1e400); a syntax error names its line and column.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any

from gpupoolctl.errors import SourceError
from gpupoolctl.textfile import read_user_text

__all__ = ["MAX_DEPTH", "load_json_file", "loads_json"]

MAX_DEPTH = 100

# Strings (with their escapes) and brackets: all that nesting depth depends on.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.DOTALL)


def load_json_file(path: str | os.PathLike[str], what: str) -> Any:
    name = os.fspath(path)
    return loads_json(read_user_text(name, what), name, what)


def loads_json(text: str, name: str, what: str) -> Any:
    _check_depth(text, name, what)

    def constant(word: str) -> Any:
        raise _Constant(word)

    def number(word: str) -> float:
        value = float(word)
        if math.isinf(value):  # 1e400: a float would read it as infinity
            raise _Constant(word)
        return value

    try:
        return json.loads(text, parse_constant=constant, parse_float=number)
    except _Constant as exc:
        line, column = _where(text, exc.word)
        raise SourceError(
            name, line, f"expected a finite number, not {exc.word} (column {column})"
        ) from None
    except json.JSONDecodeError as exc:
        raise SourceError(name, exc.lineno, f"not JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:  # belt and braces: _check_depth should have stopped it
        raise SourceError(
            name,
            None,
            f"{what} nested deeper than {MAX_DEPTH} levels; expected at most {MAX_DEPTH}",
        ) from None
    except ValueError:  # an integer of more digits than Python converts (4300)
        raise SourceError(
            name, None, f"expected a number of at most 4300 digits in the {what}"
        ) from None


class _Constant(Exception):
    def __init__(self, word: str) -> None:
        super().__init__(word)
        self.word = word


def _check_depth(text: str, name: str, what: str) -> None:
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    depth = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                line = text.count("\n", 0, match.start()) + 1
                raise SourceError(
                    name,
                    line,
                    f"{what} nested deeper than {MAX_DEPTH} levels; expected at most {MAX_DEPTH}",
                )
        elif token in "]}":
            depth -= 1


def _where(text: str, word: str) -> tuple[int | None, int | None]:
    # The first occurrence outside a string; good enough to point a person at it.
    for match in re.finditer(r'"(?:[^"\\]|\\.)*"|' + re.escape(word), text):
        if match.group() == word:
            start = match.start()
            line = text.count("\n", 0, start) + 1
            return line, start - (text.rfind("\n", 0, start) + 1) + 1
    return None, None
