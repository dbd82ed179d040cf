"""`ifsynth validity`: a release against itself ranks every system alike (tau 1); against a copy where one
system's run was made worse, the correlations a hand count of the two explicit rankings gives."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest

from ifsynth.flows.evaluation import scoring
from ifsynth.flows.evaluation.metrics import Reference
from ifsynth.flows.run.exports import import_release
from ifsynth.flows.run.registry import metrics_of
from ifsynth.warehouse.store import Warehouse
from tests.conftest import invoke
from tests.helpers import synthetic_followir

TOPICS = 8


@pytest.fixture
def releases(tmp_path: Path) -> Path:
    """`orig` and `copy`: the same FollowIR folder imported twice."""
    folder = synthetic_followir(tmp_path / "small", TOPICS)
    warehouse = tmp_path / "w.duckdb"
    with Warehouse(warehouse) as wh:
        import_release(wh, "followir", folder, name="orig")
        import_release(wh, "followir", folder, name="copy")
    return warehouse


def run_file(path: Path, misses: int) -> Path:
    """A run that puts ``misses`` non-relevant passages above each query's positives in every mode: the more
    misses, the lower every rank-based metric."""
    lines = []
    for t, mode in itertools.product(range(TOPICS), ("og", "changed")):
        ranked = [f"n{i}" for i in range(misses)] + [f"d{2 * t}", f"d{2 * t + 1}"]
        lines += [f"t{t}-{mode} Q0 {doc} {r + 1} {100 - r} x" for r, doc in enumerate(ranked)]
    path.write_text("\n".join(lines) + "\n")
    return path


def validity(warehouse: Path, *args: str) -> dict[str, Any]:
    done = invoke("--warehouse", str(warehouse), "validity", *args, "--samples", "200", "--json")
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def by_hand(first: list[str], second: list[str]) -> tuple[float, float]:
    """Kendall's tau (no ties) and Spearman's rho of two orderings of the same systems, best first."""
    pairs = list(itertools.combinations(first, 2))  # each pair as the first ordering has it
    agree = sum(1 for a, b in pairs if second.index(a) < second.index(b))
    n = len(first)
    squares = sum((first.index(s) - second.index(s)) ** 2 for s in first)
    return (agree - (len(pairs) - agree)) / len(pairs), 1 - 6 * squares / (n * (n * n - 1))


def test_a_release_against_itself_ranks_alike(releases: Path, tmp_path: Path) -> None:
    runs = [f"run:s{k}={run_file(tmp_path / f's{k}.trec', k)},{tmp_path / f's{k}.trec'}" for k in range(4)]
    systems = [arg for spec in (*runs, "bm25", "bm25:k1=0.9,b=0.4,bare") for arg in ("--system", spec)]
    report = validity(releases, "orig", "orig", *systems)
    assert report["kendall_tau"] == pytest.approx(1.0) and report["spearman_rho"] == pytest.approx(1.0)
    assert report["bootstrap"]["paired"] and report["bootstrap"]["kendall_tau"] == pytest.approx([1.0, 1.0])
    assert [row["original"] for row in report["systems"]] == [row["regenerated"] for row in report["systems"]]
    assert all(row["kendall_tau"] in (pytest.approx(1.0), None) for row in report["per_metric"])


def test_one_perturbed_system_gives_the_hand_computed_tau(releases: Path, tmp_path: Path) -> None:
    """s0..s3 miss 0..3 passages on `orig`; on `copy`, s0's run misses 4, so it falls from first to last."""
    systems = []
    for k in range(4):
        original = run_file(tmp_path / f"orig-s{k}.trec", k)
        copy = run_file(tmp_path / f"copy-s{k}.trec", 4 if k == 0 else k)
        systems += ["--system", f"run:s{k}={original},{copy}"]
    report = validity(releases, "orig", "copy", *systems, "--metric", "ndcg@5")
    tau, rho = by_hand(["s0", "s1", "s2", "s3"], ["s1", "s2", "s3", "s0"])
    assert (tau, rho) == (0.0, pytest.approx(-0.2))  # the hand count: 3 pairs agree, 3 disagree; d = 3, 1, 1, 1
    assert report["kendall_tau"] == pytest.approx(tau) and report["spearman_rho"] == pytest.approx(rho)
    assert [row["regenerated_rank"] for row in report["systems"]] == [4, 1, 2, 3]
    low, high = report["bootstrap"]["kendall_tau"]
    assert low <= tau <= high  # every query moves alike here: each resampling keeps the same two rankings
    per_metric = {row["metric"]: row["kendall_tau"] for row in report["per_metric"]}
    assert per_metric["ndcg@5 (changed)"] == pytest.approx(tau)


