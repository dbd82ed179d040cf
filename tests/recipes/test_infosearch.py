"""The InfoSearch recipe in-process against the fake answering like a sensible model (every core query ends
complete, with the three modes keyed right) and like a sloppy one (the rules reject what they should, and
`ifsynth audit` shows each rejection with its rule and measured value)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ifsynth.flows.recipes.infosearch.settings import DIMENSIONS
from ifsynth.flows.run.config import resolve
from ifsynth.flows.run.exports import export, import_release
from ifsynth.flows.run.runner import execute
from ifsynth.schemas.errors import ConfigError
from ifsynth.warehouse import audit
from ifsynth.warehouse.export import release_for
from ifsynth.warehouse.store import Warehouse
from tests.conftest import REPO, invoke
from tests.fake_openai import FakeOpenAI
from tests.helpers import export_files, query

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server

SEEDS = REPO / "flows" / "demo_seeds" / "infosearch"
CHINESE = "这篇文章用中文完整地回答了这个问题，内容和原文一致。"


def field(text: str, label: str) -> str:
    match = re.search(rf"^{re.escape(label)}: (.*)$", text, re.MULTILINE)
    assert match, f"no `{label}:` line in the prompt"
    return match.group(1)


def target(prompt: str) -> str:
    match = re.search(r"^Target \((.*?)\):", prompt, re.MULTILINE)
    assert match, "no target line in the rewrite prompt"
    return match.group(1)


def _keyword_passages() -> list[str]:
    return [json.loads(line)["text"] for line in (SEEDS / "keyword" / "corpus.jsonl").read_text().splitlines()]


def unique_word(passage: str) -> str:
    """The first long word of the passage that no other keyword seed passage uses: a sensible keyword."""
    others = {w for text in _keyword_passages() if text != passage for w in re.findall(r"[a-z]+", text.lower())}
    return next(w for w in re.findall(r"[a-z]+", passage.lower()) if len(w) >= 7 and w not in others)


def rewrite(condition: str, query: str) -> str:
    return {
        "layman": f"Put simply, here is the answer to {query}, without any jargon.",
        "Chinese": CHINESE,
        "sentence": f"In one sentence, this is the answer to {query}.",
        "article": "\n\n".join(f"Part {n}. " + f"This article answers {query} in detail. " * 15 for n in (1, 2, 3)),
        "blog post": f"{query.title()}\nBy Ana Ruiz, 3 May 2024, Blog, Science\nHere is what I learned.",
        "forum thread": f"river_otter42: anyone know {query}?\nmaple_dev: yes, here is the answer.",
    }[condition]


def sensible(body: dict[str, Any], *, sloppy: bool = False) -> dict[str, Any]:
    """Answers by schema name, reading the prompt like a model that follows it (or, sloppy, a careless one)."""
    name = body["response_format"]["json_schema"]["name"]
    prompt = body["messages"][-1]["content"]
    if name == "KeywordCondition":
        passage = field(prompt, "Passage")
        careless = sloppy and passage.startswith("Sealing drafts")  # `the` is in it and in no sibling
        return {"explanation": "central and specific", "keyword": "the" if careless else unique_word(passage)}
    if name == "Rewrite":
        condition, query = target(prompt), field(prompt, "Query")
        if sloppy and condition == "sentence":
            return {"plan": "shorten", "revised_passage": " ".join(["word"] * 79) + " end."}
        if sloppy and condition == "Chinese":
            return {"plan": "translate", "revised_passage": "This passage is still in English."}
        return {"plan": f"make it a {condition}", "revised_passage": rewrite(condition, query)}
    if name == "RelevanceJudgement":  # rewrites answer; of the two query negatives, the second answers too
        passage = field(prompt, "Passage")
        score = 4 if passage.startswith("Negative 1") else 2 if passage.startswith("Negative") else 5
        return {"explanation": "answers it" if score > 2 else "same topic, no answer", "score": score}
    if name.startswith("QueryNegatives"):
        n, query = int(name.removeprefix("QueryNegatives")), field(prompt, "Query")
        return {"passages": [f"Negative {i}: the history of {query}, which does not answer it." for i in range(n)]}
    if name == "TwoSentenceInstruction":
        query, condition = field(prompt, "Query"), field(prompt, "Condition")
        return {"restated_query": f"I would like to know {query}.", "restriction": f"Only show me a {condition}."}
    if name == "Reversal":
        restriction = field(prompt, "Restriction")
        return {"reversed_restriction": restriction.replace("Only show me", "Do not show me")}
    if name == "NegationJudgement":
        negates = "Do not" in field(prompt, "Reversed")
        return {"explanation": "negated" if negates else "same", "score": 5 if negates else 1}
    raise AssertionError(f"unexpected request {name}")


FAKE = {"mode": "responder", "responder": sensible}  # the module's `server`


def run(server: FakeOpenAI, root: Path, *sets: str, out: str = "") -> dict[str, Any]:
    config = resolve("infosearch", seeds="demo", base_url=server.base_url, model="gen", sets=list(sets))
    warehouse = root / "w.duckdb"
    run_id = execute(config, warehouse).run_id
    with Warehouse(warehouse, read_only=True) as wh:
        export(wh, release_for(wh, run_id), "infosearch", root / f"infosearch{out}")
        export(wh, release_for(wh, run_id), "beir", root / f"beir{out}")
        return {"root": root, "warehouse": warehouse, "run_id": run_id, "funnel": audit.funnel(wh, run_id)}


@pytest.fixture(scope="module")
def good(server: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run(server, tmp_path_factory.mktemp("good"))


@pytest.fixture(scope="module")
def sloppy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with FakeOpenAI(mode="responder", responder=lambda body: sensible(body, sloppy=True)) as fake:
        yield run(
            fake, tmp_path_factory.mktemp("sloppy"), "dimensions=[keyword, language, length]", "translate_language=true"
        )


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def tsv(path: Path) -> list[tuple[str, str, int]]:
    lines = path.read_text().splitlines()
    assert lines[0] == "query-id\tcorpus-id\tscore"
    return [(q, d, int(s)) for q, d, s in (line.split("\t") for line in lines[1:])]


def test_every_core_query_ends_complete_in_every_dimension(good: dict[str, Any]) -> None:
    stages = {s["stage"]: s for s in good["funnel"]["stages"]}
    assert (stages["assemble"]["in"], stages["assemble"]["out"], stages["assemble"]["rejected"]) == (18, 45, 0)
    assert stages["rules"]["rejected"] == 0 and good["funnel"]["accepted"] == 45
    # three negatives per positive (45 positives); the second of each core query answers and is judged out
    assert (stages["judge_negatives"]["out"], stages["judge_negatives"]["rejected"]) == (135 - 18, 18)
    with Warehouse(good["warehouse"], read_only=True) as wh:
        release = release_for(wh, good["run_id"])
        queries = query(wh, "SELECT * FROM release_queries WHERE release = ?", [release])
        qrels = query(wh, "SELECT * FROM release_qrels WHERE release = ?", [release])
        docs = query(wh, "SELECT * FROM release_docs WHERE release = ?", [release])
    cores: dict[str, set[str]] = {}
    for q in queries:
        cores.setdefault(q["group_id"], set()).add(json.loads(q["meta"])["condition"])
    assert len(cores) == 18, "three demo core queries per dimension, all six dimensions"
    for core, conditions in cores.items():
        dimension = core.split("-")[0]
        expected = len(DIMENSIONS[dimension].conditions) or 2
        assert len(conditions) == expected, core
        modes = Counter(q["mode"] for q in queries if q["group_id"] == core)
        assert modes == {"og": expected, "changed": expected, "reversed": expected}, "one reversal per instruction"
        negatives = [d for d in docs if d["doc_id"].startswith(f"{core}_neg")]
        kept = [f"Negative {i}:" for i in range(3 * expected) if i != 1]
        assert [d["text"].split(" the")[0] for d in negatives] == kept, "the negative that answers is judged out"
        assert all(json.loads(d["meta"])["role"] == "query_negative" for d in negatives)
        positives = [d for d in docs if d["doc_id"].startswith(f"{core}_doc")]
        assert len(positives) == expected
    for q in queries:
        if q["mode"] == "changed":
            assert q["instruction"].endswith(f"Only show me a {json.loads(q['meta'])['condition']}.")
        if q["mode"] == "reversed":
            assert q["instruction"] == f"{q['query']}. Do not show me a {json.loads(q['meta'])['condition']}."
    assert all(q["instruction"] == "" for q in queries if q["mode"] == "og")
    assert {(r["mode"], r["score"]) for r in qrels} == {
        ("og", 1),
        ("changed", 0),
        ("changed", 1),
        ("reversed", 0),
        ("reversed", 1),
    }


def test_rewrites_and_keywords_land_in_their_documents(good: dict[str, Any]) -> None:
    with Warehouse(good["warehouse"], read_only=True) as wh:
        release = release_for(wh, good["run_id"])
        docs = {d["doc_id"]: d for d in query(wh, "SELECT * FROM release_docs WHERE release = ?", [release])}
    meta = {doc_id: json.loads(d["meta"]) for doc_id, d in docs.items()}
    chinese = jsonl(SEEDS / "language" / "corpus.jsonl")[0]
    assert docs["language-lang1_doc1"]["text"] == chinese["text"] and chinese["_id"] == "lang1-zh"
    assert meta["language-lang1_doc1"] == {**meta["language-lang1_doc1"], "condition": "Chinese", "origin": "seed"}
    assert meta["language-lang1_doc2"] == {**meta["language-lang1_doc2"], "condition": "English", "origin": "seed"}
    assert meta["length-len2_doc3"]["condition"] == "article"
    for doc_id, m in meta.items():
        if m["dimension"] == "keyword" and m["role"] == "positive":
            assert m["condition"] in docs[doc_id]["text"].lower()


def test_the_infosearch_export_keys_og_changed_and_reversed_qrels(good: dict[str, Any]) -> None:
    out = good["root"] / "infosearch"
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(DIMENSIONS)
    for dimension in DIMENSIONS:
        folder = out / dimension
        corpus = {d["_id"] for d in jsonl(folder / "corpus.jsonl")}
        queries = jsonl(folder / "queries.jsonl")
        assert all(
            set(q) == {"_id", "text", "instruction_og", "instruction_changed", "instruction_reversed"} for q in queries
        )
        qrels = {mode: tsv(folder / f"qrels_{mode}" / "test.tsv") for mode in ("og", "changed", "reversed")}
        pairs = {mode: {(q, d) for q, d, _ in rows} for mode, rows in qrels.items()}
        assert pairs["og"] == pairs["changed"] == pairs["reversed"], "every mode judges the same documents"
        assert {d for _, d in pairs["og"]} <= corpus
        for q in queries:
            core, own = q["_id"].rsplit("_", 1)
            changed = {d for qid, d, s in qrels["changed"] if qid == q["_id"] and s == 1}
            reversed_ = {d for qid, d, s in qrels["reversed"] if qid == q["_id"] and s == 1}
            assert q["instruction_reversed"].startswith(q["text"]), "the core query, unchanged, opens the reversal"
            og = {d for qid, d, s in qrels["og"] if qid == q["_id"] and s == 1}
            assert changed == {f"{core}_doc{own}"}
            assert reversed_ == og - changed and og == {d for qid, d in pairs["og"] if qid == q["_id"]}
        front = (folder / "README.md").read_text().split("---")[1]
        configs = {c["config_name"]: c["data_files"] for c in yaml.safe_load(front)["configs"]}
        assert set(configs) == {"corpus", "queries", "qrels_og", "qrels_changed", "qrels_reversed"}, (
            "the configs InfoSearch's loader asks of a dimension folder"
        )
        for mode, rows in qrels.items():
            assert configs[f"qrels_{mode}"] == [{"split": "test", "path": f"qrels_{mode}.jsonl"}]
            twin = [(r["query-id"], r["corpus-id"], r["score"]) for r in jsonl(folder / f"qrels_{mode}.jsonl")]
            assert twin == rows
    card = (out / "README.md").read_text()
    assert "only the document of its condition scores 1" in card and "| length | Length-v1 | 3 | 9 |" in card


def test_beir_export_writes_one_folder_per_mode(good: dict[str, Any]) -> None:
    beir = good["root"] / "beir"
    for mode in ("og", "changed", "reversed"):
        queries = jsonl(beir / mode / "queries.jsonl")
        assert len(queries) == 45  # 3 audience x2, keyword x2, format x3, language x2, length x3, source x3
        if mode == "og":
            assert all(q["text"] == q["metadata"]["origin_query"] for q in queries), "og mode is the query alone"
        else:
            assert all(q["text"].endswith(" [SEP] " + q["metadata"]["origin_query"]) for q in queries)
        # each instructed query judges every positive of its core query: 3 x 2 x 2 thrice, 3 x 3 x 3 thrice
        assert len(tsv(beir / mode / "qrels" / "test.tsv")) == 3 * (3 * 2 * 2) + 3 * (3 * 3 * 3)


def test_mteb_card_declares_one_config_per_mode_and_file(good: dict[str, Any], tmp_path: Path) -> None:
    with Warehouse(good["warehouse"], read_only=True) as wh:
        export(wh, release_for(wh, good["run_id"]), "mteb", tmp_path / "mteb")
    front = (tmp_path / "mteb" / "README.md").read_text().split("---")[1]
    configs = yaml.safe_load(front)["configs"]
    assert len(configs) == 3 * 4 and configs[0]["config_name"] == "og-corpus"
    modes = {c["config_name"].split("-")[0] for c in configs}
    names = {c["config_name"] for c in configs}
    assert {f"{mode}-{table}" for mode in modes for table in ("corpus", "queries", "instruction", "qrels")} == names
    for config in configs:
        (path,) = [f["path"] for f in config["data_files"]]
        assert len(list((tmp_path / "mteb").glob(path))) == 1, path


def test_a_second_run_is_answered_from_the_cache_and_exports_the_same_bytes(
    good: dict[str, Any], server: FakeOpenAI
) -> None:
    sent = server.stats()["requests"]
    again = run(server, good["root"], out="-again")
    assert server.stats()["requests"] == sent, "every request of an identical run is in the cache"
    assert again["run_id"] != good["run_id"] and again["funnel"]["accepted"] == good["funnel"]["accepted"]
    for name in ("infosearch", "beir"):
        assert export_files(good["root"] / name) == export_files(good["root"] / f"{name}-again"), name


def test_the_export_reads_back_through_import_into_the_same_counts(good: dict[str, Any]) -> None:
    def counts(wh: Warehouse, release: str) -> dict[str, Any]:
        def per_mode(table: str, where: str = "") -> dict[str, int]:
            rows = query(
                wh, f"SELECT mode, count(*) AS n FROM {table} WHERE release = ? {where} GROUP BY mode", [release]
            )
            return {row["mode"]: row["n"] for row in rows}

        docs = query(wh, "SELECT count(*) AS n FROM release_docs WHERE release = ?", [release])[0]["n"]
        return {
            "docs": docs,
            "queries": per_mode("release_queries"),
            "qrels": per_mode("release_qrels"),
            "positives": per_mode("release_qrels", "AND score > 0"),
        }

    with Warehouse(good["warehouse"]) as wh:
        generated = release_for(wh, good["run_id"])
        import_release(wh, "infosearch", good["root"] / "infosearch", name="infosearch-roundtrip")
        assert counts(wh, "infosearch-roundtrip") == counts(wh, generated)
        assert counts(wh, generated)["queries"] == {"og": 45, "changed": 45, "reversed": 45}


def test_the_rules_reject_what_they_should_and_audit_says_why(sloppy: dict[str, Any]) -> None:
    proc = invoke("--warehouse", str(sloppy["warehouse"]), "audit", "--status", "rejected", "--json", "--limit", "0")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    rows = [r for r in listed if r["decided_by"] == "rules"]
    assert {r["decided_by"] for r in listed} == {"rules", "judge_negatives", "assemble"}
    found = {(r["reason"].split(":")[0], r["score"]) for r in rows}
    assert found == {("word_count", 80.0), ("script", 0.0), ("keyword_specific", 1.0)}, rows
    assert all(r["judge"] == "rule" for r in rows)
    sentence = next(r for r in rows if r["reason"].startswith("word_count"))
    assert "80 words, outside the `sentence` band [3, 45]" in sentence["reason"] and sentence["threshold"] == 45
    assert len([r for r in rows if r["reason"].startswith("word_count")]) == 3, "every length query's sentence"
    stages = {s["stage"]: s for s in sloppy["funnel"]["stages"]}
    # kw1 and kw3 survive with two instructed queries each; kw2, every language and every length query do not
    assert stages["assemble"]["rejected"] == 7 and stages["assemble"]["out"] == 4


def test_the_panel_rejects_what_every_ranker_misses_and_bm25_alone_only_flags(
    server: FakeOpenAI, good: dict[str, Any], tmp_path: Path
) -> None:
    with Warehouse(good["warehouse"], read_only=True) as wh:
        flags = audit.audit(wh, good["run_id"], stage="panel", status="ok", limit=None)
    flagged = sorted(r["item_id"] for r in flags if r["reason"].startswith("panel: flagged, kept: 1 of 1 rankers"))
    assert flagged, "BM25 misses positives that share no word with their query, and they are kept"
    # A second ranker that places every keyword positive but kw2's first: only that one is missed by both.
    ranked = [f"keyword-{q}_doc{n}" for q in ("kw1", "kw2", "kw3") for n in (1, 2, 3)]
    lines = [f"{d.split('_')[0]}_1 Q0 {d} 1 1.0 dense" for d in ranked if d != "keyword-kw2_doc1"]
    (tmp_path / "dense.trec").write_text("\n".join(lines) + "\n")
    settings = ["dimensions=[keyword]", f"panel_runs=[{tmp_path / 'dense.trec'}]", "panel_miss_share=1.0"]
    result = run(server, tmp_path, *settings)
    with Warehouse(result["warehouse"], read_only=True) as wh:
        (rejected,) = audit.audit(wh, result["run_id"], stage="panel", limit=None)
        release = query(wh, "SELECT DISTINCT group_id FROM release_queries WHERE release = ?", [result["run_id"]])
    assert rejected["judge"] == "rule:panel" and rejected["group_id"] == "keyword-kw2"
    assert rejected["reason"].startswith("panel: 2 of 2 rankers place it outside their top 50") and (
        "bm25 >50, " in rejected["reason"]
    )
    assert {r["group_id"] for r in release} == {"keyword-kw1", "keyword-kw3"}, "kw2 lost a positive"


def test_a_missing_panel_run_is_refused_when_the_run_is_configured(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^settings: panel_runs: no file .*missing\.trec$"):
        resolve("infosearch", seeds="demo", base_url="http://127.0.0.1:9/v1", model="m",
                sets=[f"panel_runs=[{tmp_path / 'missing.trec'}]"])  # fmt: skip
