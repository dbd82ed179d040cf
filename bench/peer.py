"""The same workload through bespokelabs-curator and through ifsynth's gateway: N chat requests with a JSON
schema, against the same loopback fake with latency L, at the same concurrency C. Prints both wall times and
their ratio (peer / ifsynth; above 1 means ifsynth is faster).

Curator pins openai 2.x and pulls litellm, so it runs from its own virtual environment, bench/.venv-peer
(`make bench-peer` creates it), never the project's. Curator limits by requests and tokens per minute rather
than by requests in flight; it is given `max_concurrent_requests` = C where it takes one, and per-minute
limits high enough not to bind.

    .venv/bin/python -m bench.peer [--n 2000] [--latency 0.05] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import REPO, emit, fake_requests, fake_server
from bench.gateway import once

PEER_PYTHON = REPO / "bench" / ".venv-peer" / "bin" / "python"
# tiktoken would download its encodings; litellm ships cl100k_base, so point tiktoken's cache at it (offline).
TIKTOKEN_CACHE = "lib/python3.11/site-packages/litellm/litellm_core_utils/tokenizers"
# Runs inside the peer's venv: N distinct prompts through curator.LLM with a structured answer.
PEER_SCRIPT = """
import os, sys, time, json
from pydantic import BaseModel
from bespokelabs import curator

n, concurrency, base_url = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

class Judgement(BaseModel):
    explanation: str
    score: int

class Judge(curator.LLM):
    response_format = Judgement
    def prompt(self, row):
        return f"judge passage peer-{row['i']}"
    def parse(self, row, response):
        return {"i": row["i"], "score": response.score}

judge = Judge(
    model_name="gpt-4o-mini",
    backend="openai",
    backend_params={
        "base_url": base_url, "api_key": "none", "max_concurrent_requests": concurrency,
        "max_requests_per_minute": 10_000_000, "max_tokens_per_minute": 10_000_000_000,
        "max_retries": 3, "require_all_responses": True,
    },
    generation_params={"temperature": 0.0, "max_tokens": 64},
)
started = time.perf_counter()
result = judge([{"i": i} for i in range(n)])
wall = time.perf_counter() - started
rows = result.dataset if hasattr(result, "dataset") else result
print(json.dumps({"wall_s": wall, "rows": len(rows)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    if not PEER_PYTHON.exists():
        raise SystemExit("no bench/.venv-peer: run `make bench-peer` first")
    with fake_server("--latency", str(args.latency)) as url, tempfile.TemporaryDirectory() as tmp:
        before = fake_requests(url)
        started = time.perf_counter()
        peer = subprocess.run(
            [str(PEER_PYTHON), "-c", PEER_SCRIPT, str(args.n), str(args.concurrency), url],
            capture_output=True, text=True, cwd=tmp,
            env={"CURATOR_CACHE_DIR": str(Path(tmp) / "curator"), "CURATOR_DISABLE_CACHE": "1",
                 "OPENAI_API_KEY": "none", "PATH": "/usr/bin:/bin", "HOME": tmp,
                 "TIKTOKEN_CACHE_DIR": str(next((REPO / "bench" / ".venv-peer").glob(TIKTOKEN_CACHE.replace(
                     "python3.11", "python3*"))))},
        )  # fmt: skip
        peer_process_wall = time.perf_counter() - started
        if peer.returncode != 0:
            raise SystemExit(f"curator failed: {peer.stderr.strip()[-800:]}")
        peer_figures = json.loads(peer.stdout.strip().splitlines()[-1])
        peer_requests = fake_requests(url) - before
        before = fake_requests(url)
        ours, ok, _ = once(url, args.n, args.concurrency, f"peer-{time.time_ns()}")
        our_requests = fake_requests(url) - before
    emit(
        {
            "bench": "peer",
            "peer": "bespokelabs-curator",
            "n": args.n,
            "latency": args.latency,
            "concurrency": args.concurrency,
            "peer_wall_s": round(peer_figures["wall_s"], 3),
            "peer_process_wall_s": round(peer_process_wall, 3),
            "peer_rows": peer_figures["rows"],
            "peer_requests": peer_requests,
            "ifsynth_wall_s": round(ours, 3),
            "ifsynth_ok": ok,
            "ifsynth_requests": our_requests,
            "ratio_peer_over_ifsynth": round(peer_figures["wall_s"] / ours, 2),
        }
    )


if __name__ == "__main__":
    main()
