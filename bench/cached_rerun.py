"""The end-to-end run, then the same command again: its wall time and the requests it sent (zero expected).

.venv/bin/python -m bench.cached_rerun [--seeds 100] [--latency 0.05] [--concurrency 64]

With ``--python`` given (twice or more: the interpreters of the venvs of checkouts to compare, each running its
own ifsynth), each runs the first run in a warehouse of its own, then the cached rerun ``--repeat`` times,
alternating which goes first, against one fake and one Prefect server: the median of each, its runs sorted.

.venv/bin/python -m bench.cached_rerun --seeds 80 --latency 0.2 --concurrency 128 --repeat 8 \
    --python ../before/.venv/bin/python --python .venv/bin/python
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import cli, emit, fake_requests, fake_server, finish, run_args, serving, synthetic_beir, warm_up
from bench.end_to_end import measure


def compare(
    base_url: str, pythons: list[str], seeds: int, concurrency: int, repeat: int, *, warm: bool
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        warm_up(base_url, root, warm=warm)
        args = run_args(synthetic_beir(root / "seeds", seeds), base_url, concurrency, "--limit", str(seeds))

        def wall(at: int) -> float:
            started = time.perf_counter()
            finish(cli(root / f"{at}.duckdb", *args, python=pythons[at], warm=warm))
            return time.perf_counter() - started

        first = [wall(at) for at in range(len(pythons))]
        if warm:  # each checkout's warm process, which its first run started (a checkout from before has none)
            serving(sum((Path(python).absolute().parents[2] / "flows/cli/warm.py").exists() for python in pythons))
        reruns: list[list[float]] = [[] for _ in pythons]
        for turn in range(repeat):
            for at in range(len(pythons))[:: 1 if turn % 2 == 0 else -1]:
                reruns[at].append(wall(at))
    return {
        python: {
            "first_wall_s": round(first[at], 3),
            "cached_median_s": round(statistics.median(reruns[at]), 3),
            "cached_s": sorted(round(s, 3) for s in reruns[at]),
        }
        for at, python in enumerate(pythons)
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cached_rerun", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--python", action="append", default=[], help="a checkout's venv interpreter (repeat)")
    parser.add_argument("--repeat", type=int, default=8, help="cached reruns of each, with --python")
    parser.add_argument("--cold", action="store_true", help="each command a process of its own (IFSYNTH_WARM=0)")
    args = parser.parse_args()
    with fake_server("--latency", str(args.latency)) as base_url:
        if args.python:
            figures = compare(base_url, args.python, args.seeds, args.concurrency, args.repeat, warm=not args.cold)
            emit({"bench": "cached_rerun", "seeds": args.seeds, "latency": args.latency, **figures})
            return
        served = functools.partial(fake_requests, base_url)
        figures = measure(base_url, args.seeds, args.latency, args.concurrency, 10, served, warm=not args.cold)
    keep = ("seeds", "requests", "first_wall_s", "cached_wall_s", "cached_rerun_sent", "cached_rerun_cached")
    emit({"bench": "cached_rerun", **{key: figures[key] for key in keep}})


if __name__ == "__main__":
    main()
