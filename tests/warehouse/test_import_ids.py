"""An import is held to the rule seeds are: an id with a tab or a newline (it would break the TSV and TREC
files made from it), an ``_id`` that comes again with other text (it would replace a judged passage), or a
qrels line that is no judgement of a query and a passage the folder holds, is refused in one line naming the
file and the line; nothing is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ifsynth.flows.run.exports import import_release
from ifsynth.schemas.errors import ImportFailed
from ifsynth.warehouse.store import Warehouse
from tests.conftest import REPO, invoke
from tests.helpers import query

DEMO = REPO / "flows" / "demo_seeds"


def copied(tmp_path: Path) -> Path:
    """A copy of the demo BEIR folder."""
    folder = tmp_path / "release"
    shutil.copytree(DEMO, folder, ignore=shutil.ignore_patterns("followir", "ifir", "infosearch"))
    return folder


def edited(tmp_path: Path, name: str, edit: str) -> Path:
    """A copy of the demo BEIR folder whose file ``name`` has ``edit`` done to it."""
    folder = copied(tmp_path)
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


def with_qrels(tmp_path: Path, text: str) -> Path:
    """A copy of the demo BEIR folder whose qrels file is ``text``."""
    folder = copied(tmp_path)
    (folder / "qrels" / "test.tsv").write_text(text)
    return folder


HEADER = "query-id\tcorpus-id\tscore\n"


@pytest.mark.parametrize("line, said", [
    ("dq01\tdp001\tabc", "line 2 has a non-numeric score"),
    ("dq01\tdp001", "line 2 needs query-id, corpus-id, score"),
    ("dq01\td9\t1", "line 2 names passage `d9`, which the corpus does not hold"),
    ("q9\tdp001\t1", "line 2 names query `q9`, which the queries do not hold"),
])  # fmt: skip
def test_a_qrels_line_that_is_no_judgement_of_the_folder_is_refused_in_one_line(
    tmp_path: Path, line: str, said: str
) -> None:
    folder = with_qrels(tmp_path, HEADER + line + "\ndq02\tdp002\t1\n")
    warehouse = str(tmp_path / "w.duckdb")
    done = invoke("--warehouse", warehouse, "import", "beir", str(folder), "--name", "bad")
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr == f"error: `release/qrels/test.tsv` {said}\n"
    assert "no release `bad`" in invoke("--warehouse", warehouse, "stats", "bad").stderr, "nothing was written"


def test_qrels_scores_are_graded_as_seeds_are_and_only_a_header_is_passed_over(tmp_path: Path) -> None:
    """A fractional positive score stays relevant (``run --seeds beir:`` reads it so), not cut to the grade below;
    a file without a header loses no judgement."""
    folder = with_qrels(tmp_path, "dq01\tdp001\t0.5\ndq02\tdp002\t1.5\ndq03\tdp003\t0\n")
    with Warehouse(tmp_path / "w.duckdb") as warehouse:
        import_release(warehouse, "beir", folder, name="graded")
        rows = query(warehouse, "SELECT query_id, doc_id, score FROM release_qrels ORDER BY query_id")
    assert [(r["query_id"], r["doc_id"], r["score"]) for r in rows] == [
        ("dq01", "dp001", 1), ("dq02", "dp002", 2), ("dq03", "dp003", 0)
    ]  # fmt: skip


@pytest.mark.parametrize("name", ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
def test_a_file_that_is_not_utf8_is_refused_in_one_line(tmp_path: Path, name: str) -> None:
    folder = copied(tmp_path)
    lines = (folder / name).read_bytes().splitlines(keepends=True)
    lines[2] = b"\xe9" + lines[2]  # Latin-1's é
    (folder / name).write_bytes(b"".join(lines))
    done = invoke("--warehouse", str(tmp_path / "w.duckdb"), "import", "beir", str(folder), "--name", "latin")
    said = f"error: `{Path(name).name}` line 3 is not UTF-8 text; save the file as UTF-8"
    assert done.returncode == 2 and done.stderr.strip() == said, done.stderr
