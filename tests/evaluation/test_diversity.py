"""APS and INGF (InF-IR's diversity figures): the formulas on hand-sized inputs, then `ifsynth stats` on an
imported InF-IR release, offline (TF-IDF) and through an embedding endpoint (the loopback fake)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse

from ifsynth.flows.evaluation.diversity import TfidfEmbedder, aps, diversity, ingf
from ifsynth.flows.run.exports import import_release
from ifsynth.schemas.infir import FIELDS
from ifsynth.warehouse.store import Warehouse
from tests.conftest import invoke
from tests.fake_openai import FakeOpenAI, _embedding

TOPICS = ["solar panels on a roof", "tax on a second home", "training for a marathon", "repairing a bike chain"]


def test_aps_is_the_mean_cosine_over_all_pairs() -> None:
    assert aps(np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]])) == pytest.approx(1 / 3)  # pairs: 1, 0, 0
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(9, 5))
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    brute = np.mean([unit[i] @ unit[j] for i, j in itertools.combinations(range(9), 2)])
    assert aps(vectors) == pytest.approx(brute)
    assert aps(sparse.csr_matrix(unit)) == pytest.approx(brute)
    assert aps(np.ones((1, 3))) is None


def test_ingf_weighs_each_ngram_by_the_samples_sharing_it() -> None:
    # unigrams a (2 samples), b, c (1 each); bigrams "a b", "a c" (1 each): (1/2 + 1 + 1 + 1 + 1) / 2
    assert ingf(["a b", "A c"]) == pytest.approx(4.5 / 2)
    assert ingf(["a b", "a b"]) == pytest.approx(3 * 0.5 / 2)  # a copied template adds little
    assert ingf(["a b", "a c"], sizes=(1,)) == pytest.approx(2.5 / 2)
    assert ingf([]) is None


def infir_release(tmp_path: Path, n: int = 12) -> Path:
    rows = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        rows.append({name: f"{name.split('_')[0]} {i} about {topic}" for name in FIELDS})
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    db = tmp_path / "w.duckdb"
    with Warehouse(db) as wh:
        import_release(wh, "infir", tmp_path / "train.jsonl", name="inf")
    return db


def test_the_sample_is_seeded_and_capped(tmp_path: Path) -> None:
    with Warehouse(infir_release(tmp_path)) as wh:
        first = diversity(wh, "inf", TfidfEmbedder(), sample=5)
        again = diversity(wh, "inf", TfidfEmbedder(), sample=5)
        whole = diversity(wh, "inf", TfidfEmbedder())
    assert (first["sample"], first["of"], whole["sample"]) == (5, 12, 12)
    assert first == again and first["aps"] != whole["aps"]


def test_stats_of_an_infir_release_has_aps_and_ingf(tmp_path: Path) -> None:
    db = infir_release(tmp_path)
    proc = invoke("--warehouse", str(db), "stats", "inf", "--json")
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout)["diversity"]
    assert figures["embedding"].startswith("tfidf") and figures["sample"] == 12
    assert set(figures["aps"]) == set(figures["ingf"]) == {"instruction", "query", "passage"}
    assert all(0 < v < 1 for v in figures["aps"].values()) and all(v > 0 for v in figures["ingf"].values())
    table = invoke("--warehouse", str(db), "stats", "inf")
    assert "APS instruction" in table.stdout and "INGF passage" in table.stdout


def test_aps_through_an_embedding_endpoint(tmp_path: Path) -> None:
    """Each distinct text is embedded once and cached in the warehouse, as `evaluate --retriever embed:` caches:
    measuring again gives the same figures and sends no request."""
    db = infir_release(tmp_path)
    args = ("--warehouse", str(db), "stats", "inf", "--embed-model", "e5", "--json")
    with FakeOpenAI() as fake:
        proc = invoke(*args, "--embed-base-url", fake.base_url)
        sent = list(fake.embedded)
        again = invoke(*args, "--embed-base-url", fake.base_url)
        resent = fake.embedded[len(sent) :]
    assert proc.returncode == 0, proc.stderr
    assert again.returncode == 0, again.stderr
    figures = json.loads(proc.stdout)["diversity"]
    with Warehouse(db) as wh:
        rows = wh.release_positive_pairs("inf", "positive")
    queries = [r["query"] for r in rows]
    assert sorted(sent) == sorted({r[field] for r in rows for field in ("instruction", "query", "passage")})
    assert resent == [] and json.loads(again.stdout)["diversity"] == figures
    assert figures["embedding"] == f"e5 at {fake.base_url}"
    assert figures["aps"]["query"] == pytest.approx(aps(np.array([_embedding(q) for q in queries])))


def test_embedding_options_that_cannot_work_are_refused_in_one_line(tmp_path: Path) -> None:
    db = infir_release(tmp_path)
    alone = invoke("--warehouse", str(db), "stats", "inf", "--embed-base-url", "http://127.0.0.1:9/v1")
    assert (
        alone.returncode != 0
        and alone.stderr.strip() == "error: --embed-base-url needs --embed-model, the model to embed with"
    )
    down = invoke(
        "--warehouse", str(db), "stats", "inf", "--embed-model", "e5", "--embed-base-url", "http://127.0.0.1:9/v1"
    )
    assert down.returncode != 0 and len(down.stderr.splitlines()) == 1 and "cannot be reached" in down.stderr
