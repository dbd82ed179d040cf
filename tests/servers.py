"""Servers that tests and benchmarks run on loopback besides the fake OpenAI API: a dedicated Prefect server,
and a process work pool with its workers.

A child `ifsynth run` with no Prefect server starts a temporary one (several seconds each); pointed at one
server with `PREFECT_API_URL`, every run of a test session or a benchmark skips that cost, as a user who
runs many jobs does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import http.server
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ifsynth.flows.run import local_prefect
from ifsynth.flows.run.prefect_api import free_port

__all__ = ["FixedReply", "answers", "descendants", "fixed_reply", "free_port", "prefect_server", "wait_until_up",
           "work_pool", "worker_log"]  # fmt: skip


def wait_until_up(url: str, process: subprocess.Popen[Any], what: str, *, seconds: float) -> None:
    """Poll a server's health URL until it answers 2xx; one clear line if it exits or takes too long."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:  # refused, or not healthy yet (HTTPError is an OSError too)
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{what} did not start") from None
            time.sleep(0.2)


def answers(url: str, *, seconds: float) -> bool:
    """Whether a server's health URL answers 2xx within ``seconds``, polling; for a server another process
    started."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2):
            return True
        time.sleep(0.2)
    return False


@contextlib.contextmanager
def prefect_server(wait: bool = True) -> Iterator[dict[str, str]]:
    """A dedicated Prefect server (`prefect server start`, its database in a temporary directory), stopped on
    exit with its process group. Yields the environment that points ifsynth at it, once it answers (at once
    when not ``wait``: the caller's users wait, and it starts meanwhile). It runs the services the local server
    runs (those that record task runs and events), without its UI."""
    with tempfile.TemporaryDirectory() as home:
        port = free_port()
        env = {**os.environ, **local_prefect.SERVER_ENV, "PREFECT_HOME": home}
        env.pop("PREFECT_API_URL", None)
        process = subprocess.Popen(
            [str(Path(sys.executable).with_name("prefect")), "server", "start", "--host", "127.0.0.1", "--port",
             str(port), "--no-ui"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        api = f"http://127.0.0.1:{port}/api"
        try:
            if wait:
                wait_until_up(api + "/health", process, "the Prefect server", seconds=120)
            yield {"PREFECT_API_URL": api}
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 15)
            process.wait(timeout=30)


@contextlib.contextmanager
def work_pool(root: Path, name: str, workers: int = 2) -> Iterator[list[subprocess.Popen[bytes]]]:
    """A process work pool on the session's Prefect server with ``workers`` workers, one flow run at a time
    each, polling every second; their logs in ``root``. One pool at a time on that server, whichever xdist
    worker asks: a run on a pool moves the recipe's one deployment there, and a flow run made from it then
    would go to the pool that moved it last."""
    server = hashlib.sha256(os.environ["PREFECT_API_URL"].encode()).hexdigest()[:16]
    with (Path(tempfile.gettempdir()) / f"ifsynth-tests-pool-{server}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        with _work_pool(root, name, workers) as started:
            yield started


@contextlib.contextmanager
def _work_pool(root: Path, name: str, workers: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    prefect = str(Path(sys.executable).with_name("prefect"))
    made = subprocess.run([prefect, "work-pool", "create", name, "--type", "process"], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    # The workers' own lines go to their logs (ifsynth's quiet console defaults would hide them), and their
    # temporary folders to ``root``: a worker killed at the end leaves each flow run's folder behind.
    env = {**os.environ, "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_LOGGING_LEVEL": "INFO",
           "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "INFO", "TMPDIR": str(root)}  # fmt: skip
    started = []
    try:
        for number in range(1, workers + 1):
            with (root / f"{name}-w{number}.log").open("wb") as log:
                started.append(subprocess.Popen(
                    [prefect, "worker", "start", "--pool", name, "--type", "process", "--name", f"{name}-w{number}",
                     "--limit", "1"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                ))  # fmt: skip
        deadline = time.monotonic() + 60
        while not all(f"Worker '{name}-w{n}' started" in worker_log(root, name, n) for n in range(1, workers + 1)):
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.2)
        yield started
    finally:
        for worker in started:
            for pid in [*descendants(worker.pid), worker.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            worker.wait()


def worker_log(root: Path, pool: str, number: int) -> str:
    return (root / f"{pool}-w{number}.log").read_text(errors="replace")


def descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            if entry.name.isdigit():
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


@contextlib.contextmanager
def fixed_reply(
    status: int,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    lists_models: bool = False,
    not_http: bytes | None = None,
) -> Iterator[FixedReply]:
    """An endpoint that answers every request with the same raw reply (a 401, an HTML 502, a gzip bomb ...),
    keeping each request's path and headers; ``lists_models``: except ``GET /models``, answered with an empty
    list, so a run gets past its look at the endpoint and meets the reply in its requests. ``not_http``: these
    bytes as they are instead of a reply (a server, or a proxy, that does not speak HTTP there)."""
    hits: list[str] = []
    sent: list[dict[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            hits.append(self.path)
            sent.append({name.lower(): value for name, value in self.headers.items()})
            listing = lists_models and self.command == "GET" and self.path.endswith("/models")
            if not_http is not None and not listing:
                self.wfile.write(not_http)
                self.close_connection = True
                return
            reply, extra = (b'{"object": "list", "data": []}', {}) if listing else (body, headers or {})
            self.send_response(200 if listing else status)
            for name, value in {"content-length": str(len(reply)), **extra}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(reply)

        do_GET = do_POST  # GET /models, the preflight, gets the same reply unless it lists models

        def log_message(self, *_: Any) -> None:
            pass

    server = QuietServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield FixedReply(f"http://127.0.0.1:{server.server_address[1]}/v1", hits, sent)
    finally:
        server.shutdown()
        server.server_close()


class QuietServer(http.server.ThreadingHTTPServer):
    """A client that hangs up mid-reply is no error here (a run stops at once, dropping the asks in flight):
    its traceback would land in the output of a command run in the test's process."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@dataclasses.dataclass
class FixedReply:
    base_url: str
    hits: list[str]
    sent: list[dict[str, str]]  # each request's headers, names in lower case
