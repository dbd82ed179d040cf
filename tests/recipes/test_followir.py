"""The FollowIR recipe in-process against the fake answering like an assessor that follows the narrative.

The responder knows the demo's judgments. Under candidate alteration 1 of a topic nothing flips (passed over:
0 %), except for topic f101, where it also makes a judged non-relevant document relevant (passed over: it
widens relevance), and for topic f102, where one answer has no JSON (passed over: a re-judgment is
missing); topic f112's short command comes back with no JSON (the topic stays, without its short forms).
Under candidate 2 every second relevant document of the topic (by id) flips, so 1 of 3 or
2 of 4 (in the 30-70 % band): candidate 2 is kept, candidate 3 set aside. A window that is not a document's
first is judged by the rule; a document's first window, when it has several, is judged not relevant, so the
long document's label comes from a later window (MaxP)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from ifsynth.flows.evaluation.evaluate_release import EvaluateOptions, evaluate
from ifsynth.flows.evaluation.metrics import pmrr_pair
from ifsynth.flows.run.config import resolve
from ifsynth.flows.run.exports import export, import_release
from ifsynth.flows.run.registry import metrics_of
from ifsynth.flows.run.runner import execute
from ifsynth.flows.seeds import BeirFolder
from ifsynth.warehouse import audit
from ifsynth.warehouse.export import release_for
from ifsynth.warehouse.store import Warehouse
from tests.conftest import REPO
from tests.fake_openai import FakeOpenAI
from tests.helpers import field, query

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server

SEEDS = REPO / "flows" / "demo_seeds" / "followir"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


CORPUS = {row["_id"]: " ".join(row["text"].split()) for row in _jsonl(SEEDS / "corpus.jsonl")}
GRADES: dict[str, dict[str, int]] = {}
for _line in (SEEDS / "qrels" / "test.tsv").read_text().splitlines()[1:]:
    _q, _d, _s = _line.split("\t")
    GRADES.setdefault(_q, {})[_d] = int(_s)
TOPIC_OF = {doc: qid for qid, docs in GRADES.items() for doc in docs}
LONG = next(doc for doc, text in CORPUS.items() if len(text.split()) > 400)
NO_SHORT_FORM = "f112"  # rhino horn poaching: its short command comes back with no JSON
UNPARSABLE = "f102-d5"  # judged non-relevant; under candidate 1 the judge answers it with no JSON


def relevant_docs(qid: str) -> list[str]:
    return sorted(doc for doc, grade in GRADES[qid].items() if grade > 0)


def flips(qid: str) -> set[str]:
    """Under candidate 2: every second relevant document of the topic."""
    return set(relevant_docs(qid)[1::2])


def judge(prompt: str) -> dict[str, Any] | str:
    narrative, window = field(prompt, "Narrative"), " ".join(field(prompt, "Document").split())
    if narrative.startswith("TRAIN"):  # a training document: judged as written, except the second relevant one
        relevant = window.startswith("Relevant") and not window.startswith("Relevant 2")
        return {"explanation": "as the narrative says", "relevant": relevant}
    doc = next(d for d, text in CORPUS.items() if window in text)
    named = re.search(r"\[candidate (\d)\]", narrative)
    assert named, "an altered narrative carries its candidate's number"
    qid, candidate = TOPIC_OF[doc], int(named.group(1))
    if (doc, candidate) == (UNPARSABLE, 1):
        return "relevant: maybe"
    if window != CORPUS[doc] and CORPUS[doc].startswith(window):
        return {"explanation": "this part does not discuss it", "relevant": False}
    originally = GRADES[qid][doc] > 0
    relevant = (originally or qid == "f101") if candidate == 1 else (originally and doc not in flips(qid))
    return {"explanation": f"candidate {candidate} on {doc}", "relevant": relevant}


def first_prompt(body: dict[str, Any]) -> str:
    """The stage's prompt, also when the gateway follows it with a request to repair an unparsable answer."""
    return str(next(m["content"] for m in body["messages"] if m["role"] == "user"))


