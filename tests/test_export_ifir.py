"""IFIR's public layout, both ways, on a release written as the recipe writes one: fiqa query 1 keeps fewer of its
three passages at each level, fiqa query 10 has level 1 only, scifact_open query 5 lost level 3. Exporting,
importing and exporting again gives the same rows and the same bytes."""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import DatasetCard

from ifsynth.flows.run.exports import export, import_release
from ifsynth.schemas.errors import ImportFailed, WarehouseError
from ifsynth.warehouse import export as export_module
from ifsynth.warehouse.store import Warehouse
from tests.helpers import query

DOMAIN = {"fiqa": "finance", "scifact_open": "science"}
# subset -> seed passage id -> (title, text); "20" and "9" are relevant to no query
PASSAGES = {
    "fiqa": {"3": ("Roth", "Roth IRA limits"), "7": ("", "Index funds – a primer"), "12": ("Tax", "Capital gains"),
             "20": ("", "Unrelated")},
    "scifact_open": {"40": ("", "Aspirin lowers risk"), "41": ("Trial", "Aspirin raises risk"), "9": ("", "Noise")},
}  # fmt: skip
# (subset, seed query id, text, originally relevant seed passages in seed order, passages kept per level present)
QUERIES = [
    ("fiqa", "1", "Where should I invest?", ["7", "3", "12"], [{"7", "3", "12"}, {"7", "12"}, {"12"}]),
    ("fiqa", "10", "Is a Roth worth it?", ["3"], [{"3"}]),
    ("scifact_open", "5", "Aspirin prevents strokes.", ["40", "41"], [{"40", "41"}, {"41"}]),
]
COUNTS = {"queries": 3, "instances": 3, "corpus": 7, "qrels": 10, "top_ranked": 0}


def meta(**fields: Any) -> str:
    return json.dumps(fields, sort_keys=True)


def rows() -> dict[str, list[dict[str, Any]]]:
    """The release rows as the recipe writes them."""
    docs = [
        {"doc_id": f"{subset}-{seed}", "title": title, "text": text,
         "meta": meta(domain=DOMAIN[subset], subset=subset, seed_doc_id=seed)}
        for subset, passages in PASSAGES.items()
        for seed, (title, text) in passages.items()
    ]  # fmt: skip
    queries, qrels = [], []
    for subset, seed, text, relevant, levels in QUERIES:
        query_id = f"{subset}-{seed}"
        for level, kept in enumerate(levels, start=1):
            mode = f"level{level}"
            fields = {"domain": DOMAIN[subset], "subset": subset, "level": level, "seed_query_id": seed,
                      "relevant": [f"{subset}-{d}" for d in relevant], "item": f"item-{query_id}-{level}"}  # fmt: skip
            queries.append({"mode": mode, "query_id": query_id, "group_id": query_id, "query": text,
                            "instruction": f"Level {level} of {query_id}.", "meta": meta(**fields)})  # fmt: skip
            qrels += [{"mode": mode, "query_id": query_id, "doc_id": f"{subset}-{d}", "score": 1} for d in sorted(kept)]
    return {"docs": docs, "queries": queries, "qrels": qrels}


@pytest.fixture
def wh(tmp_path: Path) -> Iterator[Warehouse]:
    with Warehouse(tmp_path / "w.duckdb") as warehouse:
        card = {"recipe": "ifir", "counts": COUNTS}
        warehouse.write_release(name="orig", run_id=None, recipe="ifir", source="seeds", card=card, **rows())
        yield warehouse


def stored(wh: Warehouse, release: str) -> dict[str, list[tuple[Any, ...]]]:
    tables = {
        "docs": "SELECT doc_id, title, text, meta FROM release_docs WHERE release = ? ORDER BY ALL",
        "queries": "SELECT mode, query_id, group_id, query, instruction, meta FROM release_queries "
        "WHERE release = ? ORDER BY ALL",
        "qrels": "SELECT mode, query_id, doc_id, score FROM release_qrels WHERE release = ? ORDER BY ALL",
    }
    return {name: [tuple(row.values()) for row in query(wh, sql, [release])] for name, sql in tables.items()}


