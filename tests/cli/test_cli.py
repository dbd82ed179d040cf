"""The `ifsynth` command end to end against the loopback fake answering every schema with a random valid
instance: run, rerun from the cache, exports, audit trail, kill and resume, the write lock, secrets, and
one-line errors. Runs whose process matters (the first, a killed or signalled one, a second writer, one
given secrets) are child processes; commands that read or export what a run wrote run in the test's own."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import DatasetCard

from ifsynth.flows.run import local_prefect
from ifsynth.warehouse.store import Warehouse
from tests.conftest import INSTRUCTIR_SEEDS, REPO, cli, invoke
from tests.fake_openai import FakeOpenAI
from tests.helpers import export_files
from tests.servers import fixed_reply

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server

SECRET = "sk-test-7c2e91ab55d0-NEVER-STORED"
CONCURRENCY = 16  # the endpoint default


def run_args(server: FakeOpenAI, warehouse: Path) -> list[str]:
    return [
        "--warehouse", str(warehouse), "run", "instructir", "--seeds", f"beir:{INSTRUCTIR_SEEDS}", "--limit", "12",
        "--base-url", server.base_url, "--model", "m", "--set", "min_group_size=1",
        "--set", "instructions_per_query=4",
    ]  # fmt: skip


def said(stderr: str) -> list[str]:
    """What a command said on stderr, without the line a run opens with."""
    return [line for line in stderr.strip().splitlines() if not line.endswith("; checking inputs")]


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(ok(proc).stdout)


FAKE = {"latency": 0.01}  # the module's `server`


@pytest.fixture(scope="module")
def first(server: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("first")
    warehouse = root / "ifsynth.duckdb"
    proc = ok(cli(*run_args(server, warehouse), env={"OPENAI_API_KEY": SECRET}))
    requests = server.stats()["requests"]
    ok(invoke("--warehouse", str(warehouse), "export", "--format", "beir", "--out", str(root / "beir")))
    return {"root": root, "warehouse": warehouse, "requests": requests, "proc": proc}


def test_run_writes_a_consistent_beir_folder(first: dict[str, Any]) -> None:
    beir = first["root"] / "beir"
    corpus = [json.loads(line) for line in (beir / "corpus.jsonl").read_text().splitlines()]
    queries = [json.loads(line) for line in (beir / "queries.jsonl").read_text().splitlines()]
    lines = (beir / "qrels" / "test.tsv").read_text().splitlines()
    assert lines[0] == "query-id\tcorpus-id\tscore"
    qrels = [line.split("\t") for line in lines[1:]]
    assert qrels, "random answers still let some instances through"
    corpus_ids, query_ids = {d["_id"] for d in corpus}, {q["_id"] for q in queries}
    assert all(set(d) == {"_id", "title", "text"} for d in corpus)
    assert {q for q, _, _ in qrels} == query_ids
    assert {d for _, d, _ in qrels} <= corpus_ids
    for qid, did, score in qrels:
        assert qid.rsplit("_", 1)[1] == did.rsplit("_", 1)[1] and score == "1"
    for q in queries:
        assert q["text"] == f"{q['metadata']['instruction']} [SEP] {q['metadata']['origin_query']}"
    funnel = as_json(invoke("--warehouse", str(first["warehouse"]), "funnel", "--json"))
    assert [s["stage"] for s in funnel["stages"]] == [
        "select", "instructions", "rewrite", "judge_relevance", "judge_specificity", "group_filter", "assemble",
    ]  # fmt: skip
    assert funnel["accepted"] == len(qrels)
    assert funnel["llm_calls"]["sent"] == first["requests"]
    for stage in funnel["stages"]:
        assert set(stage) >= {"stage", "in", "out", "rejected", "parse_error", "failed"}
        unaccepted = stage["set_aside"] + stage["rejected"] + stage["parse_error"] + stage["failed"]
        if stage["stage"] not in ("instructions", "rewrite"):  # these make several outputs per input
            assert stage["in"] == stage["out"] + unaccepted, stage
    select = funnel["stages"][0]
    assert select["stage"] == "select" and select["set_aside"] > 0, "--limit 12 leaves eligible seeds aside"
    assert "README.md" in export_files(beir) and "Yield per stage" in (beir / "README.md").read_text()
    card = DatasetCard.load(beir / "README.md")
    configs = {c["config_name"]: c["data_files"][0]["path"] for c in card.data.to_dict()["configs"]}
    assert configs == {
        "corpus": "corpus.jsonl", "queries": "queries.jsonl",
        "only_instruction_queries": "only_instruction_queries.jsonl", "only_queries": "only_queries.jsonl",
    }, "each JSONL file its own config"  # fmt: skip
    # datasets reads a folder with one builder: the TSV qrels are named with the call that loads each alone
    for name in ("qrels/test.tsv", "qrels/for_only_query_test.tsv"):
        assert f"`{name}`: `load_dataset('csv', data_files='{name}', sep='\\t')`" in card.text


def test_rerun_sends_nothing_and_exports_the_same_bytes(server: FakeOpenAI, first: dict[str, Any]) -> None:
    ok(invoke(*run_args(server, first["warehouse"])))
    assert server.stats()["requests"] == first["requests"]
    funnel = as_json(invoke("--warehouse", str(first["warehouse"]), "funnel", "--json"))
    assert funnel["llm_calls"]["sent"] == 0 and funnel["llm_calls"]["cached"] == first["requests"]
    again = first["root"] / "beir-again"
    ok(invoke("--warehouse", str(first["warehouse"]), "export", "--format", "beir", "--out", str(again)))
    assert export_files(again) == export_files(first["root"] / "beir")
    cards = [DatasetCard.load(folder / "README.md").data.to_dict() for folder in (again, first["root"] / "beir")]
    assert cards[0]["ifsynth"]["run_id"] != cards[1]["ifsynth"]["run_id"], "the card names the run that made it"


@pytest.mark.parametrize("fmt, expected", [
    ("mteb", {"corpus/test-00000-of-00001.parquet", "queries/test-00000-of-00001.parquet",
              "instruction/test-00000-of-00001.parquet", "default/test-00000-of-00001.parquet", "README.md"}),
    ("jsonl", {"instances.jsonl", "corpus.jsonl", "README.md"}),
    ("parquet", {"instances.parquet", "corpus.parquet", "README.md"}),
])  # fmt: skip
def test_other_export_formats(first: dict[str, Any], fmt: str, expected: set[str]) -> None:
    out = first["root"] / fmt
    ok(invoke("--warehouse", str(first["warehouse"]), "export", "--format", fmt, "--out", str(out)))
    assert set(export_files(out)) == expected
    card = DatasetCard.load(out / "README.md")
    meta = card.data.to_dict()
    assert meta["license"] == "other" and meta["language"] == ["en"] and meta["task_categories"] == ["text-retrieval"]
    assert meta["size_categories"] == ["n<1K"] and {"ifsynth", "instructir"} <= set(meta["tags"])
    runs = as_json(invoke("--warehouse", str(first["warehouse"]), "runs", "--json"))
    assert meta["ifsynth"]["run_id"] in {r["run_id"] for r in runs} and meta["ifsynth"]["version"]
    names = [c["config_name"] for c in meta["configs"]]
    expected_names = {"mteb": ["corpus", "queries", "instruction", "default"], "jsonl": ["instances", "corpus"]}
    assert names == expected_names.get(fmt, ["instances", "corpus"])
    for config in meta["configs"]:
        (path,) = [f["path"] for f in config["data_files"]]
        assert len(list(out.glob(path))) == 1, path
    assert "| local |" in card.text and "127.0.0.1" not in card.text, "the endpoint's kind, not its URL"
    named = first["root"] / f"{fmt}-named"
    ok(invoke("--warehouse", str(first["warehouse"]), "export", "--format", fmt, "--out", str(named),
              "--card-endpoints"))  # fmt: skip
    assert "http://127.0.0.1:" in (named / "README.md").read_text()


def test_every_kept_and_removed_item_traces_to_its_calls(first: dict[str, Any]) -> None:
    wh = str(first["warehouse"])
    removed = as_json(invoke("--warehouse", wh, "audit", "--status", "rejected", "--limit", "0", "--json"))
    judged = [r for r in removed if r["decided_by"] in ("judge_relevance", "judge_specificity")]
    kept = as_json(invoke("--warehouse", wh, "audit", "--status", "accepted", "--limit", "0", "--json"))
    assert judged and kept
    assert any(r["decided_by"] == "select" and "percentile band" in r["reason"] for r in removed)
    for row in (judged[0], kept[0]):
        shown = as_json(invoke("--warehouse", wh, "show", row["item_id"], "--json"))
        assert shown["item"]["item_id"] == row["item_id"]
        assert [p["kind"] for p in shown["parents"]] == ["instruction", "seed"]
        assert shown["verdicts"], "judged items carry their verdicts"
        templates = {c["template"] for c in shown["llm_calls"]}
        assert "instructir/rewrite" in templates
        assert templates & {"instructir/judge_relevance", "instructir/judge_specificity"}
        for call in shown["llm_calls"]:
            assert len(call["template_hash"]) == 16 and call["response"]
            assert call["messages"][0]["role"] == "system" and call["messages"][-1]["role"] == "user"
            assert call["model"] == "m" and "temperature" in call["parameters"]


def test_the_reports_reasons_have_one_row_per_rule_not_per_measured_value(first: dict[str, Any]) -> None:
    wh, out = str(first["warehouse"]), first["root"] / "report.html"
    ok(invoke("--warehouse", wh, "report", "--out", str(out)))
    section = out.read_text().split("<h2>Rejection reasons</h2>", 1)[1].split("<h2>", 1)[0]
    head, *rows = [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row) for row in re.findall(r"<tr>(.*?)</tr>", section)]
    assert head == ["stage", "judge", "decision", "rule", "n", "measured", "threshold"]
    keys = [tuple(row[:4]) for row in rows]
    assert len(keys) == len(set(keys)), "one row per stage, judge, decision and rule"
    select = {row[1]: row for row in rows if row[0] == "select"}
    assert set(select) <= {"rule:positives", "rule:query_length", "rule:passage_length"} and select
    funnel = as_json(invoke("--warehouse", wh, "funnel", "--reasons", "--json"))
    rejected = next(s["rejected"] for s in funnel["stages"] if s["stage"] == "select")
    grouped = [r for r in funnel["reasons"] if r["stage"] == "select"]
    assert len(grouped) == len(select) and sum(r["n"] for r in grouped) >= rejected > 10 * len(grouped)
    for reason in grouped:  # the spread of hundreds of distinct lengths, beside the rule that measured them
        measured = reason["measured"]
        assert measured["min"] <= measured["quartiles"][0] <= measured["quartiles"][2] <= measured["max"]
        assert measured["min"] < measured["max"] and 1 < len(measured["histogram"].strip()) <= 8
        assert f"{measured['min']:g}-{measured['max']:g}" in select[reason["judge"]][5]
        assert not re.search(r"\b\d+ (chars|words)\b", reason["rule"]), "no measured value in the rule"


@pytest.mark.parametrize("command", [["runs"], ["funnel", "--reasons"], ["audit"]])
def test_tables_fit_80_columns_with_ids_whole(first: dict[str, Any], command: list[str]) -> None:
    wh = str(first["warehouse"])
    shown = ok(invoke("--warehouse", wh, *command, env={"COLUMNS": "80"})).stdout
    lines = shown.splitlines()
    assert max(len(line) for line in lines) <= 80, shown
    assert "…" not in shown, "no header or cell cut short"
    runs = [r["run_id"] for r in as_json(invoke("--warehouse", wh, "runs", "--json"))]
    items = [r["item_id"] for r in as_json(invoke("--warehouse", wh, "audit", "--json"))]
    ids = {"runs": runs, "funnel": runs[-1:], "audit": items}[command[0]]
    assert ids and all(i in shown for i in ids), "every id whole, on one line"


def test_evaluate_takes_the_newest_runs_release(first: dict[str, Any]) -> None:
    wh, out = str(first["warehouse"]), first["root"] / "bm25.trec"
    report = as_json(invoke("--warehouse", wh, "evaluate", "--retriever", "bm25", "--out", str(out), "--json"))
    newest = as_json(invoke("--warehouse", wh, "runs", "--json"))[-1]["run_id"]
    named = as_json(invoke("--warehouse", wh, "evaluate", newest, "--run", str(out), "--json"))
    assert report["release"] == named["release"] and report["modes"] == named["modes"]


def test_the_api_key_is_nowhere(first: dict[str, Any]) -> None:
    for path in first["root"].rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in first["proc"].stdout + first["proc"].stderr


@pytest.mark.parametrize("members", [1, 2])
def test_credentials_in_the_base_url_leave_no_trace(server: FakeOpenAI, tmp_path: Path, members: int) -> None:
    secrets = ("someuser", "pa55w0rdXYZ", "k3ySECRETq")
    url = server.base_url.replace("http://", "http://someuser:pa55w0rdXYZ@") + "?key=k3ySECRETq&api-version=2"
    warehouse = tmp_path / "w.duckdb"
    args = ["--warehouse", str(warehouse), "run", "instructir", "--seeds", "demo", "--limit", "3",
            *["--base-url", url] * members, "--model", "m", "--set", "min_group_size=1"]  # fmt: skip
    server.reset()
    proc = ok(cli(*args))
    assert server.headers[0]["authorization"].startswith("Basic "), "user and password go as Basic auth"
    exported = ok(invoke("--warehouse", str(warehouse), "export", "--out", str(tmp_path / "out")))
    shown = ok(invoke("--warehouse", str(warehouse), "funnel", "--json")).stdout
    said = proc.stdout + proc.stderr + exported.stdout + exported.stderr + shown
    for secret in secrets:
        assert secret not in said
        for path in tmp_path.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path


def test_a_key_an_endpoint_echoes_is_not_stored(tmp_path: Path) -> None:
    echo = json.dumps({"error": {"message": f"Incorrect API key provided: {SECRET}"}}).encode()
    with fixed_reply(401, echo) as endpoint:
        proc = cli("--warehouse", str(tmp_path / "w.duckdb"), "run", "instructir", "--seeds", "demo",
                   "--base-url", endpoint.base_url, "--model", "m", env={"OPENAI_API_KEY": SECRET})  # fmt: skip
    assert proc.returncode == 4 and SECRET not in proc.stdout + proc.stderr
    audit = invoke("--warehouse", str(tmp_path / "w.duckdb"), "audit", "--json")
    assert SECRET not in audit.stdout + audit.stderr
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("mode", [[], ["--batch"]], ids=["live", "batch"])
def test_a_key_an_endpoint_echoes_reaches_no_log_or_state_in_prefect(tmp_path: Path, mode: list[str]) -> None:
    """Past the look at the endpoint, every request answers 401 with the key in its text: the run stops (on
    its breaker; in batch mode at the upload), and neither its log lines in Prefect (the failure's traceback
    among them) nor its flow and task runs' states carry the key."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName, LogFilter, LogFilterFlowRunId

    echo = json.dumps({"error": {"message": f"Incorrect API key provided: {SECRET}"}}).encode()
    warehouse = tmp_path / "w.duckdb"
    with fixed_reply(401, echo, lists_models=True) as endpoint:
        proc = cli("--warehouse", str(warehouse), "run", "instructir", "--seeds", "demo", "--limit", "2",
                   "--base-url", endpoint.base_url, "--model", "m", *mode, env={"OPENAI_API_KEY": SECRET})  # fmt: skip
    assert proc.returncode == 4 and SECRET not in proc.stdout + proc.stderr
    assert ("answered 401 to POST /files" if mode else "answered 401") in proc.stderr
    assert "check the key in OPENAI_API_KEY" in proc.stderr
    sent = "/files" if mode else "/chat/completions"
    assert any(path.endswith(sent) for path in endpoint.hits), "the requests went out"
    with Warehouse(warehouse, read_only=True) as store:
        name = f"instructir/{store.run().name}"
    with get_client(sync_client=True) as client:
        (flow_run,) = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run.id])))
        task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))
    errors = [log.message for log in logs if log.level >= 40]
    assert any("answered 401" in message for message in errors), "logged"
    states = [flow_run.state, *(task_run.state for task_run in task_runs)]
    said = [log.message for log in logs] + [state.message or "" for state in states if state is not None]
    assert not [text for text in said if SECRET in text]


