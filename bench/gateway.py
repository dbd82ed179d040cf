"""N requests through the gateway and the warehouse into the loopback fake with fixed latency L at
concurrency C. The ideal wall time is N·L/C; efficiency = ideal / wall.

    .venv/bin/python -m bench.gateway [--n 5000] [--latency 0.2] [--concurrency 128] [--repeat 3] [--prior-calls 0]
                                      [--gc-default]

The defaults are a realistic operating point: 640 requests a second, above the largest public rate limits.
``--latency 0`` measures what one core of the client sustains (``requests_per_cpu_second``).

``--prior-calls N`` first fills the warehouse with N answered calls of earlier runs, as a warehouse that has
served many runs holds: every cache lookup then searches them.

``--bare`` sends the same requests with aiohttp alone (no SDK, no cache, no warehouse, one connection per
place): what any client reaches against this server, at this operating point, on this machine. The
gateway's efficiency is read against it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import pandas  # noqa: F401  (the warehouse imports it on first use; a run has it loaded long before its first call)

from bench.common import emit, fake_server
from ifsynth.flows.llm import loop
from ifsynth.flows.llm.gateway import Gateway
from ifsynth.flows.llm.requests import Ask
from ifsynth.prompts.registry import Rendered
from ifsynth.schemas.answers import RelevanceJudgement
from ifsynth.schemas.config import Endpoint, RunConfig
from ifsynth.warehouse.store import Warehouse


def asks(n: int, salt: str) -> list[Ask]:
    return [
        Ask(
            Rendered("bench/judge", "bench", ({"role": "user", "content": f"judge passage {salt}-{i}"},)),
            RelevanceJudgement,
            "generator",
            0.0,
            64,
        )
        for i in range(n)
    ]


def fill(path: Path, calls: int) -> None:
    """``calls`` answered calls of an earlier run, written straight into llm_calls (a bulk insert no command
    of the tool makes, so through DuckDB itself, once the warehouse has created its tables)."""
    Warehouse(path).close()
    with duckdb.connect(str(path)) as con:
        con.execute(
            "INSERT INTO llm_calls (call_id, key, run_id, stage, template, template_hash, base_url, model, request, "
            "response, attempt, created_at) SELECT 'prior-' || i, sha256('prior-' || i), 'prior', 'judge', "
            "'bench/judge', 'bench', 'http://prior/v1', 'gpt-4o-mini', '{}', '{}', 1, now() FROM range(?) t(i)",
            [calls],
        )


def once(
    base_url: str, n: int, concurrency: int, salt: str, prior_calls: int = 0, *, tune_gc: bool = True
) -> tuple[float, int, float]:
    """Wall seconds, requests answered, and this process's CPU seconds (the fake's are not ours)."""
    endpoint = Endpoint(base_url=base_url, concurrency=concurrency, max_attempts=3, timeout=30.0)
    config = RunConfig(recipe="instructir", seeds="demo", model="gpt-4o-mini", endpoint=endpoint)
    batch = asks(n, salt)
    with tempfile.TemporaryDirectory() as tmp:
        if prior_calls:
            fill(Path(tmp) / "bench.duckdb", prior_calls)
        return _timed(config, batch, Path(tmp) / "bench.duckdb", tune_gc)


def _timed(config: RunConfig, batch: list[Ask], path: Path, tune_gc: bool) -> tuple[float, int, float]:
    with Warehouse(path) as warehouse:

        async def go() -> int:
            async with Gateway(config, warehouse, "bench") as gateway:
                replies = await gateway.ask_many("judge", batch)
            return sum(reply.status == "ok" for reply in replies)

        started, cpu = time.perf_counter(), time.process_time()
        ok = loop.run(go(), tune_gc=tune_gc)
        warehouse.flush()
        return time.perf_counter() - started, ok, time.process_time() - cpu


def bare(base_url: str, n: int, concurrency: int, salt: str) -> tuple[float, int, float]:
    """The same requests (a judge's structured output, a prompt each of its own) with plain aiohttp."""
    import aiohttp

    schema = RelevanceJudgement.model_json_schema()
    bodies = [
        json.dumps(
            {
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": f"judge passage {salt}-{i}"}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}},
                "max_tokens": 64,
            }
        ).encode()
        for i in range(n)
    ]
    headers = {"content-type": "application/json", "authorization": "Bearer bench"}

    async def go() -> int:
        places = asyncio.Semaphore(concurrency)
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(base_url.rstrip("/") + "/", connector=connector) as session:

            async def one(body: bytes) -> bool:
                async with places, session.post("chat/completions", data=body, headers=headers) as response:
                    await response.read()
                    return response.status == 200

            return sum(await asyncio.gather(*(one(body) for body in bodies)))

    started, cpu = time.perf_counter(), time.process_time()
    ok = asyncio.run(go())
    return time.perf_counter() - started, ok, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3, help="runs; the median is reported")
    parser.add_argument("--prior-calls", type=int, default=0, help="answered calls already in the warehouse")
    parser.add_argument("--gc-default", action="store_true", help="the garbage collector's own settings")
    parser.add_argument("--bare", action="store_true", help="the same requests with aiohttp alone")
    args = parser.parse_args()
    ideal = args.n * args.latency / args.concurrency
    walls, cpus = [], []
    with fake_server("--latency", str(args.latency)) as base_url:
        for run in range(args.repeat):
            salt = f"r{run}-{time.time_ns()}"
            if args.bare:
                wall, ok, cpu = bare(base_url, args.n, args.concurrency, salt)
            else:
                wall, ok, cpu = once(
                    base_url, args.n, args.concurrency, salt, args.prior_calls, tune_gc=not args.gc_default
                )
            if ok != args.n:
                raise SystemExit(f"only {ok} of {args.n} requests answered")
            walls.append(wall)
            cpus.append(cpu)
    wall = statistics.median(walls)
    emit(
        {
            "bench": "gateway",
            "client": "aiohttp alone" if args.bare else "ifsynth's gateway",
            "n": args.n,
            "latency": args.latency,
            "concurrency": args.concurrency,
            "prior_calls": args.prior_calls,
            "gc": "default" if args.gc_default else "tuned",
            "ideal_s": round(ideal, 3),
            "wall_s": round(wall, 3),
            "walls_s": [round(w, 3) for w in walls],
            "efficiency": round(ideal / wall, 3),
            # the client's CPU per request: at concurrency C and latency L, above L/C it alone caps efficiency
            "client_cpu_ms": round(statistics.median(cpus) / args.n * 1000, 3),
            # what one core of the client's sustains (at --latency 0, the figure that matters)
            "requests_per_cpu_second": round(args.n / statistics.median(cpus)),
        }
    )


if __name__ == "__main__":
    main()
