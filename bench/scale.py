"""Sharded runs at scale: the InstructIR recipe against the loopback fake on 1, 2 and 4 shards (local
processes) at a fixed total concurrency and per-request latency, then once on many seeds at zero latency
beside a tenth of them, to show that time and memory per seed stay flat.

    .venv/bin/python -m bench.scale [--seeds 400] [--latency 0.05] [--concurrency 16] [--k 3]
                                    [--large 20000] [--large-k 1]

Each line: shards, seeds, wall time, requests the fake answered, peak RSS of the coordinating process and of
each shard's process (VmHWM, read while they run), and the merge time (from the last shard's end to the
command's end: absorbing the shards, then the whole recipe again from the merged cache). Every shard gets
concurrency / shards, so the endpoint sees the same load whatever the split. Runs report to one dedicated
Prefect server, so no run pays for a temporary one.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    REPO,
    command_env,
    emit,
    fake_requests,
    fake_server,
    high_water_kb,
    run_args,
    synthetic_beir,
    warm_up,
)
from tests.servers import descendants, prefect_server


def measure(base_url: str, root: Path, seeds: int, shards: int, concurrency: int, k: int) -> dict[str, Any]:
    folder = synthetic_beir(root / f"seeds-{seeds}", seeds)
    warehouse = root / f"s{seeds}-{shards}.duckdb"
    before = fake_requests(base_url)
    argv = run_args(
        folder, base_url, max(1, concurrency // shards), "--limit", str(seeds), "--shards", str(shards), k=k
    )
    started = time.perf_counter()
    with (root / "err.txt").open("w") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "ifsynth.flows.cli", "--warehouse", str(warehouse), *argv],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=errors, env=command_env(warehouse),
        )  # fmt: skip
        peaks: dict[int, int] = {}
        shard_pids: set[int] = set()
        last_shard_end = None
        while process.poll() is None:
            peaks[process.pid] = max(peaks.get(process.pid, 0), high_water_kb(process.pid))
            alive = [pid for pid in descendants(process.pid) if "shard_process" in _command(pid)]
            for pid in alive:
                peaks[pid] = max(peaks.get(pid, 0), high_water_kb(pid))
            if shard_pids and not alive and last_shard_end is None:
                last_shard_end = time.perf_counter()
            shard_pids |= set(alive)
            time.sleep(0.1)
    ended = time.perf_counter()
    if process.returncode != 0:
        raise SystemExit(f"ifsynth failed: {(root / 'err.txt').read_text().strip()[-500:]}")
    return {
        "shards": shards,
        "seeds": seeds,
        "wall_s": round(ended - started, 1),
        "requests": fake_requests(base_url) - before,
        "coordinator_peak_rss_mb": round(peaks[process.pid] / 1024, 1),
        "shard_peak_rss_mb": sorted(round(peaks[pid] / 1024, 1) for pid in shard_pids),
        "merge_s": round(ended - last_shard_end, 1) if last_shard_end and shards > 1 else None,
    }


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=400)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--k", type=int, default=3, help="instructions per query")
    parser.add_argument("--large", type=int, default=20000, help="seeds of the zero-latency run (0: skip it)")
    parser.add_argument("--large-k", type=int, default=1)
    parser.add_argument("--large-shards", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, prefect_server() as prefect:
        os.environ.update(prefect)
        root = Path(tmp)
        with fake_server("--latency", str(args.latency)) as base_url:
            warm_up(base_url, root)
            for shards in (1, 2, 4):
                emit({"latency_s": args.latency, "concurrency": args.concurrency,
                      **measure(base_url, root, args.seeds, shards, args.concurrency, args.k)})  # fmt: skip
        if args.large:
            with fake_server("--latency", "0") as base_url:
                for seeds in (args.large // 10, args.large):
                    figures = measure(base_url, root, seeds, args.large_shards, args.concurrency, args.large_k)
                    emit({"latency_s": 0.0, "concurrency": args.concurrency, **figures})


if __name__ == "__main__":
    main()
