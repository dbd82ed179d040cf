"""Tables in a narrow terminal: borders go first, then the spare columns; no id or header is ever cut."""

from __future__ import annotations

import io

from rich.console import Console

from ifsynth.flows.cli.tables import Col, fitted

COLUMNS = [Col("run"), Col("recipe", spare=1), Col("status"), Col("started", spare=2), Col("note", text=True)]
ROWS = [["instructir-20261125-173125-fa3d", "instructir", "completed", "2026-11-25 17:31", "a long note " * 6]]


def rendered(width: int) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(fitted(console, COLUMNS, ROWS))
    return console.export_text().splitlines()


def test_a_wide_terminal_keeps_every_column_with_borders() -> None:
    lines = rendered(200)
    assert lines[0].startswith("┏") and all(c.header in lines[1] for c in COLUMNS)


def test_a_narrow_terminal_drops_borders_then_spare_columns_in_order_and_cuts_nothing() -> None:
    for width, kept in ((100, {"recipe", "started"}), (90, {"started"}), (80, set())):
        lines = rendered(width)
        shown = set(lines[0].split())
        assert max(map(len, lines)) <= width and "┏" not in lines[0], lines
        assert shown & {"recipe", "started"} == kept and {"run", "status", "note"} <= shown, (width, lines)
        assert ROWS[0][0] in lines[2] and "…" not in "".join(lines)


def test_columns_empty_in_every_row_are_left_out() -> None:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(fitted(console, [Col("run"), Col("name")], [["r1", ""], ["r2", ""]]))
    assert "name" not in console.export_text()
