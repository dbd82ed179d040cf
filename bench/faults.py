"""Faults injected one at a time, each printed with what it ended as (exit code, last line, the run's
status, wall time, peak RSS): a reply trickled a byte at a time, a connection reset, a gzip bomb (in the
chat reply and in GET /models), answers that are all unusable, and a full disk (a small tmpfs, where this
machine lets the bench mount one; else said so). A hostile server on a loopback socket plays the transport
faults; the fake (``tests.fake_openai``) the rest.

``--mix``: the recipe against a fake that answers 10% 429 (with Retry-After), 5% 500, 2% timeouts, 3% invalid
JSON and 2% cut off at max_tokens: the run completes, every fault is a row in llm_calls, and every stage
accounts for each of its inputs as output, rejection, parse error or failure.

    .venv/bin/python -m bench.faults [--cap 120]
    .venv/bin/python -m bench.faults --mix [--seeds 100] [--latency 0.05] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request
import zlib
from collections.abc import Iterator
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


COMPLETION = json.dumps({
    "id": "chatcmpl-hostile", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}).encode()  # fmt: skip
MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "bench"}]}).encode()
BOMB_MB = 512  # what the gzip bomb inflates to; it travels as about 0.5 MB


def gzip_bomb(megabytes: int = BOMB_MB) -> bytes:
    """A gzip body of ``megabytes`` MB of zeros."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(2**20)
    return b"".join(packer.compress(zeros) for _ in range(megabytes)) + packer.flush()


class Hostile:
    """A loopback HTTP server that answers GET /models well and every chat completion with ``mode``: trickle
    (a valid reply, one byte a second), reset (the connection dropped with a TCP RST), bomb (a gzip bomb);
    bomb-models answers GET /models with the bomb too. One request per connection."""

    def __init__(self, mode: str) -> None:
        self.mode, self.bomb = mode, gzip_bomb() if "bomb" in mode else b""
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            request, _, rest = head.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in request.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
            while len(rest) < length:
                rest += conn.recv(65536)
            if request.startswith(b"GET") and b"/models" in request.split(b"\r\n")[0]:
                self._reply(conn, self.bomb if self.mode == "bomb-models" else MODELS, self.mode == "bomb-models")
            elif self.mode == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            elif self.mode == "trickle":
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\nconnection: close\r\n\r\n" % len(COMPLETION))  # fmt: skip
                for byte in COMPLETION:
                    if self.stopped.wait(1.0):
                        return
                    conn.sendall(bytes([byte]))
            else:
                self._reply(conn, self.bomb or COMPLETION, bool(self.bomb))

    @staticmethod
    def _reply(conn: socket.socket, body: bytes, gzipped: bool) -> None:
        encoding = b"content-encoding: gzip\r\n" if gzipped else b""
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n%scontent-length: %d\r\n"
                     b"connection: close\r\n\r\n%s" % (encoding, len(body), body))  # fmt: skip

    def close(self) -> None:
        self.stopped.set()
        self.sock.close()


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "1m") -> Iterator[bool]:
    """A tmpfs of ``size`` mounted at ``path`` (as root, where the machine allows it); whether it was."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, check=False).returncode == 0  # fmt: skip
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", str(path)], capture_output=True, check=False)


def ended(warehouse: Path, base_url: str, cap: float, limit: int = 4) -> dict[str, Any]:
    """Run the InstructIR recipe on ``limit`` demo seeds against ``base_url`` (timeout 3 s, 2 attempts),
    killed at ``cap`` seconds: how it ended."""
    args = ["run", "instructir", "--seeds", "demo", "--limit", str(limit), "--base-url", base_url, "--model", "m",
            "--concurrency", "4", "--set", "timeout=3", "--set", "max_attempts=2"]  # fmt: skip
    started = time.monotonic()
    process = cli(warehouse, *args)
    peak = 0
    while process.poll() is None and time.monotonic() - started < cap:
        with contextlib.suppress(OSError, StopIteration):
            status = Path(f"/proc/{process.pid}/status").read_text().splitlines()
            peak = max(peak, int(next(line for line in status if line.startswith("VmHWM")).split()[1]))
        time.sleep(0.2)
    hung = process.poll() is None
    if hung:
        os.killpg(process.pid, signal.SIGKILL)
    _, stderr = process.communicate()
    runs = cli(warehouse, "runs", "--json")
    listed, _ = runs.communicate()
    statuses = [r["status"] for r in json.loads(listed)] if runs.returncode == 0 else []
    lines = stderr.strip().splitlines()
    return {
        "ended": f"still running at {cap:g} s, killed" if hung else f"exit {process.returncode}",
        "said": lines[-1][:240] if lines else "",
        "run": statuses[-1] if statuses else "no run recorded",
        "wall_s": round(time.monotonic() - started, 1),
        "peak_rss_mb": round(peak / 1024),
    }


def hostile(cap: float) -> None:
    cases: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for mode, name in [("trickle", "trickle"), ("reset", "reset"), ("bomb", "gzip bomb (chat reply)"),
                           ("bomb-models", "gzip bomb (GET /models)")]:  # fmt: skip
            server = Hostile(mode)
            try:
                cases[name] = ended(root / f"{mode}.duckdb", server.base_url, cap)
            finally:
                server.close()
        with fake_server("--rate-invalid-json", "1") as url:
            cases["unusable answers (every one invalid JSON)"] = ended(root / "unusable.duckdb", url, cap)
        with fake_server() as url, tmpfs(root / "full") as mounted:
            if mounted:
                cases["disk full (1 MB tmpfs)"] = ended(root / "full" / "w.duckdb", url, cap, limit=48)
            else:
                cases["disk full (1 MB tmpfs)"] = {
                    "ended": "not run: this machine does not let the bench mount a tmpfs"
                }
    emit({"bench": "faults", "cases": cases})


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mix", action="store_true", help="the mix of common faults instead of the hostile ones")
    parser.add_argument("--cap", type=float, default=120.0, help="seconds a hostile case may run before it is killed")
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    if args.mix:
        mix(args)
    else:
        hostile(args.cap)


def mix(args: argparse.Namespace) -> None:
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
