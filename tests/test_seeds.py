"""Seed sources and seed selection: the built-in set meets its promise, BEIR folders and ir_datasets ids
read the same way, bad sources give one clear error, and selection follows the recipe's rules."""

from __future__ import annotations

import io
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ifsynth.flows import seeds
from ifsynth.flows.recipes.instructir.settings import InstructIRParams
from ifsynth.flows.run.config import resolve
from ifsynth.flows.run.stage import Env
from ifsynth.flows.seeds import open_source, positives_of
from ifsynth.flows.stages.select import Bands, SelectSeeds, candidates
from ifsynth.schemas.errors import SeedError
from ifsynth.schemas.records import StageCounts
from tests.conftest import INSTRUCTIR_SEEDS


def write_beir(root: Path, queries: dict[str, str], docs: dict[str, str], qrels: list[tuple[str, str, int]]) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n" for d, t in docs.items())
    )
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels)
    )
    return root


def test_demo_set_meets_its_promise() -> None:
    source = open_source("demo")
    pairs = list(source.pairs())
    assert len(pairs) >= 40 and len({p.query.query_id for p in pairs}) == len(pairs)
    assert all(len(p.positives) == 1 and 40 <= len(p.positives[0].text.split()) <= 120 for p in pairs)
    positives = {p.positives[0].doc_id for p in pairs}
    noise = [p for p in source.passages() if p.doc_id not in positives]
    assert len(noise) >= 150


def test_instructir_release_seeds_read_as_one_positive_each() -> None:
    pairs = list(open_source(f"beir:{INSTRUCTIR_SEEDS}").pairs())
    assert len(pairs) == 1743 and all(len(p.positives) == 1 for p in pairs)


def test_irds_reads_a_locally_registered_dataset(tmp_path: Path) -> None:
    import ir_datasets

    (tmp_path / "docs.tsv").write_text("d1\tthe moon pulls the sea\nd2\tbread needs yeast\n")
    (tmp_path / "queries.tsv").write_text("q1\twhat causes tides\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq1 0 d2 0\n")
    dataset = ir_datasets.create_dataset(
        docs_tsv=str(tmp_path / "docs.tsv"),
        queries_tsv=str(tmp_path / "queries.tsv"),
        qrels_trec=str(tmp_path / "qrels.txt"),
    )
    ir_datasets.registry.register("ifsynth-test/local", dataset)
    source = open_source("irds:ifsynth-test/local")
    (pair,) = source.pairs()
    assert pair.query.text == "what causes tides" and [p.doc_id for p in pair.positives] == ["d1"]
    assert [p.doc_id for p in source.passages()] == ["d1", "d2"]
    assert [p.doc_id for p in source.positives()] == ["d1"]


def test_positives_are_the_pairs_relevant_passages_once_read_as_the_corpus_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """InstructIR's noise pool: what ``pairs`` holds relevant, without holding the judged passages."""
    docs = {f"d{i}": f"passage {i}" for i in range(6)}
    qrels = [("q1", "d1", 1), ("q1", "d2", 0), ("q2", "d1", 2), ("q2", "d3", 1), ("q3", "d4", 1), ("q4", "d5", 0)]
    folder = write_beir(tmp_path, {"q1": "a", "q2": "b", "q3": " ", "q4": "d"}, docs, qrels)
    source = open_source(f"beir:{folder}")
    expected = [p.doc_id for p in positives_of(source.pairs())]
    assert expected == ["d1", "d3"]  # q3 has no text, d2 and d5 are judged non-relevant
    assert [p.doc_id for p in source.positives()] == expected
    read: list[str] = []
    jsonl = seeds._jsonl

    def counted(path: Path, *args: Any, **kwargs: Any) -> Iterator[Any]:
        for row in jsonl(path, *args, **kwargs):
            read.append(path.name)
            yield row

    monkeypatch.setattr(seeds, "_jsonl", counted)
    first = next(source.positives())
    assert first.doc_id == "d1" and read.count("corpus.jsonl") == 2, "yielded as the corpus is read"


