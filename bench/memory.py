"""Peak RSS of an InstructIR run on 2,000 synthetic seeds, next to the same run on a tenth of them: stages
stream pages from the warehouse, so the peak grows far slower than the run. ``--sizes`` runs each of several
seed counts instead, in one sitting, to see where the peak stops growing.

    .venv/bin/python -m bench.memory [--seeds 2000 | --sizes 2000,10000,40000] [--k 10] [--concurrency 64]
        [--memory-limit 256MB] [--set stage_by_stage=true]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import REPO, command_env, emit, fake_server, high_water_kb, run_args, synthetic_beir, warm_up


def peak(
    base_url: str, root: Path, seeds: int, k: int, concurrency: int, limit: list[str], sets: list[str]
) -> dict[str, Any]:
    folder = synthetic_beir(root / f"seeds-{seeds}", seeds)
    started = time.perf_counter()
    argv = run_args(folder, base_url, concurrency, "--limit", str(seeds), *sets, k=k)
    out_path, err_path = root / f"out-{seeds}.json", root / f"err-{seeds}.txt"
    with out_path.open("w") as out_file, err_path.open("w") as err_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "ifsynth.flows.cli", "--warehouse", str(root / f"m{seeds}.duckdb"), *limit, *argv],
            cwd=REPO, stdout=out_file, stderr=err_file, env=command_env(root / f"m{seeds}.duckdb"),
        )  # fmt: skip
        own = 0  # the process's own peak, read while it runs (Prefect's server is a separate process)
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)  # its peak, and its reaped children's
            if pid:
                break
            own = max(own, high_water_kb(process.pid))
            time.sleep(0.1)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"ifsynth failed: {err_path.read_text().strip()[-500:]}")
    out = out_path.read_text()
    report = json.loads(out)
    return {
        "seeds": seeds,
        "requests": report["llm_calls"]["sent"],
        "wall_s": round(time.perf_counter() - started, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "ifsynth_process_peak_rss_mb": round(own / 1024, 1),
    }


def sizes(text: str) -> list[int]:
    try:
        counts = [int(n) for n in text.split(",")]
    except ValueError:
        counts = []
    if len(set(counts)) < 2 or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"two seed counts or more, comma-separated, such as 2000,10000: not {text!r}")
    return sorted(set(counts))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--seeds", type=int, default=2000, help="runs a tenth of them, then all")
    size.add_argument("--sizes", type=sizes, help="seed counts to run instead, comma-separated")
    parser.add_argument("--k", type=int, default=10, help="instructions per query")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--memory-limit", help="passed to ifsynth: the cap on DuckDB's buffer pool")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to `ifsynth run`")
    args = parser.parse_args()
    limit = ["--memory-limit", args.memory_limit] if args.memory_limit else []
    sets = [a for s in args.set for a in ("--set", s)]
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, fake_server() as url:
        root = Path(tmp)
        warm_up(url, root)
        for seeds in args.sizes or [max(1, args.seeds // 10), args.seeds]:
            runs.append(peak(url, root, seeds, args.k, args.concurrency, limit, sets))
            for path in root.glob(f"m{seeds}.duckdb*"):  # a 40,000-seed warehouse is 230 MB
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
    small, large, own = runs[0], runs[-1], "ifsynth_process_peak_rss_mb"
    emit({"bench": "memory", "k": args.k, "memory_limit": args.memory_limit, "set": args.set,
          "small": small, "large": large, **({"runs": runs} if args.sizes else {}),
          "rss_ratio": round(large["peak_rss_mb"] / small["peak_rss_mb"], 2),
          "ifsynth_process_rss_ratio": round(large[own] / small[own], 2),
          "work_ratio": round(large["requests"] / small["requests"], 2)})  # fmt: skip


if __name__ == "__main__":
    main()
