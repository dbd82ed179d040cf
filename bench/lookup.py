"""A cache lookup in a warehouse that holds many earlier calls: of a request answered during this open against
one answered when the file began. Each reads the row group of its first answer; bounded by that answer's time
alone, the second read every call since, as every lookup did before any bound. Median time and table blocks
read a lookup.

    .venv/bin/python -m bench.lookup [--calls 300000] [--lookups 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from bench.common import emit
from ifsynth.warehouse.store import Warehouse
from tests.helpers import answered_at, kept_blocks, random_key


def lookups(warehouse: Warehouse, keys: list[str]) -> dict[str, float]:
    """Each key looked up alone, with DuckDB's table blocks let go before: its median time and blocks read."""
    seconds, read = [], []
    for k in keys:
        warehouse._let_blocks_go()
        before = kept_blocks(warehouse)
        started = time.perf_counter()
        if k not in warehouse.cached([k]):
            raise SystemExit(f"key {k} not found")
        seconds.append(time.perf_counter() - started)
        read.append(kept_blocks(warehouse) - before)
    return {"median_ms": round(statistics.median(seconds) * 1000, 2),
            "median_blocks_mb": round(statistics.median(read) / 2**20, 2)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.lookup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300_000, help="earlier calls in the file")
    parser.add_argument("--lookups", type=int, default=20, help="keys looked up of each kind (at most 1000)")
    args = parser.parse_args()
    start, now = datetime(2026, 1, 1), datetime(2026, 2, 1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.duckdb"
        with Warehouse(path) as warehouse:
            for i in range(args.calls):
                warehouse.add_call(answered_at(i, start + timedelta(seconds=i / 10)))
        with Warehouse(path) as warehouse:
            for j in range(1000):  # this open's answers
                warehouse.add_call(answered_at(args.calls + j, now + timedelta(seconds=j)))
            warehouse.flush()
            warehouse.checkpoint()  # in the file's blocks, as a long run's answers are, not in memory still
            warehouse.cached([random_key(-1)])  # the file's answered keys read once, as a run's first lookup does
            recent = lookups(
                warehouse, [random_key(args.calls + j * 1000 // args.lookups) for j in range(args.lookups)]
            )
            old = lookups(warehouse, [random_key(j) for j in range(args.lookups)])
    emit({"bench": "lookup", "calls": args.calls, "answered_this_open": recent, "answered_first": old,
          "time_ratio": round(old["median_ms"] / recent["median_ms"], 1)})  # fmt: skip


if __name__ == "__main__":
    main()
