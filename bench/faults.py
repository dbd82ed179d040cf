"""The recipe against a fake that answers 10% 429 (with Retry-After), 5% 500, 2% timeouts, 3% invalid JSON
and 2% cut off at max_tokens: the run completes, every fault is a row in llm_calls, and every stage accounts
for each of its inputs as output, rejection, parse error or failure.

    .venv/bin/python -m bench.faults [--seeds 100] [--latency 0.05] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import cli, emit, fake_server, finish, run_args, synthetic_beir, warm_up
from ifsynth.warehouse.store import Warehouse
from tests.helpers import query

RATES = {"429": 0.10, "500": 0.05, "timeout": 0.02, "invalid-json": 0.03, "length": 0.02}
# Where each stage's inputs come from: the outputs of the stage before, or those a judge passed.
CHAIN = [("instructions", "select"), ("rewrite", "instructions"), ("judge_relevance", "rewrite")]


def accounting(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = [{**s, "passed": s["in"] - (s["rejected"] + s["parse_error"] + s["failed"])} for s in stages]
    by_name = {row["stage"]: row for row in rows}
    for stage, source in CHAIN:
        expected = by_name[source]["out"]
        by_name[stage]["inputs_expected"] = expected
    relevance = by_name["judge_relevance"]
    by_name["judge_specificity"]["inputs_expected"] = relevance["in"] - (
        relevance["rejected"] + relevance["parse_error"] + relevance["failed"]
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    faults = [a for name, rate in RATES.items() for a in (f"--rate-{name}", str(rate))]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        seeds = synthetic_beir(root / "seeds", args.seeds)
        with fake_server("--latency", str(args.latency), "--timeout-sleep", "3", *faults) as url:
            warm_up(url, root)
            with urllib.request.urlopen(url.removesuffix("/v1") + "/_reset", data=b"", timeout=10):
                pass
            argv = run_args(seeds, url, args.concurrency, "--limit", str(args.seeds), "--set", "timeout=1")
            report = finish(cli(root / "faults.duckdb", *argv))
            with urllib.request.urlopen(url.removesuffix("/v1") + "/_stats", timeout=10) as response:
                served = json.load(response)
        with Warehouse(root / "faults.duckdb", read_only=True) as wh:
            rows = query(
                wh,
                'SELECT count(*) FILTER (WHERE http_status = 429) AS "429", '
                'count(*) FILTER (WHERE http_status = 500) AS "500", '
                "count(*) FILTER (WHERE error LIKE 'APITimeoutError%') AS timeout, "
                "count(*) FILTER (WHERE finish_reason = 'length') AS length, "
                "count(*) FILTER (WHERE http_status = 200) AS answered, count(*) AS total FROM llm_calls "
                "WHERE run_id = ?",
                [report["run"]],
            )[0]
    stages = accounting(report["stages"])
    outcomes = served["by_outcome"]
    emit(
        {
            "bench": "faults",
            "status": report["status"],
            "served": outcomes,
            "llm_calls_rows": rows,
            "every_fault_a_row": rows["429"] == outcomes["429"]
            and rows["500"] == outcomes["500"]
            and rows["timeout"] == outcomes["timeout"]
            and rows["length"] == outcomes["length"]
            and rows["answered"] == outcomes["ok"] + outcomes["invalid_json"] + outcomes["length"]
            and rows["total"] == served["requests"],
            "stages": stages,
            "every_input_accounted": all(s["passed"] >= 0 for s in stages)
            and all(s.get("inputs_expected", s["in"]) == s["in"] for s in stages),
            "accepted": report["accepted"],
        }
    )


if __name__ == "__main__":
    main()
