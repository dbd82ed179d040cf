"""The InstructIR recipe on synthetic seeds against an OpenAI-compatible server with fixed latency L at
concurrency C, then the same command again (all from the cache).

Per stage: requests x L / C over the stage's wall time; the fixed start-up cost (process, Prefect, seeds);
and overall (requests x L / C) / (first wall - cached wall), with the requests the cached rerun sent.

    .venv/bin/python -m bench.end_to_end [--seeds 100] [--latency 0.05] [--concurrency 64]
    .venv/bin/python -m bench.end_to_end --base-url http://host:port/v1 --latency 0.2 --seeds 40 --concurrency 32
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import cli, emit, fake_requests, fake_server, finish, run_args, stage_times, synthetic_beir, warm_up


def measure(base_url: str, seeds: int, latency: float, concurrency: int, k: int, fake: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        warm = warm_up(base_url, root)
        folder = synthetic_beir(root / "seeds", seeds)
        warehouse = root / "bench.duckdb"
        args = run_args(folder, base_url, concurrency, "--limit", str(seeds), k=k)
        started = time.perf_counter()
        first = finish(cli(warehouse, *args))
        first_wall = time.perf_counter() - started
        before = fake_requests(base_url) if fake else None
        started = time.perf_counter()
        again = finish(cli(warehouse, *args))
        cached_wall = time.perf_counter() - started
        rerun_sent = fake_requests(base_url) - before if before is not None else again["llm_calls"]["sent"]
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
    parser.add_argument("--base-url", help="an OpenAI-compatible server instead of the loopback fake")
    args = parser.parse_args()
    if args.base_url:
        figures = measure(args.base_url, args.seeds, args.latency, args.concurrency, args.k, fake=False)
    else:
        with fake_server("--latency", str(args.latency)) as base_url:
            figures = measure(base_url, args.seeds, args.latency, args.concurrency, args.k, fake=True)
    emit({"bench": "end_to_end", **figures})


if __name__ == "__main__":
    main()
