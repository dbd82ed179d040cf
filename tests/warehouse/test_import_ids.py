"""An import is held to the rule seeds are: an id with a tab or a newline (it would break the TSV and TREC
files made from it), or an ``_id`` that comes again with other text (it would replace a judged passage), is
refused in one line naming the file and the line; nothing is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ifsynth.flows.run.exports import import_release
from ifsynth.schemas.errors import ImportFailed
from ifsynth.warehouse.store import Warehouse
from tests.conftest import REPO

DEMO = REPO / "flows" / "demo_seeds"


def edited(tmp_path: Path, name: str, edit: str) -> Path:
    """A copy of the demo BEIR folder whose file ``name`` has ``edit`` done to it."""
    folder = tmp_path / "release"
    shutil.copytree(DEMO, folder, ignore=shutil.ignore_patterns("followir", "ifir", "infosearch"))
    rows = [json.loads(line) for line in (folder / name).read_text().splitlines() if line.strip()]
    if edit == "tab":
        rows[1]["_id"] = rows[1]["_id"][:2] + "\t" + rows[1]["_id"][2:]
    elif edit == "newline":
        rows[1]["_id"] = rows[1]["_id"] + "\n"
    else:
        rows.append({**rows[0], "text": rows[0]["text"] + (" and more" if edit == "other text" else "")})
    (folder / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


@pytest.mark.parametrize("name, edit, said", [
    ("queries.jsonl", "tab", "`queries.jsonl` line 2: _id `"),
    ("corpus.jsonl", "newline", "`corpus.jsonl` line 2: _id `"),
    ("corpus.jsonl", "other text", "comes again with other content (first on line 1)"),
])  # fmt: skip
def test_an_import_with_a_bad_id_is_refused_in_one_line(tmp_path: Path, name: str, edit: str, said: str) -> None:
    folder = edited(tmp_path, name, edit)
    with Warehouse(tmp_path / "w.duckdb") as warehouse:
        with pytest.raises(ImportFailed) as refused:
            import_release(warehouse, "beir", folder, name="bad")
        assert not warehouse.has_release("bad")
    message = str(refused.value)
    assert said in message and "\n" not in message and "\t" not in message
    assert edit not in ("tab", "newline") or "holds whitespace" in message


def test_a_row_that_repeats_as_it_is_imports_once(tmp_path: Path) -> None:
    folder = edited(tmp_path, "corpus.jsonl", "same row")
    with Warehouse(tmp_path / "w.duckdb") as warehouse:
        report = import_release(warehouse, "beir", folder, name="ok")
    lines = [line for line in (DEMO / "corpus.jsonl").read_text().splitlines() if line.strip()]
    assert report["counts"]["corpus"] == len(lines)
