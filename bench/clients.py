"""Do the exports load in the clients people use, and do they score there as ifsynth scores them? Releases of
five recipes are made against the loopback fake (the responders of the recipes' tests), exported in every folder
layout, and checked in a separate venv that has mteb, datasets, beir and sentence-transformers (`make
bench-clients` builds it; they pull torch, which ifsynth's own install does not have): each card config loads
with ``datasets.load_dataset``, the MTEB folders load through mteb's retrieval loader (per mode where there are
several), the BEIR folder through beir's GenericDataLoader, and the InF-IR triplets train a small
sentence-transformers model for a few steps. Two releases exported to same-named folders, and a folder
re-exported with ``--overwrite``, must each load their own rows with ``datasets``' defaults in a fresh process.

Then the FollowIR, InfoSearch and IFIR releases are scored by ``ifsynth evaluate`` on two runs (its BM25 run,
and the same documents under seeded random scores), and the harnesses score the same run files from the exported
folders: mteb 2's Core17InstructionRetrieval (p-MRR), and, given their checkouts, FollowIR's mteb fork (p-MRR),
InfoSearch's (p-MRR, WISE, SICR, per dimension, against ``--reference infosearch-source``) and IFIR's code
(``src/eval.py``'s nDCG and MRR per subset and level, against ``--reference ifir``; its BEIR scripts' nDCG@20,
against the default). InF-Embed's training loader reads the InF-IR Hub folder on both its branches. The authors'
code is not a package that installs beside mteb 2, so it is taken from checkouts you name:

    python -m bench.clients [--keep DIR] [--followir-mteb CHECKOUT] [--infosearch CHECKOUT] [--ifir CHECKOUT]
        [--inf-embed CHECKOUT]

``--followir-mteb`` is a checkout of FollowIR's mteb fork (the ``mteb`` submodule of orionw/FollowIR),
``--infosearch`` one of EIT-NLP/InfoSearch (its ``mteb_infosearch`` folder is used), ``--ifir`` one of
SighingSnow/IFIR and ``--inf-embed`` one of night-chen/InF_Embed.
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

from ifsynth.schemas.ifir import DEFAULT_SUBSET
from tests.conftest import INSTRUCTIR_SEEDS, cli
from tests.fake_openai import FakeOpenAI
from tests.helpers import sensible as instructir_answers
from tests.recipes.test_followir import assessor as followir_answers
from tests.recipes.test_ifir import expert as ifir_answers
from tests.recipes.test_infir import sensible as infir_answers
from tests.recipes.test_infosearch import sensible as infosearch_answers

REPO = Path(__file__).resolve().parents[1]
CLIENTS = REPO / "bench" / ".venv-clients" / "bin" / "python"
CHECKER = REPO / "bench" / "clients_check.py"
RUNS = {
    "instructir": (instructir_answers, f"beir:{INSTRUCTIR_SEEDS}", ["instructions_per_query=4", "min_group_size=3"]),
    "infosearch": (infosearch_answers, "demo", []),
    "infir": (infir_answers, "demo", []),
    "followir": (followir_answers, "demo", []),
    "ifir": (ifir_answers, "demo", []),
}
FORMATS = {
    "instructir": ("beir", "mteb", "jsonl", "parquet"),
    "infosearch": ("beir", "mteb", "jsonl", "parquet", "infosearch"),
    "infir": ("mteb", "jsonl", "parquet", "infir", "triplets", "hf"),
    "followir": ("beir", "mteb", "jsonl", "parquet", "followir"),
    "ifir": ("beir", "mteb", "jsonl", "parquet", "ifir"),
}
# recipe -> evaluate's options; IFIR's src/eval.py computes nDCG as `--reference ifir` does, its BEIR scripts as
# pytrec_eval (the paper's), so an IFIR run is scored both ways
SCORED: dict[str, list[tuple[str, ...]]] = {
    "followir": [()],
    "infosearch": [("--reference", "infosearch-source")],
    "ifir": [("--reference", "ifir"), ()],
}
# the harness (IFIR's src/eval.py or its BEIR scripts) that computes an IFIR figure, by evaluate's options
IFIR_HARNESS: dict[tuple[str, ...], str] = {("--reference", "ifir"): "eval.py", (): "beir"}


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
    evaluate = ("--warehouse", warehouse, "evaluate", release, "--json")
    first, *others = SCORED[recipe]
    scored = {bm25: {first: _report(cli(*evaluate, *first, "--retriever", "bm25", "--out", str(bm25)))}}
    shuffled = _shuffled(bm25, root / f"{recipe}.shuffled.trec")
    scored[shuffled] = {first: _report(cli(*evaluate, *first, "--run", str(shuffled)))}
    folder = root / recipe / recipe
    items: list[dict[str, object]] = []
    for run, reports in scored.items():
        reports |= {options: _report(cli(*evaluate, *options, "--run", str(run))) for options in others}
        report = reports[first]
        if recipe == "followir":
            items.append(
                {"recipe": recipe, "path": str(folder), "run": str(run), "ifsynth": {"p-mrr": report["p-mrr"]}}
            )
        elif recipe == "ifir":
            figures = {name: value for options, got in reports.items() for name, value in _ifir(got, options).items()}
            items.append({"recipe": recipe, "path": str(folder), "run": str(run), "ifsynth": figures})
        else:
            for dimension, found in report["by_dimension"].items():
                items.append({"recipe": recipe, "path": str(folder / dimension), "run": str(run), "ifsynth": found})
    return items


def _ifir(report: dict[str, Any], options: tuple[str, ...]) -> dict[str, float]:
    """An IFIR report's figures per subset and level, named as the check names what IFIR's harness computes:
    its src/eval.py reports nDCG and MRR per dataset (one subset) and level, its BEIR scripts nDCG."""
    harness = IFIR_HARNESS[options]
    names = ("ndcg@20", "mrr@20") if harness == "eval.py" else ("ndcg@20",)
    return {
        f"{harness} {DEFAULT_SUBSET[domain]} {mode} {name}": figures[name]
        for mode, domains in report["by_domain"].items()
        for domain, figures in domains.items()
        for name in names
    }


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


def same_named(root: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    """Two releases exported to same-named folders, and a folder re-exported with ``--overwrite`` holding the
    other release: each folder, loaded with ``datasets``' default settings in a fresh process (one cache for
    all), must give the rows its files hold, not a cached copy of the other release's."""
    warehouses = {recipe: str(root / f"{recipe}.duckdb") for recipe in ("instructir", "followir")}
    lines: list[dict[str, Any]] = []

    def export(recipe: str, out: Path, *extra: str) -> None:
        _ok(cli("--warehouse", warehouses[recipe], "export", "--format", "jsonl", "--out", str(out), *extra))

    def load(case: str, recipe: str, out: Path) -> None:
        done = subprocess.run([str(CLIENTS), str(CHECKER), "--rows", str(out)], env=env, capture_output=True, text=True)
        found = json.loads(done.stdout) if done.returncode == 0 else {"failed": done.stderr.strip()[-400:]}
        lines.append(
            {
                "check": "datasets own rows",
                "case": case,
                "recipe": recipe,
                "folder": str(out.relative_to(root)),
                **found,
            }
        )

    same = root / "same-named"
    export("instructir", same / "a" / "release")
    export("followir", same / "b" / "release")
    load("same-named folder", "instructir", same / "a" / "release")
    load("same-named folder", "followir", same / "b" / "release")
    export("instructir", same / "overwritten")
    load("before --overwrite", "instructir", same / "overwritten")
    export("followir", same / "overwritten", "--overwrite")
    load("after --overwrite", "followir", same / "overwritten")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="Write the exports here and keep them.")
    parser.add_argument("--followir-mteb", type=Path, help="A checkout of FollowIR's mteb fork.")
    parser.add_argument("--infosearch", type=Path, help="A checkout of InfoSearch's repository.")
    parser.add_argument("--ifir", type=Path, help="A checkout of IFIR's repository.")
    parser.add_argument("--inf-embed", type=Path, help="A checkout of InF-Embed's repository.")
    args = parser.parse_args()
    if not CLIENTS.exists():
        raise SystemExit("no client venv: run `make bench-clients` first")
    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(Path(scratch) / "datasets-cache")}
        folders, scores = make(root)
        own = same_named(root, env)
        checkouts = {"followir": args.followir_mteb, "infosearch": args.infosearch, "ifir": args.ifir,
                     "inf-embed": args.inf_embed}  # fmt: skip
        given = {"folders": folders, "scores": scores, "checkouts": {k: str(v) for k, v in checkouts.items() if v}}
        checked = subprocess.run(
            [str(CLIENTS), str(CHECKER)], input=json.dumps(given), env=env, capture_output=True, text=True
        )
    sys.stdout.write("".join(json.dumps(line) + "\n" for line in own) + checked.stdout)
    failed = sum(not line.get("agree") for line in own)
    if checked.returncode != 0 or failed:
        sys.stderr.write(checked.stderr[-4000:])
        raise SystemExit(checked.returncode or 1)


if __name__ == "__main__":
    main()