def test_pairs_read_each_judged_passage_when_its_query_comes_by_where_its_line_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A BEIR folder's pairs hold the judged passages' byte offsets, not the passages: what is read back is the
    passage, past multi-byte text, Windows line ends and blank lines; the qrels' last grade of a pair wins."""
    docs = {"d1": "marée ☾ " * 40, "d2": "pain", "d3": "surf", "d4": "moon"}
    qrels = [("q1", "d1", 0), ("q1", "d2", 0), ("q1", "d1", 2), ("q2", "d3", 1), ("q2", "d4", 1), ("q2", "d9", 1)]
    qrels.append(("q0", "d4", 1))  # a query without text: no pair, so its passage is not read
    folder = write_beir(tmp_path, {"q0": " ", "q1": "tides", "q2": "surf"}, docs, qrels)
    lines = [json.dumps({"_id": d, "title": "", "text": t}, ensure_ascii=False) for d, t in docs.items()]
    lines.insert(2, "")  # a blank line between d2 and d3
    corpus = folder / "corpus.jsonl"
    corpus.write_bytes("".join(line + "\r\n" for line in lines).encode())  # d1 in 2- and 3-byte UTF-8
    assert len(corpus.read_bytes()) > len(corpus.read_text(encoding="utf-8"))
    made: list[str] = []
    passage = seeds._beir_passage

    def counted(row: dict[str, Any]) -> Any:
        made.append(str(row["_id"]))
        return passage(row)

    monkeypatch.setattr(seeds, "_beir_passage", counted)
    read = open_source(f"beir:{folder}").pairs()
    first = next(read)
    assert made == ["d1", "d2"], "only the first query's passages are made before it is yielded"
    assert [(p.doc_id, p.text, p.grade) for p in first.positives] == [("d1", docs["d1"], 2)]
    assert [(p.doc_id, p.text, p.grade) for p in first.negatives] == [("d2", "pain", 0)]
    (second,) = read
    assert [(p.doc_id, p.text) for p in second.positives] == [("d3", "surf"), ("d4", "moon")], "d9 is no passage"


def test_a_corpus_changed_while_its_pairs_are_read_is_one_error(tmp_path: Path) -> None:
    buffered = max(io.DEFAULT_BUFFER_SIZE, os.stat(tmp_path).st_blksize)  # what a read of d1 may buffer
    docs = {"d1": "moon", "n1": "noise " * buffered, "d2": "surf"}  # d2 past it, read from the file itself
    folder = write_beir(tmp_path, {"q1": "tides", "q2": "waves"}, docs, [("q1", "d1", 1), ("q2", "d2", 1)])
    read = open_source(f"beir:{folder}").pairs()
    assert next(read).positives[0].doc_id == "d1"
    corpus = folder / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "d0", "text": "a passage added first"}) + "\n" + corpus.read_text())
    with pytest.raises(SeedError, match=r"corpus\.jsonl changed while it was read; run the same command again"):
        next(read)


def test_irds_reads_trec_topics_with_their_narrative_and_graded_judgments(tmp_path: Path) -> None:
    import ir_datasets
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TrecQrels, TrecQueries, TsvDocs
    from ir_datasets.util import LocalDownload

    (tmp_path / "docs.tsv").write_text("d1\tthe moon pulls the sea\nd2\tbread needs yeast\nd3\tsurf report\n")
    (tmp_path / "topics.txt").write_text(
        "<top>\n<num> Number: 301\n<title> tides\n<desc> Description:\nWhat causes tides?\n"
        "<narr> Narrative:\nA relevant document explains the cause of tides. Surf reports are not relevant.\n</top>\n"
    )
    (tmp_path / "qrels.txt").write_text("301 0 d1 2\n301 0 d2 0\n301 0 d3 0\n")
    topics = Dataset(
        TsvDocs(LocalDownload(tmp_path / "docs.tsv")),
        TrecQueries(LocalDownload(tmp_path / "topics.txt"), namespace="ifsynth-test"),
        TrecQrels(LocalDownload(tmp_path / "qrels.txt"), {}),
    )
    ir_datasets.registry.register("ifsynth-test/topics", topics)
    (pair,) = open_source("irds:ifsynth-test/topics").pairs()
    assert (pair.query.title, pair.query.description) == ("tides", "What causes tides?")
    assert pair.query.narrative.endswith("Surf reports are not relevant.")
    assert [(p.doc_id, p.grade) for p in pair.positives] == [("d1", 2)]
    assert [(p.doc_id, p.grade) for p in pair.negatives] == [("d2", 0), ("d3", 0)]


