"""The review page in headless Chromium: keys decide, each decision is a human verdict at once, and a server
killed mid-review loses none of them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from ifsynth.flows.cli.review_page import PAGE
from ifsynth.flows.run.prefect_api import free_port
from ifsynth.warehouse.store import Warehouse
from tests.cli.test_review import picky, release_instructions
from tests.conftest import REPO, cli, invoke
from tests.fake_openai import FakeOpenAI
from tests.helpers import query, sensible, small_instructir

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server


def items(url: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}api/items", timeout=2) as answer:
                return json.loads(answer.read())["items"]
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def review_serve(warehouse: str, *options: str) -> tuple[subprocess.Popen[bytes], str]:
    """`ifsynth review serve` on a free port, in a process of its own (a test may kill it); it and its URL."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "ifsynth.flows.cli", "--warehouse", warehouse, "review", "serve", *options,
         "--port", str(port)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    return server, f"http://127.0.0.1:{port}/"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A run against the fake, made before the browser starts (Playwright's sync API holds an event loop)."""
    wh = str(tmp_path_factory.mktemp("page") / "w.duckdb")
    with FakeOpenAI(mode="responder", responder=sensible) as fake:
        small_instructir(wh, fake.base_url, limit=3)
    return wh


def test_keys_decide_and_a_killed_server_loses_no_decision(warehouse: str, browser_page: Any) -> None:
    wh = warehouse
    server, url = review_serve(wh, "--status", "all", "--reviewer", "tester")
    try:
        listed = items(url)
        assert len(listed) >= 3
        page = browser_page
        page.goto(url)
        page.wait_for_selector("#item .box")
        assert listed[0]["text"] in page.inner_text("#item")
        for key, count in (("a", 1), ("r", 2), ("a", 3), ("u", 2)):
            page.keyboard.press(key)
            page.wait_for_function(f"document.getElementById('progress').textContent.startsWith('{count} of')")
        page.keyboard.press("n")
        page.keyboard.type("not about the query")
        page.keyboard.press("Escape")
        page.keyboard.press("r")  # the third item again (undo went back to it), with a note
        page.wait_for_function("document.getElementById('progress').textContent.startsWith('3 of')")
        page.keyboard.press("d")  # the fourth item's lineage, siblings, prompts and raw answers
        page.wait_for_selector("#details pre")
        shown = page.inner_text("#details")
        assert "lineage" in shown.lower() and "raw answer" in shown.lower()
    finally:
        server.send_signal(signal.SIGKILL)  # no clean shutdown: what was decided must already be on disk
        server.wait(timeout=10)
    with Warehouse(wh, read_only=True) as opened:
        people = query(opened, "SELECT item_id, stage, judge, decision, reason FROM verdicts WHERE judge LIKE 'human%'")
    got = {(p["item_id"], p["stage"]): (p["decision"], p["reason"]) for p in people}
    expected = {
        (listed[0]["item_id"], listed[0]["stage"]): ("pass", ""),
        (listed[1]["item_id"], listed[1]["stage"]): ("reject", ""),
        (listed[2]["item_id"], listed[2]["stage"]): ("reject", "not about the query"),
    }
    assert got == expected and {p["judge"] for p in people} == {"human:tester"}


def test_while_the_page_is_up_reads_are_answered_and_a_run_is_told_what_holds_the_file(warehouse: str) -> None:
    server, url = review_serve(warehouse, "--status", "all")
    try:
        items(url)
        listed = invoke("--warehouse", warehouse, "runs", "--json")
        refused = cli("--warehouse", warehouse, "run", "instructir", "--seeds", "demo", "--base-url",
                      "http://127.0.0.1:9/v1", "--model", "m")  # fmt: skip
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) == 1, listed.stderr
    assert refused.returncode != 0 and f"in use by another process (pid {server.pid}, a review page)" in refused.stderr


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A run whose specificity judge rejects reader 2's rewrites, and the fake that answered it, still up."""
    wh = str(tmp_path_factory.mktemp("judged") / "w.duckdb")
    with FakeOpenAI(mode="responder", responder=picky) as fake:
        small_instructir(wh, fake.base_url, name="judged", min_group_size=1)
        yield {"warehouse": wh, "fake": fake}


