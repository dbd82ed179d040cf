"""SIGKILL a run at a random point, run the same command again, and compare its BEIR export with an
uninterrupted run's (each against a fresh fake, whose answers depend only on the request); requests sent in
total versus uninterrupted.

    .venv/bin/python -m bench.crash_resume [--seeds 100] [--latency 0.05] [--concurrency 64] [--seed 0]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import signal
import tempfile
import time
from pathlib import Path

from bench.common import cli, emit, fake_requests, fake_server, finish, run_args, synthetic_beir, warm_up


def digest(folder: Path) -> str:
    """One hash over the exported data files, by relative path (the card names the endpoint and the
    cached/sent split, which differ by design)."""
    hashed = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "README.md"):
        hashed.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return hashed.hexdigest()


def export(warehouse: Path, out: Path) -> str:
    finish_plain(cli(warehouse, "export", "--format", "beir", "--out", str(out)))
    return digest(out)


def finish_plain(process) -> None:
    _, errors = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"ifsynth exited {process.returncode}: {errors.strip()[-500:]}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.crash_resume", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="picks the kill point")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        seeds = synthetic_beir(root / "seeds", args.seeds)
        command = run_args(seeds, "{url}", args.concurrency, "--limit", str(args.seeds))

        with fake_server("--latency", str(args.latency)) as url:
            warm_up(url, root)
            warm = fake_requests(url)
            finish(cli(root / "whole.duckdb", *[a.replace("{url}", url) for a in command]))
            whole_requests = fake_requests(url) - warm
            whole = export(root / "whole.duckdb", root / "whole-export")

        with fake_server("--latency", str(args.latency)) as url:
            argv = [a.replace("{url}", url) for a in command]
            # The kill point is a random share of the run's requests, not of its time: start-up varies.
            kill_at = int(random.Random(args.seed).uniform(0.1, 0.9) * whole_requests)
            victim = cli(root / "killed.duckdb", *argv)
            while fake_requests(url) < kill_at and victim.poll() is None:
                time.sleep(0.01)
            killed_at = fake_requests(url)
            os.killpg(victim.pid, signal.SIGKILL)
            victim.communicate()
            resumed = finish(cli(root / "killed.duckdb", *argv))
            total_requests = fake_requests(url)
            after = export(root / "killed.duckdb", root / "killed-export")
    emit(
        {
            "bench": "crash_resume",
            "seeds": args.seeds,
            "kill_at_request": kill_at,
            "requests_before_kill": killed_at,
            "resumed_run_status": resumed["status"],
            "requests_total": total_requests,
            "requests_uninterrupted": whole_requests,
            "extra_requests": total_requests - whole_requests,
            "export_identical": whole == after,
        }
    )


if __name__ == "__main__":
    main()
