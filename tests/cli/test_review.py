"""Human verdicts: the review file round trip, and how far the LLM judges agree with people."""

from __future__ import annotations

import csv
import json
import re
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ifsynth.flows.evaluation.agreement import agreement
from ifsynth.warehouse.store import Warehouse
from tests.conftest import cli, invoke
from tests.fake_openai import FakeOpenAI
from tests.helpers import field, query, sensible, small_instructir

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("review")
    warehouse = root / "w.duckdb"
    with FakeOpenAI(mode="responder", responder=sensible) as fake:
        run_id = small_instructir(warehouse, fake.base_url)
    yield {"root": root, "warehouse": str(warehouse), "run_id": run_id}


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_agreement_figures_match_a_hand_count() -> None:
    table = [("reject", "reject")] * 4 + [("reject", "pass")] + [("pass", "reject")] * 2 + [("pass", "pass")] * 3
    (figures,) = agreement({"stage": "judge", "judge": "llm", "llm": a, "human": b} for a, b in table)
    # observed 7/10; chance 0.5 x 0.6 + 0.5 x 0.4 = 0.5; kappa (0.7 - 0.5) / (1 - 0.5)
    assert figures.items == 10 and figures.accuracy == pytest.approx(0.7)
    assert figures.confusion == {"reject": {"reject": 4, "pass": 1}, "pass": {"reject": 2, "pass": 3}}
    assert figures.precision == pytest.approx(4 / 5) and figures.recall == pytest.approx(4 / 6)
    assert figures.kappa == pytest.approx(0.4)
    (same,) = agreement({"stage": "s", "judge": "llm", "llm": "pass", "human": "pass"} for _ in range(3))
    assert same.kappa is None and same.precision is None and same.recall is None and same.accuracy == 1


def test_a_review_file_round_trip_records_human_verdicts_that_agreement_measures(run: dict[str, Any]) -> None:
    wh, root = run["warehouse"], run["root"]
    exported = root / "review.jsonl"
    done = invoke("--warehouse", wh, "review", "export", "--status", "all", "--out", str(exported))
    assert done.returncode == 0, done.stderr
    rows = lines(exported)
    assert {r["llm_decision"] for r in rows} == {"pass", "reject"} and all(r["human_decision"] == "" for r in rows)
    judged = [r for r in rows if r["stage"] == "judge_relevance"]
    assert all(r["text"] and r["instruction"] and r["query"] for r in judged), "the texts a person needs"
    rejected = [r for r in judged if r["llm_decision"] == "reject"][:2]
    passed = [r for r in judged if r["llm_decision"] == "pass"][:3]
    assert len(rejected) == 2 and len(passed) == 3
    # people: both rejections overruled (accept), two passes confirmed, one pass rejected
    decisions = ["accept", "accept", "accept", "keep", "reject"]
    filled = root / "filled.csv"
    with filled.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        for row, decision in zip([*rejected, *passed], decisions, strict=True):
            writer.writerow({**row, "human_decision": decision, "note": "checked by hand"})
        writer.writerow(rows[-1])  # a row left empty is no decision
    for _ in range(2):  # importing again replaces, never doubles
        done = invoke("--warehouse", wh, "review", "import", str(filled), "--reviewer", "Ada L.")
        assert done.returncode == 0 and "5 human verdicts" in done.stdout, done.stderr
    with Warehouse(wh, read_only=True) as warehouse:
        people = query(warehouse, "SELECT judge, decision, reason FROM verdicts WHERE judge LIKE 'human%'")
    assert len(people) == 5 and {p["judge"] for p in people} == {"human:ada_l"}
    assert {p["reason"] for p in people} == {"checked by hand"}
    report = json.loads(invoke("--warehouse", wh, "agreement", "--json").stdout)
    (figures,) = report["judges"]
    # llm reject/human pass: 2; llm pass/human pass: 2; llm pass/human reject: 1; no rejection both made
    assert (figures["stage"], figures["judge"], figures["items"]) == ("judge_relevance", "llm", 5)
    assert figures["confusion"] == {"reject": {"reject": 0, "pass": 2}, "pass": {"reject": 1, "pass": 2}}
    chance = 0.4 * 0.2 + 0.6 * 0.8
    assert figures["accuracy"] == pytest.approx(0.4) and figures["precision"] == 0 and figures["recall"] == 0
    assert figures["kappa"] == pytest.approx((0.4 - chance) / (1 - chance))
    copy = shutil.copy(wh, root / "copy.duckdb")
    with Warehouse(copy) as warehouse:  # a stage run again forgets its own verdicts, not people's
        warehouse.clear_stage(run["run_id"], "judge_relevance")
        kept = query(warehouse, "SELECT judge FROM verdicts WHERE stage = 'judge_relevance'")
    assert [k["judge"] for k in kept] == ["human:ada_l"] * 5