def test_a_beir_folder_carries_topic_fields_in_query_metadata(tmp_path: Path) -> None:
    root = write_beir(
        tmp_path / "b", {"q1": "what causes tides"}, {"d1": "moon", "d2": "bread"}, [("q1", "d1", 1), ("q1", "d2", 0)]
    )
    row = {"_id": "q1", "text": "what causes tides", "metadata": {"title": "tides", "narrative": "Explain tides."}}
    (root / "queries.jsonl").write_text(json.dumps(row) + "\n")
    (pair,) = open_source(f"beir:{root}").pairs()
    assert (pair.query.title, pair.query.narrative, pair.query.description) == ("tides", "Explain tides.", "")
    assert [p.doc_id for p in pair.negatives] == ["d2"]
    assert pair.query.metadata == row["metadata"], "the rest of the metadata rides along for the recipes"


def test_a_fractional_positive_score_stays_relevant(tmp_path: Path) -> None:
    root = write_beir(
        tmp_path / "b", {"q1": "tides"}, {"d1": "moon", "d2": "bread"}, [("q1", "d1", 1), ("q1", "d2", 0)]
    )
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t0.5\nq1\td2\t0\n")
    (pair,) = open_source(f"beir:{root}").pairs()
    assert [(p.doc_id, p.grade) for p in pair.positives] == [("d1", 1)]


def test_irds_data_that_cannot_be_had_is_one_error(tmp_path: Path) -> None:
    import ir_datasets
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TrecQrels, TsvDocs, TsvQueries
    from ir_datasets.util import LocalDownload

    missing = tmp_path / "never-downloaded.tsv"
    ir_datasets.registry.register(
        "ifsynth-test/missing",
        Dataset(TsvDocs(LocalDownload(missing)), TsvQueries(LocalDownload(missing)),
                TrecQrels(LocalDownload(missing), {1: "yes"})),
    )  # fmt: skip
    with pytest.raises(SeedError, match="not available on this machine") as caught:
        list(open_source("irds:ifsynth-test/missing").pairs())
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("spec, message", [
    ("nothing", "unknown seed source"), ("beir:/no/such/dir", "missing corpus.jsonl"),
    ("irds:ifsynth-test/absent", "has no dataset"),
])  # fmt: skip
def test_bad_sources(spec: str, message: str) -> None:
    with pytest.raises(SeedError, match=message):
        open_source(spec)


def test_a_broken_line_names_file_and_line(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "b", {"q1": "x"}, {"d1": "y"}, [("q1", "d1", 1)])
    with (root / "corpus.jsonl").open("a") as corpus:
        corpus.write("{not json\n")
    with pytest.raises(SeedError, match=r"corpus\.jsonl line 2"):
        list(open_source(f"beir:{root}").pairs())


Selected = tuple[StageCounts, set[str], list[dict]]


def select(root: Path, *sets: str, limit: int | None = None) -> Selected:
    """Seed selection alone on a BEIR folder, through its halves: its counts, the query ids kept and the
    rejections."""
    config = resolve("instructir", seeds=f"beir:{root}", base_url="http://127.0.0.1:9/v1", model="m", limit=limit,
                     sets=["length_unit=words", *sets])  # fmt: skip
    params = InstructIRParams.model_validate(config.params)
    source = open_source(config.seeds)
    stage = SelectSeeds(bands=Bands.of(source.pairs(), params)[0])
    run = Env("r", "instructir", "select", params)
    pages = candidates(source.pairs, stage.bands, params, limit)
    outcomes = [outcome for page in pages for _, outcome in stage.decide(run, page)]
    decisions = Counter(o.decision for o in outcomes)
    counts = StageCounts(stage="select", n_in=len(outcomes), n_out=decisions["pass"], set_aside=decisions["set_aside"],
                         rejected=decisions["reject"])  # fmt: skip
    kept = {i.payload["query_id"] for o in outcomes if o.decision == "pass" for i in o.items}
    verdicts = sorted((v for o in outcomes for v in o.verdicts if v.decision == "reject"), key=lambda v: v.item_id)
    return counts, kept, [{"item_id": v.item_id, "reason": v.reason} for v in verdicts]


