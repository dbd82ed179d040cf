"""What watching a run costs it: the InstructIR recipe (bench.end_to_end's sizing) run alone, and run while
another process asks it `ifsynth funnel --json` every second (answered by the run itself, see
warehouse/live.py). Runs alternate, each in a fresh warehouse, against one fake and one dedicated Prefect
server (a temporary server per process would add seconds of noise to each wall time).

    .venv/bin/python -m bench.live_watch [--seeds 100] [--latency 0.05] [--concurrency 64] [--repeat 3]

Prints the median wall time of each kind, their ratio (watched / alone), the polls made and the slowest
answer a poll got; then, in one more watched run that is not timed, how long the same `ifsynth run` started
again on its warehouse takes to be refused (it is in use), once it serves.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import REPO, cli, emit, fake_server, finish, run_args, synthetic_beir, warm_up
from ifsynth.warehouse.live import live_file
from tests.servers import prefect_server


def one_run(
    server: str, seeds: Path, warehouse: Path, env: dict[str, str], args: Any, watch: bool, refuse: bool = False
) -> dict[str, Any]:
    polls: list[float] = []
    process_args = run_args(seeds, server, args.concurrency, "--limit", str(args.seeds), k=args.k)
    started = time.perf_counter()
    process = cli(warehouse, *process_args, env=env)

    refused: list[float] = []

    def watch_it() -> None:
        while process.poll() is None:
            asked = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "ifsynth.flows.cli", "--warehouse", str(warehouse), "funnel", "--json"],
                cwd=REPO, capture_output=True, env={**env}, check=False,
            )  # fmt: skip
            polls.append(time.perf_counter() - asked)
            if refuse and not refused and process.poll() is None and live_file(warehouse).exists():  # it serves
                asked = time.perf_counter()
                second = cli(warehouse, *process_args, env=env)  # the same command as the run's
                _, said = second.communicate()
                if second.returncode != 0 and "is in use" in said:  # else the run had just ended
                    refused.append(time.perf_counter() - asked)
            time.sleep(1.0)

    watcher = threading.Thread(target=watch_it) if watch else None
    if watcher:
        watcher.start()
    finish(process)
    wall = time.perf_counter() - started
    if watcher:
        watcher.join()
    return {"wall_s": wall, "polls": len(polls), "slowest_poll_s": max(polls, default=0.0), "refused": refused}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.live_watch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with prefect_server() as prefect, fake_server("--latency", str(args.latency)) as server:
        env = {**os.environ, **prefect}
        results: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            warm_up(server, root, prefect)
            seeds = synthetic_beir(root / "seeds", args.seeds)
            for n in range(args.repeat):
                for watch in (False, True):
                    results[watch].append(one_run(server, seeds, root / f"{n}-{watch}.duckdb", env, args, watch))
            refused = one_run(server, seeds, root / "refuse.duckdb", env, args, True, refuse=True)["refused"]
    alone = statistics.median(r["wall_s"] for r in results[False])
    watched = statistics.median(r["wall_s"] for r in results[True])
    emit(
        {
            "seeds": args.seeds,
            "latency": args.latency,
            "concurrency": args.concurrency,
            "alone_wall_s": round(alone, 3),
            "watched_wall_s": round(watched, 3),
            "watched_over_alone": round(watched / alone, 3),
            "polls": [r["polls"] for r in results[True]],
            "slowest_poll_s": round(max(r["slowest_poll_s"] for r in results[True]), 3),
            "second_run_refused_in_s": [round(s, 3) for s in refused],
        }
    )


if __name__ == "__main__":
    main()