def data_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_export_is_ifirs_layout(wh: Warehouse, tmp_path: Path) -> None:
    out = tmp_path / "ifir"
    export(wh, "orig", "ifir", out)
    names = ("corpus.jsonl", "query.jsonl", "qrel.tsv")
    assert sorted(data_files(out)) == sorted(
        ["README.md"] + [f"{s}/test_data.json" for s in PASSAGES] + [f"{s}/{s}-{n}" for s in PASSAGES for n in names]
    )
    card = DatasetCard.load(out / "README.md")
    assert card.text.startswith("\n# ifir release")
    assert card.data.to_dict()["configs"][0]["config_name"] == "fiqa-corpus"
    corpus = [json.loads(line) for line in (out / "fiqa" / "fiqa-corpus.jsonl").read_text().splitlines()]
    assert [row["_id"] for row in corpus] == ["12", "20", "3", "7"]
    assert corpus[3] == {"_id": "7", "title": "", "text": "Index funds – a primer"}
    # IFIR's BEIR scripts: `<seed id>_<level>`, level 0 the query alone, a level its query and instruction
    assert (out / "fiqa" / "fiqa-query.jsonl").read_text().splitlines()[:2] == [
        '{"_id": "1_0", "text": "Where should I invest?"}',
        '{"_id": "1_1", "text": "Where should I invest? Level 1 of fiqa-1."}',
    ]
    qrels = (out / "fiqa" / "fiqa-qrel.tsv").read_text().splitlines()
    assert qrels[0] == "query-id\tcorpus-id\tscore"
    assert [row for row in qrels if row.startswith("1_0\t")] == ["1_0\t7\t1", "1_0\t3\t1", "1_0\t12\t1"]
    assert [row for row in qrels if row.startswith("1_3\t")] == ["1_3\t12\t1"], "level 3 keeps rel [2]"

    raw = (out / "fiqa" / "test_data.json").read_text(encoding="utf-8")
    assert raw.startswith('[\n {\n  "_id": "1",') and "funds – a" in raw, "indent 1, non-ASCII kept"
    fiqa = json.loads(raw)
    assert [row["_id"] for row in fiqa] == ["1", "10"]
    assert fiqa[0]["text"] == "Where should I invest?"
    assert [p["_id"] for p in fiqa[0]["corpus"]] == ["7", "3", "12"], "the seed order of the relevant passages"
    assert fiqa[0]["corpus"][2] == {"_id": "12", "title": "Tax", "text": "Capital gains"}
    assert fiqa[0]["instructions"] == [
        {"instruction": "Level 1 of fiqa-1.", "level": 1, "rel": [0, 1, 2], "item": "item-fiqa-1-1"},
        {"instruction": "Level 2 of fiqa-1.", "level": 2, "rel": [0, 2], "item": "item-fiqa-1-2"},
        {"instruction": "Level 3 of fiqa-1.", "level": 3, "rel": [2], "item": "item-fiqa-1-3"},
    ]
    assert [(i["level"], i["rel"]) for i in fiqa[1]["instructions"]] == [(1, [0])]
    (scifact,) = json.loads((out / "scifact_open" / "test_data.json").read_text())
    assert [p["_id"] for p in scifact["corpus"]] == ["40", "41"]
    assert [(i["level"], i["rel"]) for i in scifact["instructions"]] == [(1, [0, 1]), (2, [1])]


def test_import_gives_back_the_rows_and_the_bytes(wh: Warehouse, tmp_path: Path) -> None:
    export(wh, "orig", "ifir", tmp_path / "first")
    report = import_release(wh, "ifir", tmp_path / "first", name="back")
    assert report["recipe"] == "ifir" and report["missing"] == []
    assert report["counts"] == COUNTS
    original, imported = stored(wh, "orig"), stored(wh, "back")
    assert ("level3", "scifact_open-5") not in {q[:2] for q in imported["queries"]}, "the dropped level stays dropped"
    assert imported == original
    export(wh, "back", "ifir", tmp_path / "again")
    first, again = data_files(tmp_path / "first"), data_files(tmp_path / "again")
    del first["README.md"], again["README.md"]
    assert again == first


def test_one_subset_folder_imports_alone(wh: Warehouse, tmp_path: Path) -> None:
    export(wh, "orig", "ifir", tmp_path / "out")
    report = import_release(wh, "ifir", tmp_path / "out" / "scifact_open", name="sci")
    assert report["counts"] == {"queries": 1, "instances": 1, "corpus": 3, "qrels": 3, "top_ranked": 0}
    assert stored(wh, "sci")["queries"] == [q for q in stored(wh, "orig")["queries"] if q[1] == "scifact_open-5"]


def test_beir_gives_one_folder_per_level(wh: Warehouse, tmp_path: Path) -> None:
    out = tmp_path / "beir"
    export(wh, "orig", "beir", out)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "level1", "level2", "level3"]
    ids = {
        level: [json.loads(line)["_id"] for line in (out / level / "queries.jsonl").read_text().splitlines()]
        for level in ("level1", "level2", "level3")
    }
    assert ids == {
        "level1": ["fiqa-1", "fiqa-10", "scifact_open-5"],
        "level2": ["fiqa-1", "scifact_open-5"],
        "level3": ["fiqa-1"],
    }
    assert (out / "level2" / "qrels" / "test.tsv").read_text().splitlines()[1:] == [
        "fiqa-1\tfiqa-12\t1",
        "fiqa-1\tfiqa-7\t1",
        "scifact_open-5\tscifact_open-41\t1",
    ]
    only_query = (out / "level2" / "qrels" / "for_only_query_test.tsv").read_text().splitlines()[1:]
    assert [line.split("\t")[0] for line in only_query] == ["fiqa-1", "fiqa-1", "scifact_open-5"], (
        "the ids of only_queries.jsonl"
    )