def test_decisions_made_on_the_page_make_the_release(judged: dict[str, Any], browser_page: Any) -> None:
    wh, fake = judged["warehouse"], judged["fake"]
    before = release_instructions(wh, "judged")
    server, url = review_serve(wh, "--stage", "judge_specificity", "--status", "all")
    try:
        listed = items(url)
        rejected = [i for i, row in enumerate(listed) if row["llm_decision"] == "reject"][:2]
        kept = [i for i, row in enumerate(listed) if row["llm_decision"] == "pass" and row["instruction"] in before][:1]
        assert len(rejected) == 2 and len(kept) == 1
        page = browser_page
        page.goto(url)
        page.wait_for_selector("#item .box")
        at = 0
        for count, (index, key) in enumerate(zip([*rejected, *kept], "aar", strict=True), start=1):
            while at != index:  # the arrows move through the list
                page.keyboard.press("ArrowRight" if index > at else "ArrowLeft")
                at += 1 if index > at else -1
            page.keyboard.press(key)
            page.wait_for_function(f"document.getElementById('progress').textContent.startsWith('{count} of')")
            at = min(at + 1, len(listed) - 1)
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
    sent = fake.stats()["requests"]
    done = cli("--warehouse", wh, "release", "judged", "--name", "from-the-page")
    assert done.returncode == 0, done.stderr
    assert fake.stats()["requests"] == sent and "3 decisions overruled by people" in done.stdout
    expected = (before - {listed[kept[0]]["instruction"]}) | {listed[i]["instruction"] for i in rejected}
    assert release_instructions(wh, "from-the-page") == expected


def normalized(text: str) -> str:
    return " ".join(text.split())


def test_a_rewrite_shows_beside_the_passage_it_rewrote_with_its_changes_marked(
    warehouse: str, browser_page: Any
) -> None:
    server, url = review_serve(warehouse, "--stage", "judge_relevance", "--status", "all")
    try:
        first = items(url)[0]
        assert first["kind"] == "rewrite" and first["source"] and first["source"] != first["text"]
        page = browser_page
        page.goto(url)
        page.wait_for_selector("#item #source")
        assert normalized(page.inner_text("#source")) == normalized(first["source"])
        assert normalized(page.inner_text("#text")) == normalized(first["text"])
        inserted = " ".join(page.eval_on_selector_all("#text ins", "nodes => nodes.map(n => n.textContent)"))
        deleted = " ".join(page.eval_on_selector_all("#source del", "nodes => nodes.map(n => n.textContent)"))
        new, old = set(first["text"].split()), set(first["source"].split())
        assert set(inserted.split()) >= new - old and set(deleted.split()) >= old - new, "every changed word marked"
        assert not page.query_selector_all("#source ins, #text del"), "each side marks only its own changes"
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)


def test_a_judged_query_negative_shows_the_query_it_must_not_answer(browser_page: Any) -> None:
    """The page alone, its items served by the browser: InfoSearch's negatives need no run to be shown."""
    negative = {
        "run_id": "r", "item_id": "negative-1", "stage": "judge_negatives", "judge": "llm", "kind": "negative",
        "query": "how do solar panels work", "instruction": "", "text": "Solar panels are sold in many shops.",
        "source": "", "diff": [], "llm_decision": "pass", "score": 1, "threshold": 2, "reason": "off topic",
    }  # fmt: skip
    page = browser_page
    page.route("http://review.test/", lambda route: route.fulfill(body=PAGE.read_text(), content_type="text/html"))
    page.route("http://review.test/api/items", lambda route: route.fulfill(
        json={"run_id": "r", "reviewer": "human:t", "items": [negative]}))  # fmt: skip
    page.goto("http://review.test/")
    page.wait_for_selector("#item #query")
    shown = page.inner_text("#item")
    assert "QUERY IT MUST NOT ANSWER" in shown.upper() and negative["query"] in page.inner_text("#query")
    assert negative["text"] in shown and not page.query_selector("#source")