def test_a_bad_review_file_is_one_line_and_writes_nothing(run: dict[str, Any], tmp_path: Path) -> None:
    wh = run["warehouse"]
    exported = tmp_path / "r.jsonl"
    assert invoke("--warehouse", wh, "review", "export", "--sample", "2", "--out", str(exported)).returncode == 0
    first, second = lines(exported)
    bad_decision = tmp_path / "bad.jsonl"
    bad_decision.write_text(json.dumps({**first, "human_decision": "accept"}) + "\n"
                            + json.dumps({**second, "human_decision": "maybe"}) + "\n")  # fmt: skip
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text(json.dumps({**first, "item_id": "nope", "human_decision": "reject"}) + "\n")
    with Warehouse(wh, read_only=True) as warehouse:
        before = query(warehouse, "SELECT count(*) AS n FROM verdicts WHERE judge LIKE 'human%'")[0]["n"]
    refusals = [
        (bad_decision, "bad.jsonl:2: human_decision `maybe` must be one of accept, reject"),
        (unknown, "has no verdict on item nope"),
        (tmp_path / "none.csv", "does not exist"),
    ]
    for path, message in refusals:
        done = invoke("--warehouse", wh, "review", "import", str(path))
        assert done.returncode != 0 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
    with Warehouse(wh, read_only=True) as warehouse:
        after = query(warehouse, "SELECT count(*) AS n FROM verdicts WHERE judge LIKE 'human%'")[0]["n"]
    assert after == before, "nothing of a refused file was written"


def picky(body: dict[str, Any]) -> dict[str, Any]:
    """`sensible`, but the specificity judge names a wrong passage for reader 2: those rewrites are rejected."""
    name, prompt = body["response_format"]["json_schema"]["name"], body["messages"][-1]["content"]
    if name.startswith("Pick") and "I am reader 2 " in field(prompt, "About the searcher"):
        wanted = field(prompt, "About the searcher")
        labels = re.findall(r"^\[(\d+)\] (.*)$", prompt, re.MULTILINE)
        wrong = next(label for label, text in labels if wanted not in text)
        return {"explanation": "another reader", "best": wrong}
    return sensible(body)


def release_instructions(warehouse: str, release: str) -> set[str]:
    with Warehouse(warehouse, read_only=True) as wh:
        rows = query(wh, "SELECT instruction FROM release_queries WHERE release = ?", [release])
    return {r["instruction"] for r in rows}


def funnel(warehouse: str, run: str) -> dict[str, dict[str, int]]:
    """A run's funnel, by stage."""
    stages = json.loads(invoke("--warehouse", warehouse, "funnel", run, "--json").stdout)["stages"]
    return {s["stage"]: s for s in stages}


def unbalanced(stages: dict[str, dict[str, int]]) -> list[str]:
    """The stages whose inputs are not their columns' sum: those that make several items of one input."""
    columns = ("out", "set_aside", "rejected", "parse_error", "failed")
    return [name for name, s in stages.items() if s["in"] != sum(s[column] for column in columns)]