def assessor(body: dict[str, Any]) -> dict[str, Any] | str:
    name = body["response_format"]["json_schema"]["name"]
    prompt = first_prompt(body)
    if name.startswith("AlteredNarratives"):
        k, narrative = int(name.removeprefix("AlteredNarratives")), field(prompt, "Narrative")
        return {
            "alterations": [
                {"change": f"candidate {n}", "narrative": f"{narrative} [candidate {n}] Only one kind counts."}
                for n in range(1, k + 1)
            ]
        }
    if name == "RelevanceLabel":
        return judge(prompt)
    if name == "ShortCommand":
        return "a command" if "rhino" in prompt.lower() else {"command": "Find news reports on the question's subject."}
    if name == "InstructionKeywords":
        return {"keywords": ["news", "reports"]}
    if name.startswith("SyntheticDocuments"):
        n, query = int(name.removeprefix("SyntheticDocuments")), field(prompt, "Query")
        return {
            "relevant": [f"Relevant {i} report on {query}." for i in range(1, n + 1)],
            "non_relevant": [f"Unrelated {i} story near {query}." for i in range(1, n + 1)],
        }
    raise AssertionError(f"unexpected request {name}")


FAKE = {"mode": "responder", "responder": assessor}  # the module's `server`


def train_assessor(body: dict[str, Any]) -> dict[str, Any] | str:
    """The same, with every narrative of a training run marked so the judge knows it."""
    prompt = first_prompt(body)
    if body["response_format"]["json_schema"]["name"] == "RelevanceLabel":
        prompt = prompt.replace("Narrative: ", "Narrative: TRAIN ", 1)
    return assessor({**body, "messages": [{"role": "user", "content": prompt}]})


def run(server: FakeOpenAI, root: Path, *sets: str, out: str = "followir") -> dict[str, Any]:
    config = resolve("followir", seeds="demo", base_url=server.base_url, model="gen", sets=list(sets))
    warehouse = root / "w.duckdb"
    run_id = execute(config, warehouse).run_id
    with Warehouse(warehouse, read_only=True) as wh:
        export(wh, release_for(wh, run_id), "followir", root / out, overwrite=True)
        return {"root": root, "warehouse": warehouse, "run_id": run_id, "funnel": audit.funnel(wh, run_id)}


@pytest.fixture(scope="module")
def release(server: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run(server, tmp_path_factory.mktemp("followir"))


def qrels(path: Path) -> dict[tuple[str, str], int]:
    lines = path.read_text().splitlines()
    assert lines[0] == "query-id\tcorpus-id\tscore"
    return {(q, d): int(s) for q, d, s in (line.split("\t") for line in lines[1:])}


def test_the_demo_topics_carry_narratives_and_graded_judgments() -> None:
    pairs = list(BeirFolder(SEEDS, spec="demo").pairs())
    assert len(pairs) >= 12
    for pair in pairs:
        assert pair.query.title and pair.query.description and pair.query.narrative
        assert pair.negatives and all(p.grade == 0 for p in pair.negatives)
        assert all(p.grade > 0 for p in pair.positives)
        assert {p.doc_id for p in (*pair.positives, *pair.negatives)} == set(GRADES[pair.query.query_id])


def test_the_export_has_both_instructions_two_qrels_and_a_pool(release: dict[str, Any]) -> None:
    out = release["root"] / "followir"
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "corpus.jsonl",
        "mteb",
        "qrels_changed",
        "qrels_changed.jsonl",
        "qrels_og",
        "qrels_og.jsonl",
        "queries.jsonl",
        "top_ranked.jsonl",
    ]
    queries = {row["_id"]: row for row in _jsonl(out / "queries.jsonl")}
    assert set(queries) == set(GRADES), "every demo topic keeps its candidate 2"
    for row in queries.values():
        assert row["instruction_og"] and row["instruction_changed"].startswith(row["instruction_og"])
        assert "[candidate 2]" in row["instruction_changed"]
        if row["_id"] == NO_SHORT_FORM:
            assert "short_query" not in row and "keywords" not in row, "its short form failed; the topic stays"
        else:
            assert row["short_query"] and row["keywords"] == "news, reports"
    og, changed = qrels(out / "qrels_og" / "test.tsv"), qrels(out / "qrels_changed" / "test.tsv")
    assert set(og) == set(changed)
    for (qid, doc), grade in og.items():
        assert grade == GRADES[qid][doc], "og keeps the TREC grade"
        assert changed[qid, doc] == (0 if doc in flips(qid) else grade)
    pool: dict[str, set[str]] = {}
    for row in _jsonl(out / "top_ranked.jsonl"):
        pool.setdefault(row["qid"], set()).add(row["pid"])
    corpus = {row["_id"] for row in _jsonl(out / "corpus.jsonl")}
    for qid in queries:
        assert set(relevant_docs(qid)) <= pool[qid], "the pool holds every judged-relevant document"
        assert pool[qid] - set(relevant_docs(qid)), "and non-relevant ones from BM25"
        assert pool[qid] <= corpus
    assert {doc for qid, doc in og} <= corpus