@pytest.mark.parametrize("fmt", ["mteb", "jsonl", "parquet"])
def test_the_generic_formats_take_the_release(wh: Warehouse, tmp_path: Path, fmt: str) -> None:
    written = export(wh, "orig", fmt, tmp_path / fmt)
    assert len(written.files) == {"mteb": 13, "jsonl": 3, "parquet": 3}[fmt]


def test_ifir_is_refused_for_another_recipe(wh: Warehouse, tmp_path: Path) -> None:
    wh.write_release(name="other", run_id=None, recipe="instructir", source="seeds", card={}, **rows())
    with pytest.raises(WarehouseError, match="--format ifir is for ifir releases; release other is instructir"):
        export(wh, "other", "ifir", tmp_path / "out")


def test_an_unknown_subset_and_missing_files_are_one_line_errors(wh: Warehouse, tmp_path: Path) -> None:
    export(wh, "orig", "ifir", tmp_path / "out")
    shutil.copytree(tmp_path / "out" / "fiqa", tmp_path / "pub" / "finance")
    with pytest.raises(
        ImportFailed, match="finance` names no IFIR subset; known: fiqa, scifact_open, aila, pm, nfcorpus"
    ):
        import_release(wh, "ifir", tmp_path / "pub", name="x")
    (tmp_path / "out" / "fiqa" / "fiqa-corpus.jsonl").unlink()
    with pytest.raises(ImportFailed, match=r"has no fiqa-corpus\.jsonl"):
        import_release(wh, "ifir", tmp_path / "out", name="x")
    with pytest.raises(ImportFailed, match=r"has no test_data\.json, nor subfolders"):
        import_release(wh, "ifir", tmp_path / "pub" / "finance" / "fiqa-qrel.tsv", name="x")


def test_the_public_single_level_subsets_are_named_as_skipped(wh: Warehouse, tmp_path: Path) -> None:
    export(wh, "orig", "ifir", tmp_path / "out")
    (tmp_path / "out" / "cds").mkdir()
    (tmp_path / "out" / "cds" / "test_data.json").write_text(
        '[{"_id": "1", "text": "a case", "corpus": [], "instructions": []}]'
    )
    report = import_release(wh, "ifir", tmp_path / "out", name="with-cds")
    assert report["counts"] == COUNTS and report["missing"] == [
        "cds/ (a single-level subset; ifsynth models the three-level ones)"
    ]


def test_a_rel_index_past_the_corpus_is_one_line(wh: Warehouse, tmp_path: Path) -> None:
    export(wh, "orig", "ifir", tmp_path / "out")
    data = tmp_path / "out" / "fiqa" / "test_data.json"
    rows = json.loads(data.read_text())
    rows[0]["instructions"][0]["rel"].append(len(rows[0]["corpus"]))
    data.write_text(json.dumps(rows))
    with pytest.raises(ImportFailed, match="rel indexes past its corpus"):
        import_release(wh, "ifir", tmp_path / "out", name="bad")


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (errno.ENOSPC, "no space left to export into `{out}`: free space on the disk of {parent}"),
        (errno.EROFS, "cannot write into {parent} (Read-only file system): give an --out in a folder you may write"),
    ],
)
def test_an_export_that_cannot_be_written_is_one_line(
    wh: Warehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, said: str
) -> None:
    """The disk full or the folder read-only (injected: as root, permissions do not refuse): a WarehouseError
    that says what to do, and the folder's earlier export stays."""
    out = tmp_path / "out"
    export(wh, "orig", "jsonl", out)
    before = sorted(out.iterdir())

    def fail(*_: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(export_module, "_card", fail)  # the last file an export writes
    with pytest.raises(WarehouseError) as refused:
        export(wh, "orig", "jsonl", out, overwrite=True)
    assert str(refused.value).startswith(said.format(out=out, parent=tmp_path))
    assert sorted(out.iterdir()) == before


@pytest.mark.parametrize("out", [".", "..", "sub/.."])
def test_an_export_into_the_folder_one_is_in_is_refused(
    wh: Warehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out: str
) -> None:
    """An export replaces its folder whole: never the current one or a parent, whatever --overwrite says."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "keep.txt").write_text("mine")
    monkeypatch.chdir(tmp_path / "sub")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(WarehouseError, match=r"names no folder of its own \(an export replaces its folder whole\)"):
        export(wh, "orig", "jsonl", Path(out), overwrite=True)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
