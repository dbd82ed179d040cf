"""``export --overwrite`` replaces an earlier export and nothing else: a folder holding a warehouse, or any file
no export wrote, is refused in one line and keeps every file; export folders get the usual permissions."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from ifsynth.flows.run.exports import export, import_release
from ifsynth.schemas.errors import WarehouseError
from ifsynth.warehouse.export import withdraw
from ifsynth.warehouse.store import Warehouse
from tests.conftest import REPO

DEMO = REPO / "flows" / "demo_seeds"


@pytest.fixture
def warehouse(tmp_path: Path) -> Iterator[Warehouse]:
    with Warehouse(tmp_path / "data" / "w.duckdb") as opened:
        import_release(opened, "beir", DEMO, name="demo")
        yield opened


def test_overwrite_never_deletes_a_folder_holding_the_warehouse(warehouse: Warehouse, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "notes.txt").write_text("mine")
    before = sorted(p.name for p in data.iterdir())
    with pytest.raises(WarehouseError) as refused:
        export(warehouse, "demo", "beir", data, overwrite=True)
    assert "which no export wrote" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert sorted(p.name for p in data.iterdir()) == before and (data / "notes.txt").read_text() == "mine"
    assert warehouse.has_release("demo"), "the warehouse is still there and still answers"


def test_overwrite_replaces_an_earlier_export_but_not_a_file_put_beside_it(
    warehouse: Warehouse, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    export(warehouse, "demo", "beir", out)
    export(warehouse, "demo", "jsonl", out, overwrite=True)  # an earlier export: replaced
    assert (out / "instances.jsonl").exists() and not (out / "qrels").exists(), "the beir files went with it"
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(WarehouseError, match=r"`mine\.txt`, which no export wrote"):
        export(warehouse, "demo", "beir", out, overwrite=True)
    assert (out / "mine.txt").read_text() == "keep me"


def test_an_export_folder_has_the_usual_permissions(warehouse: Warehouse, tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        export(warehouse, "demo", "beir", tmp_path / "new" / "out")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "new" / "out").stat().st_mode) == 0o755


def test_withdraw_removes_an_earlier_export_and_its_list_and_nothing_else(warehouse: Warehouse, tmp_path: Path) -> None:
    """What a release with nothing to export does to its folder: an earlier export goes, with the hidden list of
    its files; a folder holding a file no export wrote is refused and kept; a linked folder loses the link only."""
    out = tmp_path / "out"
    withdraw(out, "demo")  # nothing there: nothing to do
    export(warehouse, "demo", "beir", out)
    assert (tmp_path / ".out.ifsynth-export").exists()
    withdraw(out, "demo")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["data"]

    export(warehouse, "demo", "beir", out)
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(WarehouseError, match=r"`mine\.txt`, which no export wrote"):
        withdraw(out, "demo")
    assert (out / "mine.txt").read_text() == "keep me" and (out / "corpus.jsonl").exists()

    target = tmp_path / "target"
    export(warehouse, "demo", "beir", target)
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    with pytest.raises(WarehouseError, match="which no export wrote"):  # no export's list names it
        withdraw(link, "demo")
    (tmp_path / ".link.ifsynth-export").write_text((tmp_path / ".target.ifsynth-export").read_text())
    withdraw(link, "demo")
    assert not link.is_symlink() and (target / "corpus.jsonl").exists(), "the link went, not what it points to"


def test_an_export_that_cannot_take_its_place_leaves_nothing_beside_it(
    warehouse: Warehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--out`` a link to nowhere: the written export cannot be moved there; one line, and no hidden copy of it
    is left beside the link. An earlier export moved aside for a new one that then cannot take its place is put
    back."""
    (tmp_path / "out").symlink_to(tmp_path / "nowhere", target_is_directory=True)
    with pytest.raises(WarehouseError, match=r"cannot export into .*: Not a directory; give another --out"):
        export(warehouse, "demo", "beir", tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "out"]

    earlier = tmp_path / "earlier"
    export(warehouse, "demo", "beir", earlier)
    files = sorted(p.name for p in earlier.iterdir())
    rename = Path.rename

    def refuse_staged(self: Path, target: Path) -> Path:
        if self.name.endswith(".partial"):
            raise OSError(28, "No space left on device")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", refuse_staged)
    with pytest.raises(WarehouseError, match="no space left to export into"):
        export(warehouse, "demo", "beir", earlier, overwrite=True)
    assert sorted(p.name for p in earlier.iterdir()) == files
    assert sorted(p.name for p in tmp_path.iterdir()) == [".earlier.ifsynth-export", "data", "earlier", "out"]