def card_configs(folder: Path) -> dict[str, dict[str, Any]]:
    front = (folder / "README.md").read_text().split("---")[1]
    return {c["config_name"]: c for c in yaml.safe_load(front)["configs"]}


def test_the_authors_loaders_find_their_configs_and_mteb_2_its_own_folder(release: dict[str, Any]) -> None:
    """FollowIR's loader asks `datasets` for corpus, queries, qrels_og, qrels_changed and top_ranked; mteb 2's
    FollowIR tasks read `mteb/` as mteb/Core17InstructionRetrieval: ids per mode and the changed documents."""
    out = release["root"] / "followir"
    configs = card_configs(out)
    assert {"corpus", "queries", "qrels_og", "qrels_changed", "top_ranked"} <= set(configs)
    for mode in ("og", "changed"):
        (files,) = configs[f"qrels_{mode}"]["data_files"]
        assert files == {"split": "test", "path": f"qrels_{mode}.jsonl"}
        twin = {(r["query-id"], r["corpus-id"]): r["score"] for r in _jsonl(out / files["path"])}
        assert twin == qrels(out / f"qrels_{mode}" / "test.tsv"), "the JSON twin holds the TSV's rows"
    mteb = out / "mteb"
    splits = {name: c["data_files"][0]["split"] for name, c in card_configs(mteb).items()}
    assert splits == {name: "test" for name in ("default", "corpus", "queries", "instruction", "top_ranked")} | {
        "qrel_diff": "qrel_diff"
    }
    ids = {row["_id"] for row in _jsonl(mteb / "queries.jsonl")}
    assert ids == {f"{qid}-{mode}" for qid in GRADES for mode in ("og", "changed")}
    assert {row["query-id"] for row in _jsonl(mteb / "instruction.jsonl")} == ids
    diff = {row["query-id"]: set(row["corpus-ids"]) for row in _jsonl(mteb / "qrel_diff.jsonl")}
    assert diff == {qid: flips(qid) for qid in GRADES}, "the changed documents are the flipped ones"
    pools = {row["query-id"]: set(row["corpus-ids"]) for row in _jsonl(mteb / "top_ranked.jsonl")}
    assert set(pools) == ids and all(pools[f"{q}-og"] == pools[f"{q}-changed"] for q in GRADES)


