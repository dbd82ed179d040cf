"""A run against an endpoint that cannot serve it stops early and says why in one line; a run whose asks
mostly failed does not call itself completed; replies that could not be completions are refused unread."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO, cli, invoke
from tests.fake_openai import FakeOpenAI
from tests.servers import fixed_reply, free_port

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server

HTML = b"<html><body><h1>502 Bad Gateway</h1></body></html>"


def run(
    base_url: str, warehouse: Path, *sets: str, command: Callable[..., subprocess.CompletedProcess[str]] = invoke
) -> tuple[int, list[str]]:
    """A demo run, in the test's process unless ``command`` is ``cli``: its exit code and error lines."""
    args = ["--warehouse", str(warehouse), "run", "instructir", "--seeds", "demo", "--base-url", base_url,
            "--model", "m", "--set", "max_attempts=2", *(a for s in sets for a in ("--set", s))]  # fmt: skip
    proc = command(*args)
    assert "Traceback" not in proc.stderr and "leaked" not in proc.stderr
    return proc.returncode, [line for line in proc.stderr.splitlines() if line.startswith("error:")]


def status_of(warehouse: Path) -> str:
    proc = invoke("--warehouse", str(warehouse), "runs", "--json")
    return json.loads(proc.stdout)[-1]["status"]


@pytest.mark.parametrize("status, body, headers, said", [
    (401, b'{"error": {"message": "Incorrect API key provided"}}', {}, "answered 401: OPENAI_API_KEY is not set"),
    (403, b'{"error": {"message": "forbidden"}}', {}, "answered 403"),
    (404, b'{"error": {"message": "The model `m` does not exist"}}', {}, "answered 404: check the model name"),
    (302, b"", {"location": "https://elsewhere.example/v1/chat/completions"}, "redirected (302) to https://elsewhere"),
    (400, b'{"error": {"message": "max_tokens is too large"}}', {}, "answered 400 to 10 requests in a row"),
    (200, HTML, {"content-type": "text/html"}, "replied with something that is not a chat completion"),
    (200, gzip.compress(b"0" * 5_000_000), {"content-encoding": "gzip"}, "refuses (a gzip-compressed reply"),
])  # fmt: skip
def test_an_endpoint_that_cannot_serve_the_run_stops_it_in_one_line(
    tmp_path: Path, status: int, body: bytes, headers: dict[str, str], said: str
) -> None:
    with fixed_reply(status, body, headers) as endpoint:
        code, errors = run(endpoint.base_url, tmp_path / "w.duckdb")
        hits = len(endpoint.hits)
    assert code == 4
    assert len(errors) == 1 and said in errors[0], errors
    assert hits <= 16 + 10, "nothing is retried, and the run stops at once"  # the bound in flight, then a streak
    if status in (401, 403) or "content-encoding" in headers:  # refused when the run looks at the endpoint
        assert not (tmp_path / "w.duckdb").exists()
        return
    assert errors[0].endswith("the run stopped, and continues when rerun")
    assert status_of(tmp_path / "w.duckdb") == "failed"


def test_a_closed_port_is_named_at_once(tmp_path: Path) -> None:
    proc = cli("--warehouse", str(tmp_path / "w.duckdb"), "run", "instructir", "--seeds", "demo",
               "--base-url", f"http://127.0.0.1:{free_port()}/v1", "--model", "m")  # fmt: skip
    assert proc.returncode == 4 and len(proc.stderr.strip().splitlines()) <= 2
    assert "cannot be reached" in proc.stderr and "check that URL and that the server is up" in proc.stderr
    assert not (tmp_path / "w.duckdb").exists(), "found before the warehouse is opened"


