"""Rendering: one data value, many formats.

Every command builds (a) the structured value it would give a machine and (b) rows for people,
then calls emit(). JSON/YAML carry the structured value; CSV and tables carry the rows.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpupoolctl.cli.settings import OutputFormat, Settings


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    justify: str = "left"  # "left" | "right"


def emit(
    settings: Settings,
    *,
    data: Any,
    rows: Sequence[dict[str, Any]],
    columns: Sequence[Column],
    title: str | None = None,
    csv_columns: Sequence[Column] | None = None,
) -> None:
    """Write `data` (json/yaml) or `rows` (csv/table) to stdout in the chosen format.

    `csv_columns` lets CSV carry raw numbers where the table shows friendly text.
    """
    fmt = settings.resolved_output()
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
    elif fmt is OutputFormat.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
    elif fmt is OutputFormat.csv:
        write_csv(rows, csv_columns or columns)
    else:
        table(settings, rows, columns, title=title)


def write_csv(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow([c.key for c in columns])
    for row in rows:
        writer.writerow([_plain(row.get(c.key)) for c in columns])


def table(
    settings: Settings,
    rows: Sequence[dict[str, Any]],
    columns: Sequence[Column],
    *,
    title: str | None = None,
) -> None:
    if settings.rich_tables:
        from rich.table import Table

        from gpupoolctl.cli.console import out_console

        rich_table = Table(title=title, title_justify="left", header_style="bold")
        for column in columns:
            rich_table.add_column(column.header, justify=column.justify)  # type: ignore[arg-type]
        for row in rows:
            rich_table.add_row(*(_plain(row.get(c.key)) for c in columns))
        out_console().print(rich_table)
        return
    if title:
        sys.stdout.write(f"{title}\n")
    body = [[_plain(row.get(c.key)) for c in columns] for row in rows]
    align = [("right" if c.justify == "right" else "left") for c in columns]
    headers = [c.header for c in columns]
    text = plain_table(headers, body, align)
    if text is None:
        from tabulate import tabulate

        text = tabulate(
            body, headers=headers, tablefmt="plain", colalign=align, disable_numparse=True
        )
    sys.stdout.write(text + "\n")


def _simple(text: str) -> bool:
    """Printable ASCII only: no wide, combining or control characters, no escapes."""
    return text.isascii() and text.isprintable()


def plain_table(
    headers: Sequence[str], body: Sequence[Sequence[str]], align: Sequence[str]
) -> str | None:
    """The text tabulate(..., tablefmt="plain", colalign=align, disable_numparse=True) gives,
    for tables of printable ASCII only (None for any other: tabulate then, as before).

    tabulate and the modules it imports cost 25-40 ms of start-up; a command's table is
    usually plain words and numbers. Each column is as wide as its longest cell or its header
    plus two, cells without their surrounding spaces, columns two spaces apart, lines
    without trailing spaces (tests/unit/test_cli_render_plain.py compares with tabulate).
    """
    if len(align) != len(headers) or any(len(row) != len(headers) for row in body):
        return None
    if not all(_simple(h) and h == h.strip() for h in headers):
        return None
    if not all(_simple(cell) for row in body for cell in row):
        return None
    columns = [[cell.strip() for cell in column] for column in zip(*body, strict=True)]
    if not body:  # headers only: tabulate aligns them all left then
        return "  ".join(header.ljust(len(header) + 2) for header in headers).rstrip()
    widths = [
        max([len(header) + 2, *map(len, column)])
        for header, column in zip(headers, columns, strict=True)
    ]
    right = [a == "right" for a in align]

    def line(cells: Sequence[str]) -> str:
        padded = (
            cell.rjust(width) if r else cell.ljust(width)
            for cell, width, r in zip(cells, widths, right, strict=True)
        )
        return "  ".join(padded).rstrip()

    return "\n".join([line(headers), *(line(row) for row in zip(*columns, strict=True))])


def _plain(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ",".join(_plain(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)
