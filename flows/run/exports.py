"""Export and import by format name: a format a release's recipe declares (its ``Recipe.exports`` and
``imports``) or one every release takes, with the card facts the recipe declares. The warehouse reads and
writes; this module only finds the code the recipe names, which the warehouse may not import."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ifsynth.flows.run.registry import card_facts, importers, recipes, writer
from ifsynth.schemas.errors import ImportFailed, WarehouseError
from ifsynth.warehouse import export as exporting
from ifsynth.warehouse import imports
from ifsynth.warehouse.store import Warehouse


def export_formats() -> tuple[str, ...]:
    """Every export format: those every release takes, then the recipes' own."""
    own = (fmt for declared in recipes().values() for fmt in declared.exports)
    return tuple(dict.fromkeys((*exporting.GENERIC, *own)))


def import_formats() -> tuple[str, ...]:
    return tuple(dict.fromkeys((*imports.READERS, *importers())))


def export(
    warehouse: Warehouse,
    release: str,
    fmt: str,
    out: str | Path,
    *,
    options: Mapping[str, str] | None = None,
    overwrite: bool = False,
    endpoints: bool = False,
) -> exporting.Written:
    """Write ``release`` as ``fmt``: its recipe's own writer of that name, else the generic one; a format only
    other recipes declare is refused, naming them."""
    recipe = exporting.recipe_of(warehouse, release)
    chosen = writer(recipe, fmt) if recipe in recipes() else None
    if chosen is None and fmt not in exporting.GENERIC:
        owners = [name for name, declared in recipes().items() if fmt in declared.exports]
        if not owners:
            raise WarehouseError(f"unknown export format `{fmt}`; known: {', '.join(export_formats())}")
        raise WarehouseError(f"--format {fmt} is for {' and '.join(owners)} releases; release {release} is {recipe}")
    return exporting.export(
        warehouse,
        release,
        chosen or exporting.GENERIC[fmt],
        out,
        facts=card_facts(recipe),
        options=options,
        overwrite=overwrite,
        endpoints=endpoints,
    )


def import_release(warehouse: Warehouse, fmt: str, directory: str | Path, name: str | None = None) -> dict[str, Any]:
    """Read ``directory`` as ``fmt`` (a recipe's layout, or BEIR) into the release ``name``."""
    declared = importers()
    if fmt not in declared and fmt not in imports.READERS:
        raise ImportFailed(f"unknown import format `{fmt}`; known: {', '.join(import_formats())}")
    reader = declared[fmt][1] if fmt in declared else imports.READERS[fmt]
    return imports.import_release(warehouse, fmt, reader, directory, name)
