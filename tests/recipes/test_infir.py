"""The InF-IR recipe in-process: a sensible fake shows that tuples are kept exactly when all three judgments
name the intended passage, that audit says which judgment failed, that the newline and language rules act and
are on record, that negatives trace to their poisoned texts, and that a changed validation template resends
only validation requests. A random fake shows that any valid answers carry a run through to the exports."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from ifsynth.flows.run.config import resolve
from ifsynth.flows.run.exports import export
from ifsynth.flows.run.runner import execute
from ifsynth.schemas.errors import WarehouseError
from ifsynth.warehouse import audit
from ifsynth.warehouse.export import release_for
from ifsynth.warehouse.store import Warehouse
from tests.conftest import INSTRUCTIR_SEEDS, REPO, cli, invoke
from tests.fake_openai import FakeOpenAI
from tests.helpers import query

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server

DEMO = REPO / "flows" / "demo_seeds"
SEVEN = (
    "query_positive",
    "instruction_positive",
    "document_positive",
    "query_negative",
    "instruction_negative",
    "hard_negative_document_1",
    "hard_negative_document_2",
)
QUERIES = {row["text"]: row["_id"] for row in map(json.loads, (DEMO / "queries.jsonl").read_text().splitlines())}
_CORPUS = {row["_id"]: row["text"] for row in map(json.loads, (DEMO / "corpus.jsonl").read_text().splitlines())}
POSITIVE = {
    line.split("\t")[0]: _CORPUS[line.split("\t")[1]]
    for line in (DEMO / "qrels" / "test.tsv").read_text().splitlines()[1:]
}
# With seed 0 and limit 8 the demo sample is dq25 dq05 dq48 dq09 dq03 dq45 dq41 dq11: the judge gets one
# judgment of three of them wrong, and the code flavour's poisoned instruction of dq48 switches language.
WRONG = {"dq05": "positive", "dq09": "negative_instruction", "dq03": "negative_query"}
SWITCHES_LANGUAGE = "dq48"
REPEATS_QUERY = "dq09"  # in the code flavour, its poisoned query repeats the original
BEIR = f"beir:{INSTRUCTIR_SEEDS}"
WIDE = {"COLUMNS": "200"}


def field(text: str, label: str) -> str:
    match = re.search(rf"^{label}: (.*)$", text, re.MULTILINE)
    assert match, f"no `{label}:` line in the prompt"
    return match.group(1)


def written_for(instruction: str, query: str) -> str:
    return f"Written for <{instruction}> <{query}>."


def sensible(body: dict[str, Any]) -> dict[str, Any]:
    """Answers like a model that follows the prompts; its generated texts run on past a newline."""
    name = body["response_format"]["json_schema"]["name"]
    prompt = body["messages"][-1]["content"]
    code = name.startswith("Code")
    if name.endswith("Instructions1"):
        qid = QUERIES[field(prompt, "Query")]
        named = {"language": "Python"} if code else {}
        return {"instructions": [f"Find the source for {qid}.\nAnd a second line."], **named}
    if name.endswith("InstructionPoisoning"):
        qid = QUERIES[field(prompt, "Query")]
        named = {"language": "Java" if qid == SWITCHES_LANGUAGE else " python"} if code else {}
        negative = f"Avoid the source for {qid}.\nAnd a second line."
        return {"aspects": ["a point", "another"], "negative_instruction": negative, **named}
    if name == "QueryPoisoning":
        query = field(prompt, "Query")
        code = "programming problem" in prompt
        repeat = code and QUERIES[query] == REPEATS_QUERY
        return {
            "aspects": ["first point", "second point"],
            "negative_query": f" {query.upper()} " if repeat else f"not {query}",
        }
    if name == "Rewrite":
        return {
            "plan": "answer it",
            "revised_passage": written_for(field(prompt, "Instruction"), field(prompt, "Query")),
        }
    if name.startswith("Pick"):
        instruction, query = field(prompt, "Instruction"), field(prompt, "Query")
        if instruction.startswith("Avoid"):
            judgment, qid = "negative_instruction", QUERIES[query]
        elif query.startswith("not "):
            judgment, qid = "negative_query", QUERIES[query.removeprefix("not ")]
        else:
            judgment, qid = "positive", QUERIES[query]
        intended = POSITIVE[qid] if judgment == "positive" else written_for(instruction, query)
        candidates = re.findall(r"^\[(\d+)\] (.*)$", prompt, re.MULTILINE)
        for label, text in candidates:
            if (text == intended) != (WRONG.get(qid) == judgment):
                return {"explanation": f"judged {judgment}", "best": label}
    raise AssertionError(f"unexpected request {name}")


FAKE = {"mode": "responder", "responder": sensible}  # the module's `server`


def run(server: FakeOpenAI, warehouse: Path, *sets: str, limit: int = 8, prompts_dir: Path | None = None) -> str:
    config = resolve(
        "infir",
        seeds="demo",
        limit=limit,
        base_url=server.base_url,
        model="gen",
        judge_model="judge",
        sets=list(sets),
        prompts_dir=str(prompts_dir) if prompts_dir else None,
    )
    return execute(config, warehouse).run_id


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def general(server: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("infir")
    warehouse = root / "w.duckdb"
    before = server.stats()["requests"]
    run_id = run(server, warehouse)
    requests = server.requests[before:]
    with Warehouse(warehouse, read_only=True) as wh:
        export(wh, release_for(wh, run_id), "infir", root / "infir")
    return {"root": root, "warehouse": warehouse, "run": run_id, "sent": len(requests), "requests": requests}


def candidates(request: dict[str, Any]) -> list[str]:
    return [text for _, text in re.findall(r"^\[(\d+)\] (.*)$", request["messages"][-1]["content"], re.MULTILINE)]


def picks(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in requests if r["response_format"]["json_schema"]["name"].startswith("Pick")]


def test_a_tuple_is_kept_only_when_all_three_judgments_name_the_intended_passage(general: dict[str, Any]) -> None:
    exported = rows(general["root"] / "infir" / "infir.jsonl")
    assert sorted(r["id"] for r in exported) == ["dq11", "dq25", "dq41", "dq45", "dq48"]
    with Warehouse(general["warehouse"], read_only=True) as wh:
        report = audit.funnel(wh, general["run"])
        rejected = audit.audit(wh, general["run"], stage="validate", limit=None)
    stages = {s["stage"]: s for s in report["stages"]}
    assert [s["stage"] for s in report["stages"]] == [
        "select", "instructions", "poison", "rewrite", "tuples", "validate", "assemble",
    ]  # fmt: skip
    assert (stages["validate"]["in"], stages["validate"]["out"], stages["validate"]["rejected"]) == (8, 5, 3)
    judges = {j["judge"]: (j["judged"], j["passed"], j["rejected"]) for j in stages["validate"]["judges"]}
    assert judges == {f"llm:{name}": (8, 7, 1) for name in ("positive", "negative_instruction", "negative_query")}
    assert report["accepted"] == 5 and general["sent"] == 8 + 16 + 16 + 24

    assert {r["group_id"]: r["judge"] for r in rejected} == {qid: f"llm:{j}" for qid, j in WRONG.items()}
    for request in picks(general["requests"]):
        listed = candidates(request)
        query = field(request["messages"][-1]["content"], "Query").removeprefix("not ")
        distractors = [text for text in listed if text in _CORPUS.values()]
        assert len(listed) == 8 and listed.count(POSITIVE[QUERIES[query]]) == 1
        assert len(distractors) == 6 and len(set(distractors)) == 6, "P+ and five distinct distractors"
    for r in rejected:
        assert r["status"] == "rejected" and r["decision"] == "reject" and r["kind"] == "tuple"
        assert r["failed_judges"] == [r["judge"]], "one wrong judgment per rejected tuple in this responder"
        assert re.match(r"picked \[\d+\] .+ \(gold \[\d+\] P(\+|1-|2-)\): judged ", r["reason"])


def test_each_seed_pair_is_poisoned_by_two_independent_requests(general: dict[str, Any]) -> None:
    names = [r["response_format"]["json_schema"]["name"] for r in general["requests"]]
    poisoning = [r for r, name in zip(general["requests"], names, strict=True) if name.endswith("Poisoning")]
    assert sorted(names.count(n) for n in ("InstructionPoisoning", "QueryPoisoning")) == [8, 8]
    for request in poisoning:
        prompt = request["messages"][-1]["content"]
        asks_for = {"negative_instruction", "negative_query"} & set(
            request["response_format"]["json_schema"]["schema"]["properties"]
        )
        assert len(asks_for) == 1, "one request writes I- or Q-, never both"
        assert "Avoid the source" not in prompt and "not " not in field(prompt, "Query"), "neither sees the other"


def test_exports_carry_exactly_the_seven_fields_and_no_newline(general: dict[str, Any]) -> None:
    exported = rows(general["root"] / "infir" / "infir.jsonl")
    provenance = {"origin_query_id", "origin_doc_id", "tuple_item"} | {
        f"{name}_item" for name in SEVEN if "negative" in name or name == "instruction_positive"
    }
    for row in exported:
        assert set(row) == {"id", *SEVEN, "document", *provenance}, "InF-Embed's MS MARCO branch reads `document`"
        assert row["document"] == row["document_positive"]
        assert all(row[name] for name in SEVEN)
        assert row["instruction_positive"] == f"Find the source for {row['id']}."
        assert row["instruction_negative"] == f"Avoid the source for {row['id']}."
        assert row["query_negative"] == f"not {row['query_positive']}"
        assert row["document_positive"] == POSITIVE[row["id"]]
        assert row["hard_negative_document_1"] == written_for(row["instruction_negative"], row["query_positive"])
        assert row["hard_negative_document_2"] == written_for(row["instruction_positive"], row["query_negative"])
    table = pq.read_table(general["root"] / "infir" / "infir.parquet")
    assert table.column_names[:8] == ["id", *SEVEN] and table.num_rows == len(exported)
    with Warehouse(general["warehouse"], read_only=True) as wh:
        release = release_for(wh, general["run"])
        export(wh, release, "triplets", general["root"] / "triplets")
        export(wh, release, "triplets", general["root"] / "paper-order", options={"anchor": "instruction-query"})
        export(wh, release, "hf", general["root"] / "hf")
        export(wh, release, "beir", general["root"] / "beir")
        export(wh, release, "jsonl", general["root"] / "jsonl")
        assert audit.runs(wh)[0]["accepted"] == len(exported), "a run's accepted count is its tuples"
    for mode in ("positive", "negative_instruction", "negative_query"):
        qrels = (general["root"] / "beir" / mode / "qrels" / "test.tsv").read_text().splitlines()[1:]
        assert len(qrels) == 3 * len(exported) and sum(line.endswith("\t1") for line in qrels) == len(exported)
    instances = rows(general["root"] / "jsonl" / "instances.jsonl")
    assert len(instances) == 3 * len(exported)
    assert {i["mode"] for i in instances} == {"positive", "negative_instruction", "negative_query"}
    triplets = rows(general["root"] / "triplets" / "triplets.jsonl")
    assert len(triplets) == len(exported), "one row per anchor: no anchor repeats in a batch"
    assert len({t["anchor"] for t in triplets}) == len(triplets)
    first = exported[0]
    assert triplets[0] == {
        "anchor": f"{first['query_positive']} {first['instruction_positive']}",
        "positive": first["document_positive"],
        "negative_1": first["hard_negative_document_1"],
        "negative_2": first["hard_negative_document_2"],
    }, "InF-Embed's input order by default"
    other = rows(general["root"] / "paper-order" / "triplets.jsonl")[0]
    assert other["anchor"] == f"{first['instruction_positive']} {first['query_positive']}"
    card = (general["root"] / "triplets" / "README.md").read_text()
    assert "the query then the instruction" in card and "BatchSamplers.NO_DUPLICATES" in card
    hf = general["root"] / "hf"
    front = yaml.safe_load((hf / "README.md").read_text().split("---")[1])
    assert [c["config_name"] for c in front["configs"]] == ["infir", "triplets"]
    assert pq.read_table(hf / "triplets" / "train-00000-of-00001.parquet").column_names == [
        "anchor", "positive", "negative_1", "negative_2",
    ]  # fmt: skip
    assert pq.read_table(hf / "infir" / "train-00000-of-00001.parquet").num_rows == len(exported)


def test_the_newline_rule_is_on_record_wherever_it_cut(general: dict[str, Any]) -> None:
    with Warehouse(general["warehouse"], read_only=True) as wh:
        cuts = query(
            wh,
            "SELECT v.stage, i.kind, v.reason FROM verdicts v JOIN items i USING (run_id, item_id) "
            "WHERE v.run_id = ? AND v.judge = 'rule:newline'",
            [general["run"]],
        )
    assert sorted((c["stage"], c["kind"]) for c in cuts) == sorted(
        [("instructions", "instruction")] * 8 + [("poison", "poisoned_instruction")] * 8
    )
    for cut in cuts:
        assert re.search(
            r'cut at its first newline: "(Find|Avoid) the source for dq\d\d\.\\nAnd a second line\."', cut["reason"]
        )
        assert re.search(r'-> "(Find|Avoid) the source for dq\d\d\."$', cut["reason"])


def test_each_negative_traces_to_its_poisoned_text_and_the_three_judgments(general: dict[str, Any]) -> None:
    exported = rows(general["root"] / "infir" / "infir.jsonl")
    with Warehouse(general["warehouse"], read_only=True) as wh:
        for row in exported[:2]:
            for document, kind, text_field, poisoned in (
                ("hard_negative_document_1", "poisoned_instruction", "instruction", "instruction_negative"),
                ("hard_negative_document_2", "poisoned_query", "query", "query_negative"),
            ):
                shown = audit.show(wh, row[f"{document}_item"])
                assert shown["item"]["payload"]["passage"] == row[document]
                parent = shown["parents"][0]
                assert parent["kind"] == kind and parent["item_id"] == row[f"{poisoned}_item"]
                assert parent["payload"][text_field] == row[poisoned]
                assert [p["kind"] for p in shown["parents"][1:]] == ["instruction", "seed"]
                (tuple_,) = shown["used_by"]
                assert tuple_["item_id"] == row["tuple_item"] and tuple_["status"] == "accepted"
                assert {v["judge"]: v["decision"] for v in tuple_["verdicts"]} == {
                    "llm:negative_instruction": "pass", "llm:negative_query": "pass", "llm:positive": "pass",
                }  # fmt: skip


def test_a_changed_validation_template_resends_only_validation(
    server: FakeOpenAI, general: dict[str, Any], tmp_path: Path
) -> None:
    overlay = tmp_path / "prompts" / "infir"
    overlay.mkdir(parents=True)
    builtin = REPO / "prompts" / "infir" / "validate.j2"
    (overlay / "validate.j2").write_text(builtin.read_text().replace("careful", "meticulous"))
    before = server.stats()["requests"]
    run_id = run(server, general["warehouse"], prompts_dir=tmp_path / "prompts")
    resent = server.requests[before:]
    assert len(resent) == 24
    assert all(r["response_format"]["json_schema"]["name"].startswith("Pick") for r in resent)
    assert all("meticulous" in r["messages"][0]["content"] for r in resent)
    shuffles = sorted(tuple(candidates(r)) for r in resent)
    assert shuffles == sorted(tuple(candidates(r)) for r in picks(general["requests"])), "the same candidate orders"
    with Warehouse(general["warehouse"], read_only=True) as wh:
        stages = {s["stage"]: s for s in audit.funnel(wh, run_id)["stages"]}
    assert stages["validate"]["sent"] == 24
    assert all(s["sent"] == 0 for name, s in stages.items() if name != "validate")


def test_validate_false_skips_the_judge_and_keeps_every_tuple(server: FakeOpenAI, general: dict[str, Any]) -> None:
    before = server.stats()["requests"]
    run_id = run(server, general["warehouse"], "validate=false")
    assert server.stats()["requests"] == before, "everything else is served from the cache"
    with Warehouse(general["warehouse"], read_only=True) as wh:
        report = audit.funnel(wh, run_id)
        assert "validate" not in [s["stage"] for s in report["stages"]] and report["accepted"] == 8
        export(wh, release_for(wh, run_id), "infir", general["root"] / "unvalidated")
    assert len(rows(general["root"] / "unvalidated" / "infir.jsonl")) == 8


def test_code_flavour_names_the_language_and_rejects_a_switch(server: FakeOpenAI, tmp_path: Path) -> None:
    warehouse = tmp_path / "code.duckdb"
    before = server.stats()["requests"]
    run_id = run(server, warehouse, "flavour=code", "validate=false", limit=4)
    first = server.requests[before]
    assert first["response_format"]["json_schema"]["name"] == "CodeInstructions1"
    assert "programming language" in first["messages"][-1]["content"]
    with Warehouse(warehouse, read_only=True) as wh:
        removed = audit.audit(wh, run_id, stage="poison", limit=None)
        export(wh, release_for(wh, run_id), "infir", tmp_path / "out")
    assert {(r["group_id"], r["kind"], r["judge"]) for r in removed} == {
        (SWITCHES_LANGUAGE, "poisoned_instruction", "rule:language"),
        (SWITCHES_LANGUAGE, "poisoned_query", "rule:language"),
        (REPEATS_QUERY, "poisoned_instruction", "rule:unchanged"),
        (REPEATS_QUERY, "poisoned_query", "rule:unchanged"),
    }
    reasons = {(r["group_id"], r["kind"]): r["reason"] for r in removed}
    assert reasons[SWITCHES_LANGUAGE, "poisoned_instruction"] == "I- names 'Java', I+ names 'Python'"
    assert reasons[REPEATS_QUERY, "poisoned_query"] == "Q- repeats Q+"
    assert reasons[REPEATS_QUERY, "poisoned_instruction"] == "sibling: Q- repeats Q+"
    exported = rows(tmp_path / "out" / "infir.jsonl")
    assert sorted(r["id"] for r in exported) == ["dq05", "dq25"]
    assert {r["language"] for r in exported} == {"Python"}


def test_infir_formats_refuse_other_recipes_releases(tmp_path: Path) -> None:
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.write_release(
            name="ir", run_id=None, recipe="instructir", source="demo", card={}, docs=[], queries=[], qrels=[]
        )
        for fmt, owners in (("infir", "infir"), ("triplets", "followir and infir")):
            with pytest.raises(
                WarehouseError, match=f"--format {fmt} is for {owners}( and \\w+)* releases; release ir"
            ):
                export(wh, "ir", fmt, tmp_path / fmt)
        with pytest.raises(WarehouseError, match="release ir is empty"):  # hf takes any release: Parquet tables
            export(wh, "ir", "hf", tmp_path / "hf")


def test_random_answers_on_beir_seeds_carry_a_run_to_complete_exports(
    tmp_path: Path, make_fake: Callable[..., FakeOpenAI]
) -> None:
    warehouse = tmp_path / "random.duckdb"
    fake = make_fake(mode="random")
    validated, unvalidated = (
        execute(resolve("infir", seeds=BEIR, limit=10, base_url=fake.base_url, model="m", sets=sets), warehouse)
        for sets in (["distractors=2"], ["distractors=2", "validate=false"])
    )
    with Warehouse(warehouse, read_only=True) as wh:
        judged = {s["stage"]: s for s in audit.funnel(wh, validated.run_id)["stages"]}["validate"]
        assert judged["in"] == 10 and judged["sent"] == 30 and len(judged["judges"]) == 3
        run_id = unvalidated.run_id
        report = audit.funnel(wh, run_id)
        export(wh, release_for(wh, run_id), "infir", tmp_path / "out")
    assert report["status"] == "completed" and report["accepted"] == 10 and report["llm_calls"]["sent"] == 0
    exported = rows(tmp_path / "out" / "infir.jsonl")
    assert len(exported) == 10
    for row in exported:
        assert all(row[name] and row[name].strip() for name in SEVEN)
        assert not any("\n" in row[name] for name in SEVEN if name.startswith(("instruction", "query")))


def test_cli_run_on_demo_seeds_against_random_answers(tmp_path: Path, make_fake: Callable[..., FakeOpenAI]) -> None:
    """The acceptance path through the real command: run, funnel, audit, export, show."""
    warehouse = str(tmp_path / "cli.duckdb")
    fake = make_fake(mode="random")
    args = ["--base-url", fake.base_url, "--model", "m", "--set", "distractors=0"]
    proc = cli("--warehouse", warehouse, "run", "infir", "--seeds", "demo", "--limit", "8", *args, env=WIDE)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "neg. query" in proc.stdout and "all three" in proc.stdout
    funnel = json.loads(invoke("--warehouse", warehouse, "funnel", "--json").stdout)
    validate = {s["stage"]: s for s in funnel["stages"]}["validate"]
    assert validate["in"] == 8 and funnel["accepted"] == validate["out"]
    removed = json.loads(
        invoke("--warehouse", warehouse, "audit", "--stage", "validate", "--limit", "0", "--json").stdout
    )
    assert len(removed) == 8 - validate["out"]
    assert all(r["judge"].startswith("llm:") and "gold [" in r["reason"] for r in removed)
    out = tmp_path / "out"
    assert invoke("--warehouse", warehouse, "export", "--format", "infir", "--out", str(out)).returncode == 0
    exported = rows(out / "infir.jsonl")
    assert len(exported) == validate["out"]
    assert {r["id"] for r in exported}.isdisjoint(r["group_id"] for r in removed)
    for row in exported:
        assert all(row[name].strip() for name in SEVEN)
    shown = json.loads(invoke("--warehouse", warehouse, "show", removed[0]["item_id"], "--json").stdout)
    assert [p["kind"] for p in shown["parents"]][:2] == ["rewrite", "rewrite"]
    assert {v["judge"] for v in shown["verdicts"]} == {"llm:positive", "llm:negative_instruction", "llm:negative_query"}
