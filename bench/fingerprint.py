"""What a refactor must not change: the cache keys of every LLM call and the bytes of every export data file.

Runs the InstructIR, InfoSearch and InF-IR recipes on the demo seeds against the loopback fake on a fixed port
(the base URL is part of every cache key), exports each release in every format it has, and prints one JSON
line: per recipe, the number of calls, a digest of the sorted call keys and the SHA-256 of every data file
(dataset cards, which name the run, are left out). Run it before and after a change and compare the lines:

    .venv/bin/python -m bench.fingerprint > before.json   # on the old tree
    .venv/bin/python -m bench.fingerprint > after.json    # on the new one
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import duckdb

from bench.common import REPO, fake_server

IFSYNTH = str(Path(sys.executable).parent / "ifsynth")
RUNS: dict[str, tuple[list[str], list[str]]] = {  # recipe -> (run arguments, export formats)
    "instructir": (
        ["--limit", "12", "--set", "instructions_per_query=3", "--set", "q1_min_score=1", "--set", "min_group_size=1"],
        ["beir", "mteb", "jsonl", "parquet"],
    ),
    "infosearch": (
        [
            "--set",
            "min_rewrite_score=1",
            "--set",
            "min_reversal_score=1",
            "--set",
            "max_negative_score=5",
            "--set",
            "min_negative_overlap=0",
        ],
        ["infosearch", "beir", "mteb", "jsonl", "parquet"],
    ),
    # no distractors: judged against random answers beside them, every gold document is missed (empty release)
    "infir": (["--limit", "8", "--set", "distractors=0"], ["infir", "triplets", "hf", "jsonl", "parquet"]),
}
CARDS = {"README.md"}


def _ifsynth(warehouse: Path, *args: str) -> None:
    done = subprocess.run([IFSYNTH, "--warehouse", str(warehouse), *args], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"ifsynth {' '.join(args)} failed: {done.stderr.strip()[-800:]}")


def fingerprint(recipe: str, base_url: str, root: Path) -> dict[str, Any]:
    args, formats = RUNS[recipe]
    warehouse = root / f"{recipe}.duckdb"
    _ifsynth(warehouse, "run", recipe, "--seeds", "demo", "--base-url", base_url, "--model", "m", *args)
    files: dict[str, str] = {}
    for fmt in formats:
        out = root / recipe / fmt
        _ifsynth(warehouse, "export", "--format", fmt, "--out", str(out))
        for path in sorted(p for p in out.rglob("*") if p.is_file() and p.name not in CARDS):
            files[f"{fmt}/{path.relative_to(out)}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    with duckdb.connect(str(warehouse), read_only=True) as con:
        keys = [row[0] for row in con.execute("SELECT DISTINCT key FROM llm_calls ORDER BY key").fetchall()]
    return {"calls": len(keys), "keys": hashlib.sha256("\n".join(keys).encode()).hexdigest(), "files": files}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=18765, help="fixed: the base URL is part of the cache key")
    parser.add_argument("--recipe", action="append", choices=sorted(RUNS), help="default: all three")
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, fake_server(port=args.port) as base_url:
        for recipe in args.recipe or sorted(RUNS):
            figures[recipe] = fingerprint(recipe, base_url, Path(tmp))
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
