"""Do the exports load in the clients people use? Releases of three recipes are made against the loopback fake
(the responders of the recipes' tests), exported in every folder layout, and checked in a separate venv that
has mteb, datasets, beir and sentence-transformers (`make bench-clients` builds it; they pull torch, which
ifsynth's own install does not have): each card config loads with ``datasets.load_dataset``, the MTEB folders
load through mteb's retrieval loader (per mode where there are several), the BEIR folder through beir's
GenericDataLoader, and the InF-IR triplets train a small sentence-transformers model for a few steps.

    python -m bench.clients [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conftest import INSTRUCTIR_SEEDS, cli
from tests.fake_openai import FakeOpenAI
from tests.helpers import sensible as instructir_answers
from tests.recipes.test_infir import sensible as infir_answers
from tests.recipes.test_infosearch import sensible as infosearch_answers

REPO = Path(__file__).resolve().parents[1]
CLIENTS = REPO / "bench" / ".venv-clients" / "bin" / "python"
RUNS = {
    "instructir": (instructir_answers, f"beir:{INSTRUCTIR_SEEDS}", ["instructions_per_query=4", "min_group_size=3"]),
    "infosearch": (infosearch_answers, "demo", []),
    "infir": (infir_answers, "demo", []),
}
FORMATS = {
    "instructir": ("beir", "mteb", "jsonl", "parquet"),
    "infosearch": ("beir", "mteb", "jsonl", "parquet", "infosearch"),
    "infir": ("mteb", "jsonl", "parquet", "infir", "triplets", "hf"),
}


def make(root: Path) -> list[dict[str, str]]:
    """Every recipe's release in every folder layout it takes; what the checker is to load. The runs are child
    `ifsynth` processes, as a user's are (the fake answers from this one)."""
    folders = []
    for recipe, (answers, seeds, sets) in RUNS.items():
        warehouse = str(root / f"{recipe}.duckdb")
        with FakeOpenAI(mode="responder", responder=answers) as fake:
            settings = [arg for value in sets for arg in ("--set", value)]
            _ok(cli("--warehouse", warehouse, "run", recipe, "--seeds", seeds, "--limit", "8",
                    "--base-url", fake.base_url, "--model", "gen", *settings))  # fmt: skip
        for fmt in FORMATS[recipe]:
            out = root / recipe / fmt
            _ok(cli("--warehouse", warehouse, "export", "--format", fmt, "--out", str(out)))
            folders.append({"recipe": recipe, "format": fmt, "path": str(out)})
    return folders


def _ok(done: subprocess.CompletedProcess[str]) -> None:
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(done.args[3:6])} failed: {done.stderr.strip()[-400:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="Write the exports here and keep them.")
    args = parser.parse_args()
    if not CLIENTS.exists():
        raise SystemExit("no client venv: run `make bench-clients` first")
    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        folders = make(root)
        checked = subprocess.run(
            [str(CLIENTS), str(REPO / "bench" / "clients_check.py")],
            input=json.dumps(folders),
            capture_output=True,
            text=True,
        )
    sys.stdout.write(checked.stdout)
    if checked.returncode != 0:
        sys.stderr.write(checked.stderr[-4000:])
        raise SystemExit(checked.returncode)


if __name__ == "__main__":
    main()
