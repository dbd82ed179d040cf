"""What tests share beyond fixtures: reading and writing the warehouse's tables directly.

The tool itself never does (every statement it runs is a named ``Warehouse`` method); tests look at rows a
command wrote, or set up rows no command writes, through the warehouse's own connection."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ifsynth.warehouse.store import Warehouse


def query(warehouse: Warehouse, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    return warehouse._sql(sql, params)


def execute(warehouse: Warehouse, sql: str, params: Sequence[Any] | None = None) -> None:
    warehouse._execute(sql, params)