def test_selection_bands_one_positive_and_a_stable_sample(tmp_path: Path) -> None:
    queries = {f"q{i}": "w " * i for i in range(1, 21)}  # query lengths 1..20 words
    docs = {f"d{i}": "p " * 50 for i in range(1, 21)} | {"extra": "p " * 50}
    qrels = [(f"q{i}", f"d{i}", 1) for i in range(1, 21)] + [("q10", "extra", 1)]
    root = write_beir(tmp_path / "seeds", queries, docs, qrels)

    def chosen() -> tuple[set[str], list[dict]]:
        counts, kept, rejected = select(root, "passage_band=inside", limit=4)
        assert (counts.n_in, counts.n_out, counts.set_aside, counts.rejected) == (20, 4, 5, 11), "every seed counted"
        return kept, rejected

    kept, rejected = chosen()
    # Percentiles 25..75 of 1..20 words are 5.75..15.25: queries of 6..15 words pass, q10 has two positives.
    assert all(6 <= int(q[1:]) <= 15 and q != "q10" for q in kept)
    assert any("2 judged positives" in r["reason"] for r in rejected)
    assert any("outside the 25-75 percentile band [5.75, 15.25]" in r["reason"] for r in rejected)
    assert chosen() == (kept, rejected)


def test_passages_are_kept_outside_their_band_by_default_as_the_release_kept_them(tmp_path: Path) -> None:
    queries = {f"q{i}": "w w w" for i in range(1, 21)}
    docs = {f"d{i}": "p " * i for i in range(1, 21)}  # passage lengths 1..20 words, band [5.75, 15.25]
    root = write_beir(tmp_path / "seeds", queries, docs, [(f"q{i}", f"d{i}", 1) for i in range(1, 21)])
    _, outside, rejected = select(root)
    assert outside == {f"q{i}" for i in (*range(1, 6), *range(16, 21))}
    assert "passage length 6 words inside the 25-75 percentile band [5.75, 15.25]" in {r["reason"] for r in rejected}
    _, inside, _ = select(root, "passage_band=inside")
    assert inside == {f"q{i}" for i in range(6, 16)}


def test_the_release_seeds_have_no_passage_in_the_papers_band() -> None:
    """The fact behind the default band: the paper's 255-371 characters is where the release kept nothing."""
    lengths = [len(p.text) for p in open_source(f"beir:{INSTRUCTIR_SEEDS}").passages()]
    assert len(lengths) == 1743 and not [n for n in lengths if 255 <= n <= 371]
    assert (sum(n < 255 for n in lengths), sum(n > 371 for n in lengths)) == (820, 923)


def test_the_release_seeds_are_all_drawn_once_declared_already_selected() -> None:
    """InstructIR's released seeds are its selection's output: bands computed on them again take most away, which a
    run says; ``select=already_selected`` keeps every one of the 1,743."""
    root = INSTRUCTIR_SEEDS
    counts, kept, _ = select(root, "length_unit=chars", "select=already_selected")
    assert (counts.n_in, counts.n_out, counts.rejected, len(kept)) == (1743, 1743, 0, 1743)
    banded, _, rejected = select(root, "length_unit=chars")
    # one verdict per rule a seed breaks: a seed too short and too long in two places has two
    assert banded.n_out < 1743 / 2 and len({r["item_id"] for r in rejected}) == 1743 - banded.n_out
    params = InstructIRParams()
    source = open_source(f"beir:{root}")
    notes: list[str] = []
    list(candidates(source.pairs, Bands.of(source.pairs(), params)[0], params, None, notes.append))
    assert notes == [
        f"select: the length bands reject {1743 - banded.n_out:,} of 1,743 seeds with one positive; seeds selected "
        "already (InstructIR's filtered_version) take --set select=already_selected"
    ]
