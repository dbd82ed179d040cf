"""Dense retrieval through the loopback fake's /embeddings (hashed bag-of-words vectors): `evaluate --retriever
embed:MODEL` scores a release, a rerun sends nothing, and faults go through the gateway's retries."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ifsynth.flows.evaluation.dense import Dense, prompt_format
from ifsynth.flows.evaluation.metrics import ranking
from ifsynth.flows.run.exports import import_release
from ifsynth.schemas.errors import ConfigError
from ifsynth.warehouse.store import Warehouse
from tests.conftest import cli
from tests.fake_openai import FakeOpenAI
from tests.helpers import synthetic_followir


@pytest.fixture
def release(tmp_path: Path) -> Path:
    """A warehouse holding `small`, a FollowIR release: 6 topics in two modes (12 instructed queries, as each
    topic's instruction differs per mode) over 36 passages."""
    warehouse = tmp_path / "w.duckdb"
    with Warehouse(warehouse) as wh:
        import_release(wh, "followir", synthetic_followir(tmp_path / "small", 6), name="small")
    return warehouse


def evaluate(warehouse: Path, fake: FakeOpenAI, *extra: str) -> tuple[int, str, str]:
    done = cli(
        "--warehouse", str(warehouse), "evaluate", "small", "--retriever", "embed:fake-embed",
        "--embed-base-url", fake.base_url, "--embed-batch", "8", "--out", str(warehouse.parent / "run.trec"), *extra,
    )  # fmt: skip
    return done.returncode, done.stdout, " ".join(done.stderr.split())  # the console wraps at its width


def test_rerun_sends_no_request(server: FakeOpenAI, release: Path) -> None:
    server.reset()
    code, first, said = evaluate(release, server)
    assert code == 0, said
    sent = server.embedding_stats["requests"]
    assert sent == 5  # 24 passages and 12 instructed queries, all distinct, 8 a request
    assert "36 texts, 0 cached, 36 embedded in 5 requests sent (0 failed)" in said
    code, again, said = evaluate(release, server)
    assert code == 0, said
    assert server.embedding_stats["requests"] == sent  # nothing sent the second time
    assert "36 texts, 36 cached, 0 embedded in 0 requests sent" in said
    assert again == first


def test_faults_are_retried_and_a_failed_batch_continues_on_rerun(server: FakeOpenAI, release: Path) -> None:
    server.reset()
    server.configure(script=["429", "500"])  # transient: retried by the gateway, after Retry-After / backoff
    code, _, said = evaluate(release, server)
    assert code == 0, said
    assert server.embedding_stats == {"requests": 7, "ok": 5, "429": 1, "500": 1}
    assert "in 7 requests sent (2 failed)" in said
    with Warehouse(release, read_only=True) as wh:
        failures = wh.query("SELECT failure, http_status FROM llm_calls WHERE error IS NOT NULL ORDER BY http_status")
    assert failures == [{"failure": "transient", "http_status": 429}, {"failure": "transient", "http_status": 500}]

    server.reset()
    server.configure(script=["400"])  # another model, nothing cached: its first request is refused for good
    code, _, said = evaluate(release, server, "--embed-format", "plain", "--retriever", "embed:other")
    assert code == 4 and said.startswith("error: endpoint") and "did not embed 1 of 5 batches (HTTP 400" in said, said
    assert server.embedding_stats == {"requests": 5, "ok": 4, "400": 1}  # a 400 is never retried
    code, _, said = evaluate(release, server, "--embed-format", "plain", "--retriever", "embed:other")
    resumed = re.search(r"36 texts, (\d+) cached, (\d+) embedded in 1 requests sent", said)
    assert code == 0 and resumed and resumed[2] in ("4", "8"), said  # only the refused batch (the last holds 4)


def test_cosine_ranks_the_passage_sharing_the_query_words_first(server: FakeOpenAI, tmp_path: Path) -> None:
    with Warehouse(tmp_path / "w.duckdb") as wh:
        dense = Dense("fake-embed", server.base_url, wh, "evaluate:t", prompt=prompt_format("plain"))
        docs = [("a", "river stone light"), ("b", "garden paper window"), ("c", "garden market")]
        run = dense.rank(docs, {"q": "paper window garden"}, 2, None)
        pooled = dense.rank(docs, {"q": "river"}, 1, {"q": {"b", "c"}})
    assert ranking(run["q"])[0] == "b" and len(run["q"]) == 2
    assert set(pooled["q"]) == {"b", "c"}  # a pool is scored whole, whatever the depth


def test_prompt_formats() -> None:
    dense_format = prompt_format("instruct")
    assert dense_format.format(instruction="be brief", query="tea") == "Instruct: be brief\nQuery: tea"
    assert prompt_format("{query} ({instruction})") == "{query} ({instruction})"
    with pytest.raises(ConfigError, match="--embed-format"):
        prompt_format("{instruction} only")
