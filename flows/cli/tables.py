"""Tables that stay readable in a narrow terminal (a log, a notebook cell, CI at 80 columns).

A table keeps rich's default look when it fits the console; otherwise it drops its borders, then the columns
it can spare (in the order given: a run's recipe and start are in its id), so ids are never split and no header
is cut. Text columns wrap at words within a floor of ``TEXT_MIN`` characters. ``--json`` stays the machine
format; these are for people.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Column, Table

TEXT_MIN = 20


@dataclass(frozen=True)
class Col:
    """A column: ``spare`` ranks it among those a narrow table drops (1 first; 0 never), ``text`` lets it wrap."""

    header: str
    spare: int = 0
    text: bool = False
    justify: Literal["left", "right"] = "left"


def fitted(console: Console, columns: Sequence[Col], rows: Sequence[Sequence[str]]) -> Table:
    """The widest layout of these rows that fits the console: every column with borders, then without, then
    without the spare columns one by one. Columns empty in every row are left out."""
    shown = [n for n, col in enumerate(columns) if not rows or any(row[n] for row in rows)]
    spare = sorted((n for n in shown if columns[n].spare), key=lambda n: columns[n].spare)
    layouts = [(True, shown), (False, shown)]
    for n in spare:
        shown = [m for m in shown if m != n]
        layouts.append((False, shown))
    for bordered, kept in layouts:
        if _needs(bordered, [columns[n] for n in kept], [[row[n] for n in kept] for row in rows]) <= console.width:
            break
    table = Table(
        *(Column(columns[n].header, no_wrap=not columns[n].text, justify=columns[n].justify) for n in kept),
        box=box.HEAVY_HEAD if bordered else box.SIMPLE_HEAD,
        show_edge=bordered,
        pad_edge=bordered,
    )
    for row in rows:
        table.add_row(*(row[n] for n in kept))
    return table


def _needs(bordered: bool, columns: Sequence[Col], rows: Sequence[Sequence[str]]) -> int:
    """The width a layout takes with no column cut: each column as wide as its widest line (a text column at
    most ``TEXT_MIN``), plus padding and rules."""
    widths = []
    for n, col in enumerate(columns):
        widest = max(cell_len(line) for text in (col.header, *(row[n] for row in rows)) for line in text.split("\n"))
        widths.append(min(widest, TEXT_MIN) if col.text else widest)
    ruling = len(widths) + 1 if bordered else len(widths) - 1
    padding = 2 * len(widths) - (0 if bordered else 2)
    return sum(widths) + ruling + padding
