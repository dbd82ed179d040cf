"""Do the exports load in the clients people use, and do they score there as ifsynth scores them? Releases of
four recipes are made against the loopback fake (the responders of the recipes' tests), exported in every folder
layout, and checked in a separate venv that has mteb, datasets, beir and sentence-transformers (`make
bench-clients` builds it; they pull torch, which ifsynth's own install does not have): each card config loads
with ``datasets.load_dataset``, the MTEB folders load through mteb's retrieval loader (per mode where there are
several), the BEIR folder through beir's GenericDataLoader, and the InF-IR triplets train a small
sentence-transformers model for a few steps.

Then the FollowIR and InfoSearch releases are scored by ``ifsynth evaluate`` on two runs (its BM25 run, and the
same documents under seeded random scores), and the harnesses score the same run files from the exported
folders: mteb 2's Core17InstructionRetrieval (p-MRR), and, given their checkouts, FollowIR's mteb fork (p-MRR)
and InfoSearch's (p-MRR, WISE, SICR, per dimension, against ``--reference infosearch-source``). The forks are
the authors' code, not packages that install beside mteb 2, so they are taken from checkouts you name:

    python -m bench.clients [--keep DIR] [--followir-mteb CHECKOUT] [--infosearch CHECKOUT]

``--followir-mteb`` is a checkout of FollowIR's mteb fork (the ``mteb`` submodule of orionw/FollowIR),
``--infosearch`` one of EIT-NLP/InfoSearch (its ``mteb_infosearch`` folder is used).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.conftest import INSTRUCTIR_SEEDS, cli
from tests.fake_openai import FakeOpenAI
from tests.helpers import sensible as instructir_answers
from tests.recipes.test_followir import assessor as followir_answers
from tests.recipes.test_infir import sensible as infir_answers
from tests.recipes.test_infosearch import sensible as infosearch_answers

REPO = Path(__file__).resolve().parents[1]
CLIENTS = REPO / "bench" / ".venv-clients" / "bin" / "python"
RUNS = {
    "instructir": (instructir_answers, f"beir:{INSTRUCTIR_SEEDS}", ["instructions_per_query=4", "min_group_size=3"]),
    "infosearch": (infosearch_answers, "demo", []),
    "infir": (infir_answers, "demo", []),
    "followir": (followir_answers, "demo", []),
}
FORMATS = {
    "instructir": ("beir", "mteb", "jsonl", "parquet"),
    "infosearch": ("beir", "mteb", "jsonl", "parquet", "infosearch"),
    "infir": ("mteb", "jsonl", "parquet", "infir", "triplets", "hf"),
    "followir": ("beir", "mteb", "jsonl", "parquet", "followir"),
}
SCORED = {"followir": (), "infosearch": ("--reference", "infosearch-source")}  # recipe -> evaluate's options


def make(root: Path) -> tuple[list[dict[str, str]], list[dict[str, object]]]:
    """Every recipe's release in every folder layout it takes, and the scores `ifsynth evaluate` gives; what the
    checker is to load and score again. The runs are child `ifsynth` processes, as a user's are (the fake
    answers from this one)."""
    folders: list[dict[str, str]] = []
    scores: list[dict[str, object]] = []
    for recipe, (answers, seeds, sets) in RUNS.items():
        warehouse = str(root / f"{recipe}.duckdb")
        with FakeOpenAI(mode="responder", responder=answers) as fake:
            settings = [arg for value in sets for arg in ("--set", value)]
            _ok(cli("--warehouse", warehouse, "run", recipe, "--seeds", seeds, "--limit", "8",
                    "--base-url", fake.base_url, "--model", "gen", *settings))  # fmt: skip
        release = ""
        for fmt in FORMATS[recipe]:
            out = root / recipe / fmt
            done = cli("--warehouse", warehouse, "export", "--format", fmt, "--out", str(out))
            _ok(done)
            release = re.search(r"release (\S+):", done.stdout).group(1)  # type: ignore[union-attr]
            folders.append({"recipe": recipe, "format": fmt, "path": str(out)})
        if recipe in SCORED:
            scores += _scores(root, recipe, warehouse, release)
    return folders, scores


def _scores(root: Path, recipe: str, warehouse: str, release: str) -> list[dict[str, object]]:
    """`ifsynth evaluate` on its BM25 run and on a shuffled copy; one item per folder a harness loads (the
    release's, or each InfoSearch dimension's) with the figures it must give again."""
    bm25 = root / f"{recipe}.bm25.trec"
    evaluate = ("--warehouse", warehouse, "evaluate", release, "--json", *SCORED[recipe])
    reports = {bm25: _report(cli(*evaluate, "--retriever", "bm25", "--out", str(bm25)))}
    shuffled = _shuffled(bm25, root / f"{recipe}.shuffled.trec")
    reports[shuffled] = _report(cli(*evaluate, "--run", str(shuffled)))
    folder = root / recipe / recipe
    items: list[dict[str, object]] = []
    for run, report in reports.items():
        if recipe == "followir":
            items.append(
                {"recipe": recipe, "path": str(folder), "run": str(run), "ifsynth": {"p-mrr": report["p-mrr"]}}
            )
            continue
        for dimension, figures in report["by_dimension"].items():
            items.append({"recipe": recipe, "path": str(folder / dimension), "run": str(run), "ifsynth": figures})
    return items


def _report(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    _ok(done)
    return dict(json.loads(done.stdout[done.stdout.index("{") :]))


def _shuffled(run: Path, out: Path) -> Path:
    """The run's documents under seeded random, distinct scores: a second system, whose ranks move between the
    modes more than BM25's do (so SICR and WISE see rewards, not only ties)."""
    rng = random.Random(31)
    lines = []
    for line in run.read_text().splitlines():
        qid, _, doc, *_ = line.split()
        lines.append((qid, doc, rng.random()))
    ranked: dict[str, list[tuple[str, float]]] = {}
    for qid, doc, score in lines:
        ranked.setdefault(qid, []).append((doc, score))
    rows = [
        f"{qid} Q0 {doc} {rank} {score:.9f} shuffled"
        for qid, docs in ranked.items()
        for rank, (doc, score) in enumerate(sorted(docs, key=lambda d: -d[1]), start=1)
    ]
    out.write_text("\n".join(rows) + "\n")
    return out


def _ok(done: subprocess.CompletedProcess[str]) -> None:
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(done.args[3:6])} failed: {done.stderr.strip()[-400:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="Write the exports here and keep them.")
    parser.add_argument("--followir-mteb", type=Path, help="A checkout of FollowIR's mteb fork.")
    parser.add_argument("--infosearch", type=Path, help="A checkout of InfoSearch's repository.")
    args = parser.parse_args()
    if not CLIENTS.exists():
        raise SystemExit("no client venv: run `make bench-clients` first")
    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        folders, scores = make(root)
        checkouts = {"followir": args.followir_mteb, "infosearch": args.infosearch}
        given = {"folders": folders, "scores": scores, "checkouts": {k: str(v) for k, v in checkouts.items() if v}}
        checked = subprocess.run(
            [str(CLIENTS), str(REPO / "bench" / "clients_check.py")],
            input=json.dumps(given),
            env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(Path(scratch) / "datasets-cache")},
            capture_output=True,
            text=True,
        )
    sys.stdout.write(checked.stdout)
    if checked.returncode != 0:
        sys.stderr.write(checked.stderr[-4000:])
        raise SystemExit(checked.returncode)


if __name__ == "__main__":
    main()
