"""The InstructIR recipe on synthetic seeds against an OpenAI-compatible server with fixed latency L at
concurrency C, then the same command again (all from the cache).

Per stage: requests x L / C over the stage's wall time; the fixed start-up cost (process, Prefect, seeds);
and overall (requests x L / C) / (first wall - cached wall), with the requests the cached rerun sent.

    .venv/bin/python -m bench.end_to_end [--seeds 100] [--latency 0.05] [--concurrency 64]
    make bench-mock && .venv/bin/python -m bench.end_to_end --server mockoon --latency 0.2 --seeds 40 --concurrency 32
    .venv/bin/python -m bench.end_to_end --base-url http://host:port/v1 --latency 0.2 --seeds 40 --concurrency 32

Requests sent are counted by the server where it can tell (the fake's /_stats, Mockoon's log), else read from
ifsynth's own report.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import cli, emit, fake_requests, fake_server, finish, run_args, stage_times, synthetic_beir, warm_up
from bench.mockoon import mockoon_server


def measure(
    base_url: str, seeds: int, latency: float, concurrency: int, k: int, served: Callable[[], int] | None
) -> dict[str, Any]:
    """``served`` counts the requests the server has answered, when it can tell."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        warm = warm_up(base_url, root)
        folder = synthetic_beir(root / "seeds", seeds)
        warehouse = root / "bench.duckdb"
        args = run_args(folder, base_url, concurrency, "--limit", str(seeds), k=k)
        started = time.perf_counter()
        first = finish(cli(warehouse, *args))
        first_wall = time.perf_counter() - started
        before = served() if served is not None else 0
        started = time.perf_counter()
        again = finish(cli(warehouse, *args))
        cached_wall = time.perf_counter() - started
        rerun_sent = served() - before if served is not None else again["llm_calls"]["sent"]
        stages = stage_times(warehouse, first["run"])
    requests = first["llm_calls"]["sent"]
    ideal = requests * latency / concurrency
    per_stage = [
        {**s, "wall_s": round(s["wall_s"], 3), "efficiency": round(s["calls"] * latency / concurrency / s["wall_s"], 3)}
        for s in stages
    ]
    stage_wall = sum(s["wall_s"] for s in stages)
    return {
        "seeds": seeds,
        "latency": latency,
        "concurrency": concurrency,
        "requests": requests,
        "first_wall_s": round(first_wall, 3),
        "cached_wall_s": round(cached_wall, 3),
        "cached_rerun_sent": rerun_sent,
        "cached_rerun_cached": again["llm_calls"]["cached"],
        "warmup_s": round(warm, 3),
        "stages": per_stage,
        "startup_s": round(first_wall - stage_wall, 3),
        "efficiency_over_stages": round(ideal / stage_wall, 3),
        "efficiency_net_of_cached_rerun": round(ideal / (first_wall - cached_wall), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.end_to_end", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.05, help="the fake's latency, or the server's")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--k", type=int, default=10, help="instructions per query")
    parser.add_argument("--server", choices=["fake", "mockoon"], default="fake", help="started with --latency")
    parser.add_argument("--base-url", help="an OpenAI-compatible server already running, instead of --server")
    args = parser.parse_args()
    shape = (args.seeds, args.latency, args.concurrency, args.k)
    if args.base_url:
        server, figures = args.base_url, measure(args.base_url, *shape, served=None)
    elif args.server == "mockoon":
        with mockoon_server(args.latency) as mockoon:
            server, figures = "mockoon", measure(mockoon.base_url, *shape, served=mockoon.settled_requests)
    else:
        with fake_server("--latency", str(args.latency)) as base_url:
            server, figures = "fake", measure(base_url, *shape, served=lambda: fake_requests(base_url))
    emit({"bench": "end_to_end", "server": server, **figures})


if __name__ == "__main__":
    main()