def test_a_key_refused_is_named_before_any_chat_request(tmp_path: Path) -> None:
    with fixed_reply(401, b'{"error": {"message": "Incorrect API key provided"}}') as endpoint:
        proc = cli("--warehouse", str(tmp_path / "w.duckdb"), "run", "instructir", "--seeds", "demo",
                   "--base-url", endpoint.base_url, "--model", "m", env={"OPENAI_API_KEY": "sk-wrong-key"})  # fmt: skip
        asked = list(endpoint.hits)
    assert proc.returncode == 4 and len(proc.stderr.strip().splitlines()) <= 2
    assert "answered 401: check the key in OPENAI_API_KEY" in proc.stderr
    assert asked == ["/v1/models"], "one look at the endpoint, nothing retried"


def test_a_run_whose_asks_mostly_failed_is_not_completed(tmp_path: Path) -> None:
    with FakeOpenAI(rate_500=0.5) as fake:  # half the attempts fail; with 2 attempts a quarter of the asks
        code, errors = run(fake.base_url, tmp_path / "w.duckdb", command=cli)  # its process's own last words
    assert code == 5 and len(errors) == 1
    assert (
        "asks failed" in errors[0]
        and "max_failure_share 5%" in errors[0]
        and "most often: InternalServerError" in errors[0]
    )
    assert status_of(tmp_path / "w.duckdb") == "failed"
    warehouse = str(tmp_path / "w.duckdb")
    funnel = json.loads(invoke("--warehouse", warehouse, "funnel", "--json").stdout)["llm_calls"]
    assert funnel["failed"] == funnel["transient"] > 0 and funnel["terminal"] == 0, "a 500 is worth a rerun"
    audit = json.loads(invoke("--warehouse", warehouse, "audit", "--status", "failed", "--json").stdout)
    assert audit and {row["failure"] for row in audit} == {"transient"}
    with FakeOpenAI(rate_500=0.5) as fake:
        code, _ = run(fake.base_url, tmp_path / "w.duckdb", "max_failure_share=1")
    assert code == 0, "the share is a setting"


def test_an_empty_release_is_not_exported(tmp_path: Path) -> None:
    with FakeOpenAI() as fake:  # random answers: the demo's small groups all fall to the group filter
        code, _ = run(fake.base_url, tmp_path / "w.duckdb", "min_group_size=1000")
    assert code == 0
    proc = invoke("--warehouse", str(tmp_path / "w.duckdb"), "export", "--out", str(tmp_path / "out"))
    assert proc.returncode != 0 and proc.stderr.strip().count("\n") == 0
    assert "is empty: no query was kept" in proc.stderr and not (tmp_path / "out").exists()


def test_a_bug_in_a_stage_is_one_line_naming_the_stage_the_run_and_the_item(tmp_path: Path, fake: FakeOpenAI) -> None:
    """A stage whose ``handle`` raises KeyError: the run is recorded failed and the user reads which stage, run
    and item, not "unexpected KeyError"; --debug adds the traceback, down to the stage's own line."""
    buggy = (
        "import sys; from ifsynth.flows.stages.judge import JudgeRelevance; "
        "JudgeRelevance.handle = lambda self, writer, entry, replies: {}['score']; "
        "from ifsynth.flows.cli.app import main; main()"
    )
    warehouse = tmp_path / "w.duckdb"
    args = ["--warehouse", str(warehouse), "run", "instructir", "--seeds", "demo", "--base-url", fake.base_url,
            "--model", "m"]  # fmt: skip

    def run_buggy(*options: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-c", buggy, *options, *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=300, env=dict(os.environ), cwd=REPO)

    proc = run_buggy()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    run_id = json.loads(invoke("--warehouse", str(warehouse), "runs", "--json").stdout)[-1]["run_id"]
    said = re.fullmatch(
        rf"error: stage `judge_relevance` of run `{run_id}` failed on item `([\w-]+)`: KeyError: 'score' .*", errors[0]
    )
    assert said is not None, errors[0]
    shown = json.loads(invoke("--warehouse", str(warehouse), "show", said[1], "--json").stdout)
    assert shown["item"]["stage"] == "rewrite", "the item the judge was on"
    assert status_of(warehouse) == "failed"
    debug = run_buggy("--debug")
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "in <lambda>" in debug.stderr