def test_table_and_chart(releases: Path, tmp_path: Path) -> None:
    systems = []
    for k in range(3):  # the copy reverses the order of the three
        original, copy = run_file(tmp_path / f"o{k}.trec", k), run_file(tmp_path / f"c{k}.trec", 2 - k)
        systems += ["--system", f"run:s{k}={original},{copy}"]
    done = invoke("--warehouse", str(releases), "validity", "orig", "copy", *systems, "--samples", "50")
    assert done.returncode == 0, done.stderr
    assert max(map(len, done.stdout.splitlines())) <= 80
    assert "Kendall's tau-b: -1.000" in done.stdout
    done = invoke(
        "--warehouse", str(releases), "report", "copy", "--compare", "orig", "--out", str(tmp_path / "r.html")
    )
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "r.html").read_text()
    assert "Systems on both releases" in page and "tau-b -1.000" in page


def test_bad_systems_are_one_line(releases: Path) -> None:
    for args, said in (
        (["--system", "bm25"], "at least two systems"),
        (["--system", "bm25", "--system", "bm25:k1=x"], "a BM25 variant takes"),
        (["--system", "bm25", "--system", "run:a=x.trec"], "is not one of"),
    ):
        done = invoke("--warehouse", str(releases), "validity", "orig", "copy", *args)
        assert done.returncode == 2 and done.stderr.startswith("error:") and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def pmrr_run(path: Path, k: int) -> Path:
    """Both positives on top in the original mode; under the altered instruction the dropped one (d2t+1) falls
    below ``k`` (plus t mod 2) misses: per-query p-MRR 1 - 2 / (2 + k + t mod 2)."""
    lines = []
    for t in range(TOPICS):
        lines += [f"t{t}-og Q0 d{2 * t} 1 100 x", f"t{t}-og Q0 d{2 * t + 1} 2 99 x"]
        ranked = [f"d{2 * t}"] + [f"n{i}" for i in range(k + t % 2)] + [f"d{2 * t + 1}"]
        lines += [f"t{t}-changed Q0 {doc} {r + 1} {100 - r} x" for r, doc in enumerate(ranked)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_p_mrr_is_the_chosen_metric_a_bootstrap_resamples(releases: Path, tmp_path: Path) -> None:
    runs = {k: pmrr_run(tmp_path / f"p{k}.trec", k) for k in range(3)}
    systems = [arg for k, run in runs.items() for arg in ("--system", f"run:s{k}={run},{run}")]
    report = validity(releases, "orig", "copy", *systems, "--metric", "p-mrr")
    by_hand = [sum(1 - 2 / (2 + k + t % 2) for t in range(TOPICS)) / TOPICS for k in runs]
    assert [row["original"] for row in report["systems"]] == pytest.approx(by_hand)
    assert report["metric"] == "p-mrr" and report["queries"] == [TOPICS, TOPICS]
    assert report["bootstrap"]["paired"] and report["bootstrap"]["kendall_tau"] == pytest.approx([1.0, 1.0])
    done = invoke("--warehouse", str(releases), "validity", "orig", "copy", *systems, "--metric", "wise")
    assert done.returncode == 2 and "p-mrr" in done.stderr and "Traceback" not in done.stderr, done.stderr


def infosearch_view() -> scoring.ReleaseView:
    """Six queries in the three InfoSearch modes, each with 1 to 4 golds (so a mean over golds is not one over
    queries) among 12 passages, two dimensions."""
    view = scoring.ReleaseView("r", "infosearch", [])
    for q in range(6):
        golds = [f"d{q}-{g}" for g in range(1 + q % 4)]
        for mode in ("og", "changed", "reversed"):
            row = {"query": f"q{q}", "instruction": mode, "dimension": ("audience", "format")[q % 2], "group_id": q}
            view.queries.setdefault(mode, {})[f"q{q}"] = row
            kept = golds if mode != "og" else [*golds, f"x{q}"]
            view.qrels.setdefault(mode, {})[f"q{q}"] = {doc: 1 for doc in kept}
    return view


@pytest.mark.parametrize("references", [(), ("infosearch-source",), ("infosearch-wheel",)])
def test_cross_mode_shares_add_up_to_the_reported_figures(references: tuple[Reference, ...]) -> None:
    """p-MRR, WISE and SICR as per-query shares: their sum over their count is what `evaluate` reports, under
    the paper's mean over golds and the references' mean over queries alike."""
    rng = random.Random(5)
    view = infosearch_view()
    docs = [doc for qrels in view.qrels["og"].values() for doc in qrels]
    run = {
        view.run_qid(mode, q): {d: rng.random() for d in rng.sample(docs, 10)}
        for mode in view.queries
        for q in view.queries[mode]
    }
    report = scoring.score(view, run, metrics_of("infosearch"), references)
    shares = scoring.cross_mode_values(view, run, references)
    for name in ("p-mrr", "wise", "sicr"):
        found = shares[name].values()
        assert sum(s.total for s in found) / sum(s.weight for s in found) == pytest.approx(report[name], abs=1e-12)
    counts = {s.weight for s in shares["wise"].values()}
    assert counts == ({1} if references else {1, 2, 3, 4})
