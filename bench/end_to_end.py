"""The InstructIR recipe on synthetic seeds against an OpenAI-compatible server with fixed latency L at
concurrency C, then the same command again (all from the cache).

Per stage: requests x L / C over the stage's wall time; over all LLM stages (which may overlap), requests x L /
C over their span, from the first request to the last answer; the rest of the run (process, Prefect, seeds,
rule stages); and overall (requests x L / C) / (first wall - cached wall), with the requests the cached rerun
sent.

    .venv/bin/python -m bench.end_to_end [--seeds 100] [--latency 0.05] [--concurrency 64] [--repeat 3]
    make bench-mock && .venv/bin/python -m bench.end_to_end --server wiremock --latency 0.2 --seeds 40 --concurrency 32
    .venv/bin/python -m bench.end_to_end --base-url http://host:port/v1 --latency 0.2 --seeds 40 --concurrency 32

The difference of two wall times carries the noise of two start-ups, so the pair is measured ``--repeat``
times, each in a fresh warehouse, and the figures of the pair with the median net efficiency are printed,
with every pair's net efficiency beside them. The commands share one local Prefect server (in a Prefect
home of the benchmark's own), as a user's do; the warm-up run starts it.
Requests sent are counted by the server where it can tell (the fake's /_stats, WireMock's request journal),
else read from ifsynth's own report.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import (
    cli,
    covered,
    emit,
    fake_requests,
    fake_server,
    finish,
    run_args,
    slot_budget,
    stage_seconds,
    stage_times,
    synthetic_beir,
    warm_up,
)
from bench.wiremock import wiremock_server
from tests.servers import prefect_server


def measure(
    base_url: str,
    seeds: int,
    latency: float,
    concurrency: int,
    k: int,
    served: Callable[[], int] | None,
    env: dict[str, str] | None = None,
    *,
    warm: bool = True,
) -> dict[str, Any]:
    """``served`` counts the requests the server has answered, when it can tell; ``env`` is added to the
    runs' environment; ``warm``: the runs go through the warm process (started by the warm-up run)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        warmup = warm_up(base_url, root, env, warm=warm)
        folder = synthetic_beir(root / "seeds", seeds)
        warehouse = root / "bench.duckdb"
        args = run_args(folder, base_url, concurrency, "--limit", str(seeds), k=k)
        started = time.perf_counter()
        first = finish(cli(warehouse, *args, env=env, warm=warm))
        first_wall = time.perf_counter() - started
        before = served() if served is not None else 0
        started = time.perf_counter()
        again = finish(cli(warehouse, *args, env=env, warm=warm))
        cached_wall = time.perf_counter() - started
        rerun_sent = served() - before if served is not None else again["llm_calls"]["sent"]
        stages = stage_times(warehouse, first["run"])
        budget = slot_budget(warehouse, first["run"], concurrency, latency)
        reading = stage_seconds(f"instructir/{again['name']}", len(again["stages"])) if env is None else None
    requests = first["llm_calls"]["sent"]
    ideal = requests * latency / concurrency
    spans = [(s.pop("first_s"), s.pop("last_s")) for s in stages]
    per_stage = [
        {**s, "wall_s": round(s["wall_s"], 3), "efficiency": round(s["calls"] * latency / concurrency / s["wall_s"], 3)}
        for s in stages
    ]
    # the LLM stages' time: from the first request's start to the last answer, any stage's (they may overlap)
    llm_span = max(end for _, end in spans) - min(start for start, _ in spans)
    # each stage's own floor: its requests in full waves of C, L each (the fake answers every one after L)
    waves = sum(-(-s["calls"] // concurrency) * latency for s in stages)
    return {
        "seeds": seeds,
        "latency": latency,
        "concurrency": concurrency,
        "requests": requests,
        "first_wall_s": round(first_wall, 3),
        "cached_wall_s": round(cached_wall, 3),
        "cached_rerun_sent": rerun_sent,
        "cached_rerun_cached": again["llm_calls"]["cached"],
        # the stages' own time in the cached rerun (reading the answers, writing the run's rows); the rest is
        # the command's fixed cost: the process, imports, checks, Prefect's flow run, the exit
        "cached_stages_s": None if reading is None else round(reading, 3),
        "cached_fixed_s": None if reading is None else round(cached_wall - reading, 3),
        "warmup_s": round(warmup, 3),
        "stages": per_stage,
        "startup_s": round(first_wall - llm_span, 3),
        "llm_span_s": round(llm_span, 3),
        "efficiency_over_stages": round(ideal / llm_span, 3),
        "llm_span_parts": budget,
        "stage_waves_s": round(waves, 3),
        # within the LLM stages' time, how long no stage had a request in flight (the barriers between them)
        "idle_between_stages_s": round(llm_span - covered(spans), 3),
        "whole_run_over_ideal": round(first_wall / ideal, 3) if ideal else None,  # no ideal at L = 0
        "efficiency_net_of_cached_rerun": round(ideal / (first_wall - cached_wall), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.end_to_end", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.05, help="the fake's latency, or the server's")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--k", type=int, default=10, help="instructions per query")
    parser.add_argument("--repeat", type=int, default=3, help="first and cached runs; the median is printed")
    parser.add_argument("--server", choices=["fake", "wiremock"], default="fake", help="started with --latency")
    parser.add_argument("--prefect-server", action="store_true", help="runs use one dedicated Prefect server")
    parser.add_argument("--base-url", help="an OpenAI-compatible server already running, instead of --server")
    parser.add_argument("--cold", action="store_true", help="each command a process of its own (IFSYNTH_WARM=0)")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(prefect_server()) if args.prefect_server else None
        if args.base_url:
            server, served = args.base_url, None
        elif args.server == "wiremock":
            wiremock = stack.enter_context(wiremock_server(args.latency))
            server, served = wiremock.base_url, wiremock.requests
        else:
            server = stack.enter_context(fake_server("--latency", str(args.latency)))
            served = functools.partial(fake_requests, server)
        shape = (args.seeds, args.latency, args.concurrency, args.k)
        pairs = [measure(server, *shape, served, env, warm=not args.cold) for _ in range(args.repeat)]
    net = [pair["efficiency_net_of_cached_rerun"] for pair in pairs]
    median = sorted(pairs, key=lambda pair: pair["efficiency_net_of_cached_rerun"])[len(pairs) // 2]
    emit(
        {
            "bench": "end_to_end",
            "server": args.base_url or args.server,
            "prefect": "dedicated server" if args.prefect_server else "the local server the commands share",
            "commands": "each a process of its own" if args.cold else "through the warm process",
            "repeat": args.repeat,
            **median,
            "net_efficiencies": net,
            "first_walls_s": [pair["first_wall_s"] for pair in pairs],
            "cached_walls_s": [pair["cached_wall_s"] for pair in pairs],
        }
    )


if __name__ == "__main__":
    main()