def test_release_counts_people_over_judges_and_sends_nothing(tmp_path: Path) -> None:
    wh = str(tmp_path / "w.duckdb")
    with FakeOpenAI(mode="responder", responder=picky) as fake:
        small_instructir(wh, fake.base_url, name="judged", min_group_size=1)
        before = release_instructions(wh, "judged")
        exported = tmp_path / "review.jsonl"
        assert invoke("--warehouse", wh, "review", "export", "--status", "all", "--out", str(exported)).returncode == 0
        rows = [r for r in lines(exported) if r["stage"] == "judge_specificity"]
        restored = [r for r in rows if r["llm_decision"] == "reject"][:2]
        removed = [r for r in rows if r["llm_decision"] == "pass" and r["instruction"] in before][:1]
        assert len(restored) == 2 and len(removed) == 1
        assert not {r["instruction"] for r in restored} & before, "the judge kept them out"
        filled = tmp_path / "filled.jsonl"
        decided = zip([*restored, *removed], ["accept", "accept", "reject"], strict=True)
        filled.write_text("".join(json.dumps({**r, "human_decision": d}) + "\n" for r, d in decided))
        assert invoke("--warehouse", wh, "review", "import", str(filled)).returncode == 0
        sent = fake.stats()["requests"]
        done = invoke("--warehouse", wh, "release", "judged", "--name", "reviewed")
        assert done.returncode == 0, done.stderr
        assert fake.stats()["requests"] == sent, "a release is made from the cache alone"
    assert "3 decisions overruled by people" in done.stdout
    after = release_instructions(wh, "reviewed")
    expected = (before - {removed[0]["instruction"]}) | {r["instruction"] for r in restored}
    assert after == expected, "exactly the people's changes"
    assert release_instructions(wh, "judged") == before, "the judged release stays as it was"
    with Warehouse(wh, read_only=True) as warehouse:
        (card,) = query(warehouse, "SELECT card FROM releases WHERE name = 'reviewed'")
    assert json.loads(card["card"])["reviewed"]["overruled"] == 3
    judged, reviewed = funnel(wh, "judged"), funnel(wh, "reviewed")
    was, now = judged["judge_specificity"], reviewed["judge_specificity"]
    assert (now["out"], now["rejected"]) == (was["out"] + 2 - 1, was["rejected"] - 2 + 1), "as the people decided"
    assert reviewed["group_filter"]["in"] == now["out"], "what a stage passed on is what the next takes in"
    assert unbalanced(reviewed) == unbalanced(judged), "people's decisions count once, as out or rejected"


def test_a_review_page_on_a_port_in_use_is_one_line(run: dict[str, Any]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = cli("--warehouse", run["warehouse"], "review", "serve", "--port", port)
    assert done.returncode == 2 and f"--port {port}: Address already in use" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "reviewing" not in done.stderr


def test_a_release_with_nothing_in_the_cache_fails_in_one_line(run: dict[str, Any], tmp_path: Path) -> None:
    wh = str(shutil.copy(run["warehouse"], tmp_path / "w.duckdb"))
    with duckdb.connect(wh) as db:  # a cache emptied behind ifsynth's back
        db.execute("DELETE FROM llm_calls")
    done = invoke("--warehouse", wh, "release", run["run_id"], "--name", "from-nothing")
    assert done.returncode != 0 and "asks failed" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_run_or_release_named_as_an_imported_release_is_refused_and_the_import_kept(
    run: dict[str, Any], tmp_path: Path
) -> None:
    wh = str(shutil.copy(run["warehouse"], tmp_path / "w.duckdb"))
    assert invoke("--warehouse", wh, "export", "--format", "beir", "--out", str(tmp_path / "beir")).returncode == 0
    assert invoke("--warehouse", wh, "import", "beir", str(tmp_path / "beir"), "--name", "orig").returncode == 0
    with Warehouse(wh, read_only=True) as store:
        before = store.query("SELECT count(*) AS n FROM release_queries WHERE release = 'orig'")[0]["n"]
    with FakeOpenAI() as fake:
        tried = [
            invoke("--warehouse", wh, "release", run["run_id"], "--name", "orig"),
            cli("--warehouse", wh, "run", "instructir", "--seeds", "demo", "--limit", "2", "--base-url",
                fake.base_url, "--model", "m", "--name", "orig"),
        ]  # fmt: skip
    refused = (
        "error: run name `orig` is taken by a release imported from import:beir, which the run's release would "
        "replace; give another --name"
    )
    for done in tried:
        assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == refused, done.stderr
        assert "Traceback" not in done.stderr
    with Warehouse(wh, read_only=True) as store:
        kept = store.release_row("orig")
        after = store.query("SELECT count(*) AS n FROM release_queries WHERE release = 'orig'")[0]["n"]
    assert kept is not None and kept["run_id"] is None and kept["source"] == "import:beir" and after == before > 0
    name = store_name(wh, run["run_id"])
    with duckdb.connect(wh) as db:  # as if the run had stopped before its release
        db.execute("DELETE FROM releases WHERE name = ?", [name])
    again = invoke("--warehouse", wh, "import", "beir", str(tmp_path / "beir"), "--name", name)
    assert again.returncode == 2 and again.stderr.strip() == (
        f"error: run {run['run_id']} is named `{name}`, as its release will be; pass --name with another name"
    ), again.stderr


def store_name(warehouse: str, run_id: str) -> str:
    with Warehouse(warehouse, read_only=True) as store:
        return store.run(run_id).name
