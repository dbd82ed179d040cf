"""Prefect's API for a run when no server is configured: a temporary server that ifsynth owns.

Prefect would start one itself, in ifsynth's process group: a terminal's Ctrl-C then reaches the server first,
and the run stalls on a dead API before it can stop. ifsynth starts it in a session of its own instead, stops
it when the run ends, however it ends, and the server exits by itself when ifsynth's process is gone (even
killed with -9), so no server outlives its run.

``python -m ifsynth.flows.run.prefect_api PARENT_PID PORT`` is the server's own entry point.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ifsynth.schemas.errors import ConfigError

STARTUP_SECONDS = 90.0
# What Prefect sets for its own temporary server: no UI, the ephemeral profile of services.
SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}


@contextmanager
def prefect_api(notify: Callable[[str], None] = lambda _: None) -> Iterator[None]:
    """Within the block Prefect talks to a configured server (``PREFECT_API_URL``) or to a temporary one."""
    if os.environ.get("PREFECT_API_URL"):
        yield
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    notify("starting Prefect's temporary API server")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "ifsynth.flows.run.prefect_api", str(os.getpid()), str(port)],
        env={**os.environ, **SERVER_ENV},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # the terminal's signals go to ifsynth, which stops the server itself
    )
    try:
        url = f"http://127.0.0.1:{port}/api"
        _wait_until_up(url + "/health", server)
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield
    finally:
        _stop(server)


def free_port() -> int:
    """A loopback port free now, for a server that cannot be told to pick its own."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_until_up(url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise ConfigError(
                    "Prefect's temporary API server did not start; set PREFECT_API_URL to a running Prefect server"
                ) from None
            time.sleep(0.1)


def _stop(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=5)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _exit_with(parent: int) -> None:
    """Poll the parent: once it is gone this process is re-parented, and the server has no run to serve."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def main(argv: list[str]) -> None:
    import uvicorn

    parent, port = int(argv[0]), int(argv[1])
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    uvicorn.run(
        "prefect.server.api.server:create_app",
        factory=True,
        host="127.0.0.1",
        port=port,
        log_level="error",
        lifespan="on",
    )


if __name__ == "__main__":
    main(sys.argv[1:])