def test_a_second_writer_gets_one_line(server: FakeOpenAI, first: dict[str, Any]) -> None:
    with Warehouse(first["warehouse"]):
        proc = cli(*run_args(server, first["warehouse"]))
    assert proc.returncode != 0
    lines = said(proc.stderr)
    assert len(lines) == 1 and "is in use by another process" in lines[0]


def test_killed_run_resumes_within_the_concurrency_bound(
    server: FakeOpenAI, first: dict[str, Any], tmp_path: Path
) -> None:
    warehouse = tmp_path / "crash.duckdb"
    server.reset()
    server.configure(latency=0.05)
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "ifsynth.flows.cli", *run_args(server, warehouse)],
            cwd=REPO,
            env={k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"},  # on the local server
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while server.stats()["requests"] < 40:
            assert child.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        killed_at = server.stats()["requests"]
        assert killed_at < first["requests"]
        assert local_prefect.running() is not None, "the local server outlives a killed run, for the next one"
        shown = as_json(invoke("--warehouse", str(warehouse), "runs", "--json"))
        assert [r["status"] for r in shown] == ["died"]
        Warehouse(warehouse).close()  # a writer's open records what readers showed, not another status
        assert [r["status"] for r in as_json(invoke("--warehouse", str(warehouse), "runs", "--json"))] == ["died"]
        resumed = ok(invoke(*run_args(server, warehouse)))
    finally:
        server.configure(latency=0.01)
    assert "continued run" in resumed.stdout
    assert server.stats()["requests"] <= first["requests"] + CONCURRENCY
    runs = as_json(invoke("--warehouse", str(warehouse), "runs", "--json"))
    assert [r["status"] for r in runs] == ["completed"]
    out = tmp_path / "beir"
    ok(invoke("--warehouse", str(warehouse), "export", "--format", "beir", "--out", str(out)))
    assert export_files(out) == export_files(first["root"] / "beir")


def test_a_running_run_can_be_watched_from_another_process(server: FakeOpenAI, tmp_path: Path) -> None:
    warehouse = tmp_path / "w.duckdb"
    server.reset()
    server.configure(latency=2.0)  # a run of about half a minute
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "ifsynth.flows.cli", *run_args(server, warehouse)],
            cwd=REPO, env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while server.stats()["requests"] < 20:
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)

        def watch() -> tuple[int, Any]:
            funnel = as_json(invoke("--warehouse", str(warehouse), "funnel", "--json"))
            runs = as_json(invoke("--warehouse", str(warehouse), "runs", "--json"))
            # answered while the run goes on, not once it let go of the warehouse
            assert funnel["status"] == "running" and [r["status"] for r in runs] == ["running"]
            assert child.poll() is None
            return funnel["llm_calls"]["sent"], funnel["in_progress"]

        first = watch()
        # a second run of the same warehouse is refused in one line that names the run, before Prefect starts
        second = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "ifsynth.flows.cli", *run_args(server, warehouse)],
            cwd=REPO, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        timings = [line for line in second.stderr.splitlines() if line.startswith("import time:")]
        lines = said("\n".join(line for line in second.stderr.splitlines() if line not in timings))
        assert second.returncode != 0 and len(lines) == 1, second.stderr[-2000:]
        assert f"is in use by another process (pid {child.pid}, a run)" in lines[0]
        assert "prefect" not in {line.rsplit("|", 1)[-1].strip() for line in timings}
        while (now := watch())[0] <= first[0]:  # the run records its calls in batches
            assert time.monotonic() < deadline, f"the counts grow while the run writes: {first}, then {now}"
            time.sleep(0.5)
        assert first[1] is not None and first[1]["total"] > 0
        server.configure(latency=0.01)  # seen while running: the rest of the run need not take its half minute
        assert child.wait(timeout=120) == 0
    finally:
        server.configure(latency=0.01)
    assert not (tmp_path / "w.duckdb.live").exists(), "the run's answering address goes with it"
    assert as_json(invoke("--warehouse", str(warehouse), "runs", "--json"))[0]["status"] == "completed"