def test_every_flipped_document_was_rejudged_by_a_recorded_call(release: dict[str, Any]) -> None:
    out = release["root"] / "followir"
    og, changed = qrels(out / "qrels_og" / "test.tsv"), qrels(out / "qrels_changed" / "test.tsv")
    flipped = {key for key, grade in og.items() if grade > 0 and changed[key] == 0}
    assert flipped == {(qid, doc) for qid in GRADES for doc in flips(qid)}
    with Warehouse(release["warehouse"], read_only=True) as wh:
        rows = query(
            wh,
            "SELECT i.group_id, json_extract_string(i.payload, '$.doc_id') AS doc, v.decision, v.call_key, "
            "json_extract(i.payload, '$.window')::INT AS window, json_extract(i.payload, '$.candidate')::INT AS k "
            "FROM items i JOIN verdicts v USING (run_id, item_id) WHERE i.run_id = ? AND i.stage = 'rejudge'",
            [release["run_id"]],
        )
        calls = {r["key"] for r in query(wh, "SELECT key FROM llm_calls")}
    labels = {(r["k"], r["group_id"], r["doc"]): r for r in rows}
    for qid, doc in flipped:
        label = labels[2, qid, doc]
        assert label["decision"] == "reject" and label["call_key"] in calls
    long_label = labels[1, TOPIC_OF[LONG], LONG]  # candidate 1 keeps it relevant, though not in its first window
    assert (long_label["decision"], long_label["window"]) == ("pass", 2), "judged window by window (MaxP)"


def test_audit_lists_the_candidates_passed_over_with_their_flip_share(release: dict[str, Any]) -> None:
    with Warehouse(release["warehouse"], read_only=True) as wh:
        rows = audit.audit(wh, release["run_id"], stage="select_alteration")
    assert len(rows) == len(GRADES), "candidate 1 of every topic"
    for row in rows:
        assert "flips 0 of" in row["reason"]
    widened = [row for row in rows if "widens relevance" in row["reason"]]
    assert len(widened) == 1
    (unjudged,) = [row for row in rows if "re-judgments missing" in row["reason"]]
    assert UNPARSABLE in unjudged["reason"], "a candidate short of a parsed label is passed over, never lost"
    stages = {s["stage"]: s for s in release["funnel"]["stages"]}
    assert (stages["select_alteration"]["rejected"], stages["select_alteration"]["set_aside"]) == (14, 14)
    assert stages["rejudge"]["parse_error"] == 1


def test_a_second_run_sends_nothing_and_writes_identical_files(release: dict[str, Any], server: FakeOpenAI) -> None:
    before = server.stats()["requests"]
    again = run(server, release["root"], out="again")
    assert server.stats()["requests"] == before
    first, second = release["root"] / "followir", again["root"] / "again"
    for path in sorted(first.rglob("*")):
        if path.is_file() and path.name != "README.md":
            assert path.read_bytes() == (second / path.relative_to(first)).read_bytes(), path.name


def test_import_reads_the_export_back_into_the_same_counts(release: dict[str, Any], tmp_path: Path) -> None:
    with Warehouse(release["warehouse"], read_only=True) as wh:
        card = json.loads(query(wh, "SELECT card FROM releases WHERE run_id = ?", [release["run_id"]])[0]["card"])
    with Warehouse(tmp_path / "imported.duckdb") as wh:
        imported = import_release(wh, "followir", release["root"] / "followir", name="back")
    for key in ("queries", "instances", "corpus", "qrels", "top_ranked"):
        assert imported["counts"][key] == card["counts"][key], key
    assert imported["missing"] == []


def test_evaluate_scores_map_ndcg_and_a_p_mrr_computed_by_hand(release: dict[str, Any], tmp_path: Path) -> None:
    """A fixed run: under og each topic ranks its relevant documents first (by id), under changed the flipped
    ones go last; p-MRR by hand from the ranks agrees with evaluate's."""
    with Warehouse(release["warehouse"]) as wh:
        name = release_for(wh, release["run_id"])
        pools: dict[str, list[str]] = {}
        for row in wh.release_top_ranked(name):
            if row["mode"] == "og":
                pools.setdefault(row["query_id"], []).append(row["doc_id"])
        lines, expected = [], []
        for qid, pool in sorted(pools.items()):
            first = relevant_docs(qid) + sorted(set(pool) - set(relevant_docs(qid)))
            moved = [doc for doc in first if doc not in flips(qid)] + sorted(flips(qid))
            for mode, order in (("og", first), ("changed", moved)):
                lines += [f"{qid}-{mode} Q0 {doc} {r} {1000 - r} fixed" for r, doc in enumerate(order, 1)]
            pairs = [pmrr_pair(first.index(d) + 1, moved.index(d) + 1) for d in sorted(flips(qid))]
            expected.append(sum(pairs) / len(pairs))
        run_file = tmp_path / "fixed.trec"
        run_file.write_text("\n".join(lines) + "\n")
        report = evaluate(wh, name, EvaluateOptions(run_file=run_file), metrics_of, notify=lambda _: None)
        bm25 = evaluate(
            wh, name, EvaluateOptions(retriever="bm25", out_file=tmp_path / "bm25.trec"), metrics_of, notify=print
        )
    assert report["setting"] == "rerank top_ranked"
    assert report["p-mrr"] == pytest.approx(sum(expected) / len(expected))
    assert report["p-mrr"] > 0, "the flipped documents moved down"
    assert report["modes"]["og"]["map"] == pytest.approx(1.0), "og ranks every relevant document first"
    assert report["modes"]["og"]["ndcg@5"] is not None
    for figure in ("map", "ndcg@5"):
        assert 0 <= bm25["modes"]["og"][figure] <= 1
    assert -1 <= bm25["p-mrr"] <= 1


