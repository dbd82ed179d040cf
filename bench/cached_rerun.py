"""The end-to-end run, then the same command again: its wall time and the requests it sent (zero expected).

.venv/bin/python -m bench.cached_rerun [--seeds 100] [--latency 0.05] [--concurrency 64]
"""

from __future__ import annotations

import argparse

from bench.common import emit, fake_requests, fake_server
from bench.end_to_end import measure


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cached_rerun", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    with fake_server("--latency", str(args.latency)) as base_url:
        figures = measure(base_url, args.seeds, args.latency, args.concurrency, 10, lambda: fake_requests(base_url))
    keep = ("seeds", "requests", "first_wall_s", "cached_wall_s", "cached_rerun_sent", "cached_rerun_cached")
    emit({"bench": "cached_rerun", **{key: figures[key] for key in keep}})


if __name__ == "__main__":
    main()