@pytest.mark.parametrize("signum, to_group, code", [
    (signal.SIGINT, True, 130),  # a terminal's Ctrl-C reaches the whole process group
    (signal.SIGTERM, False, 143),
])  # fmt: skip
def test_a_stop_signal_interrupts_the_run_and_the_same_command_finishes_it(
    server: FakeOpenAI, first: dict[str, Any], tmp_path: Path, signum: int, to_group: bool, code: int
) -> None:
    warehouse = tmp_path / "w.duckdb"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # on the local server
    server.reset()
    child = subprocess.Popen(
        [sys.executable, "-m", "ifsynth.flows.cli", *run_args(server, warehouse)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        server.configure(latency=0.3)  # before its first request: the child takes seconds to start
        deadline = time.monotonic() + 120
        while server.stats()["requests"] < 20:
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.05)
        (os.killpg if to_group else os.kill)(child.pid, signum)
        _, stderr = child.communicate(timeout=60)  # a bound for a hang, not a timing: a busy machine is slow
        assert child.returncode == code
        sent = server.stats()["requests"]
        time.sleep(1)
        assert server.stats()["requests"] == sent, "no request after the exit"
    finally:
        server.configure(latency=0.01)
        if child.poll() is None:  # a run that did not stop outlives no failed test
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    lines = stderr.strip().splitlines()
    assert lines[0].endswith("checking inputs")
    assert lines[-1] == "interrupted; run the same command again to continue from where it stopped"
    assert "Traceback" not in stderr and "leaked" not in stderr and "Crash" not in stderr
    runs = as_json(invoke("--warehouse", str(warehouse), "runs", "--json"))
    assert [r["status"] for r in runs] == ["interrupted"]
    assert "continued run" in ok(invoke(*run_args(server, warehouse))).stdout
    out = tmp_path / "beir"
    ok(invoke("--warehouse", str(warehouse), "export", "--format", "beir", "--out", str(out)))
    assert export_files(out) == export_files(first["root"] / "beir")


@pytest.mark.parametrize("args, message", [
    (["run", "instructir", "--seeds", "beir:/no/such/dir"], "missing corpus.jsonl"),
    (["run", "instructir", "--seeds", "demo", "--set", "no_such_key=1"], "unknown setting `no_such_key`"),
    (["run", "instructir", "--seeds", "demo", "--set", "min_group_size=0"], "min_group_size"),
    (["run", "nope", "--seeds", "demo"], "unknown recipe `nope`"),
    (["run", "instructir", "--seeds", "demo", "--base-url", "http://127.0.0.1:9/v1"], "give --model"),
    (["run", "instructir", "--seeds", "irds:no/such-dataset", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"],
     "ir_datasets has no dataset"),
    (["show", "rewrite-0000000000000000"], "no item"),
    (["funnel", "no-such-run"], "no run `no-such-run`"),
    (["audit", "--status", "meh"], "--status must be one of ok, rejected, parse_error, failed, accepted"),
    (["audit", "--stage", "judge_relevence"], "its stages: select, instructions, rewrite, judge_relevance,"),
    (["evaluate", "any", "--retriever", "bm25", "--depth", "0"], "Invalid value for '--depth'"),
    (["run", "instructir", "--seeds", "demo", "--base-url", "http://127.0.0.1:9/v1", "--model", ""],
     "setting `model`: a model's name cannot be empty"),
])  # fmt: skip
def test_bad_input_is_one_line(first: dict[str, Any], args: list[str], message: str) -> None:
    proc = invoke("--warehouse", str(first["warehouse"]), *args)
    assert proc.returncode != 0
    lines = said(proc.stderr)
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