def test_training_rows_are_balanced_and_agree_with_the_judge(tmp_path: Path) -> None:
    with FakeOpenAI(mode="responder", responder=train_assessor) as fake:
        made = run(fake, tmp_path, "mode=train", out="train")
    with Warehouse(made["warehouse"], read_only=True) as wh:
        export(wh, release_for(wh, made["run_id"]), "triplets", tmp_path / "triplets")
    triplets = _jsonl(tmp_path / "triplets" / "triplets.jsonl")
    assert len(triplets) == len(GRADES)
    assert all(t["positive"].startswith("Relevant 1") and t["negative"].startswith("Unrelated") for t in triplets)
    rows = _jsonl(tmp_path / "train" / "train.jsonl")
    by_query: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_query.setdefault(row["query"], []).append(row)
    assert len(by_query) == len(GRADES)
    for pair in by_query.values():
        assert sorted(row["label"] for row in pair) == [0, 1]
        assert all(row["label"] == row["score"] for row in pair)
        relevant = next(row for row in pair if row["label"] == 1)
        assert relevant["document"].startswith("Relevant 1"), "the first agreeing relevant document"
    with Warehouse(made["warehouse"], read_only=True) as wh:
        verdicts = query(
            wh,
            "SELECT v.item_id, v.decision, v.judge FROM verdicts v WHERE v.run_id = ? AND v.stage = 'judge_documents'",
            [made["run_id"]],
        )
    decisions = {v["decision"] for v in verdicts}
    assert decisions == {"pass", "reject"}, "the second relevant document of every pair was judged otherwise"
    assert sum(v["decision"] == "reject" for v in verdicts) == len(GRADES)


def test_a_pool_run_adds_its_top_documents_to_the_pool(
    server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run file ranks, for every topic, an unjudged document of another topic first: it joins that topic's pool
    (BM25 would not bring it), and the stored setting is the file's absolute path."""
    stranger = {qid: f"f{(int(qid[1:]) - 100) % 14 + 101}-d7" for qid in GRADES}
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "other.trec").write_text("".join(f"{q} Q0 {d} 1 9.5 other\n" for q, d in stranger.items()))
    monkeypatch.chdir(tmp_path / "runs")
    made = run(server, tmp_path, "pool_runs=[other.trec]", "pool_depth=3", out="pooled")
    pool: dict[str, set[str]] = {}
    for row in _jsonl(tmp_path / "pooled" / "top_ranked.jsonl"):
        pool.setdefault(row["qid"], set()).add(row["pid"])
    assert all(stranger[qid] in pool[qid] for qid in pool) and pool.keys() == set(GRADES)
    with Warehouse(made["warehouse"], read_only=True) as wh:
        stored = json.loads(query(wh, "SELECT config FROM runs WHERE run_id = ?", [made["run_id"]])[0]["config"])
    assert stored["params"]["pool_runs"] == [str(tmp_path / "runs" / "other.trec")]
