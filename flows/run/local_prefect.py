"""The local Prefect server that ifsynth's commands share when no server is configured.

Prefect with no ``PREFECT_API_URL`` starts a temporary server per process: seconds before a run's first
stage, paid again by every command, and whatever it recorded gone with it. ifsynth instead starts one
server on demand, in the background, and later commands reuse it: its UI shows every run since, and a fully
cached rerun costs what reading its answers costs. The server's state lives in Prefect's home
(``PREFECT_HOME``, ``~/.prefect`` by default), in ``ifsynth-server/``:

- ``server.json``: its address, process id and Prefect version, written by the command that started it once
  it answers; a server it does not name is one no command finds, and exits;
- ``start.lock``: held while a command looks for the server or starts it, so two never start at once, and
  while the server reads or removes ``server.json``;
- ``lease``: each command using the server holds it shared; the server stops itself once nobody holds it
  and nobody has touched it for ``IFSYNTH_PREFECT_IDLE`` seconds (1,800 by default);
- ``plain-http-ca.pem``: the certificate bundle Prefect's clients of the server load (``plain_http_bundle``).

``ifsynth prefect-server`` says where it runs; ``ifsynth prefect-server --stop`` stops it now. A user's own
``PREFECT_API_URL`` always wins: then none of this runs.

``python -m ifsynth.flows.run.local_prefect STATE_DIR PORT IDLE`` is the server's own entry point.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ifsynth.schemas.errors import ConfigError

STARTUP_SECONDS = 90.0
IDLE_SECONDS = 1800.0
CHECK_SECONDS = 5.0
# How long the server may take to answer /health before it is taken for hung and replaced. Generous: on a
# loaded machine a busy server answers in seconds, and replacing it would kill the runs that use it.
HUNG_SECONDS = 20.0
# No telemetry; the ephemeral profile of Prefect's services (a local run needs no scheduler); the UI on.
SERVER_ENV = {
    "PREFECT_UI_ENABLED": "1",
    "PREFECT__SERVER_EPHEMERAL": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
}


@dataclass(frozen=True)
class LocalServer:
    url: str  # its API, http://127.0.0.1:PORT/api; the UI is at the same address without /api
    pid: int
    prefect: str  # the Prefect version it runs: another version's server is replaced

    @property
    def ui(self) -> str:
        return self.url.removesuffix("/api")


def state_dir() -> Path:
    from prefect.settings import get_current_settings

    return Path(get_current_settings().home) / "ifsynth-server"


@contextmanager
def local_prefect(notify: Callable[[str], None] = lambda _: None) -> Iterator[str]:
    """Within the block, the local server runs and this process holds a lease on it; yields its API URL.
    The server is started here when none answers, and said once where it runs and how to stop it."""
    folder = state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with ExitStack() as held:
        with _locked(folder / "start.lock", fcntl.LOCK_EX):
            server = running(folder)
            if server is None:
                server = _start(folder)
                notify(
                    f"started a local Prefect server, UI at {server.ui}; later commands reuse it, it stops after "
                    f"{idle_seconds() / 60:.0f} min idle, or now with `ifsynth prefect-server --stop`"
                )
            # leased before the start lock is let go: the server cannot retire in between
            lease = held.enter_context(_locked(folder / "lease", fcntl.LOCK_SH))
        os.utime(lease.fileno())
        held.callback(os.utime, lease.fileno())
        yield server.url


def running(folder: Path | None = None) -> LocalServer | None:
    """The local server, when one answers at the address its state file gives and runs this Prefect."""
    import prefect

    server = recorded_server(folder)
    if server is None:
        return None
    if server.prefect != prefect.__version__ or not answers(server.url + "/health", HUNG_SECONDS):
        _kill(server.pid, folder or state_dir())  # another version's, or hung: never two servers at once
        return None
    return server


def stop(folder: Path | None = None) -> LocalServer | None:
    """Stop the local server now, if one runs; the one stopped."""
    folder = folder or state_dir()
    if not folder.exists():
        return None
    with _locked(folder / "start.lock", fcntl.LOCK_EX):
        server = running(folder)
        if server is not None:
            _kill(server.pid, folder)
        (folder / "server.json").unlink(missing_ok=True)
    return server


def plain_http_bundle(folder: Path | None = None) -> Path | None:
    """A certificate bundle of one certificate (the first of certifi's, which Prefect's clients would load
    whole) for Prefect's clients of the local server; None if it cannot be made, and they load their own.
    Each client makes a TLS context from a bundle, whatever its server speaks: a whole bundle takes 25-90 ms
    of CPU to read, four or five times a command, one of them as the flow run begins. The local server speaks
    plain HTTP on loopback, so no certificate is ever checked, and one reads in a millisecond (bench/README.md,
    sixteenth round)."""
    import certifi

    path = (folder or state_dir()) / "plain-http-ca.pem"
    begin, end = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
    try:
        if path.exists():
            return path
        bundle = certifi.contents()
        first = bundle[bundle.index(begin) : bundle.index(end) + len(end)] + "\n"
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.")
        try:
            os.fchmod(handle, 0o644)  # as a file written plainly: a certificate is no secret
            with os.fdopen(handle, "w") as out:
                out.write(first)
            os.replace(partial, path)  # whole or not at all: commands may make it at once
        finally:
            with suppress(FileNotFoundError):
                os.unlink(partial)
    except (OSError, ValueError):  # a folder it cannot write, a bundle without a certificate
        return None
    return path


def idle_seconds() -> float:
    try:
        return float(os.environ.get("IFSYNTH_PREFECT_IDLE", IDLE_SECONDS))
    except ValueError:
        raise ConfigError("IFSYNTH_PREFECT_IDLE is a number of seconds") from None


def _start(folder: Path) -> LocalServer:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    (folder / "lease").touch()
    with (folder / "server.log").open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "ifsynth.flows.run.local_prefect", str(folder), str(port), str(idle_seconds())],
            env={**os.environ, **SERVER_ENV},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # outlives this command; a terminal's Ctrl-C does not reach it
        )
    server = _identity(port, process.pid)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not answers(server.url + "/health"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise ConfigError(
                    f"the local Prefect server did not start (its log: {folder / 'server.log'}); "
                    "set PREFECT_API_URL to a running Prefect server"
                )
            time.sleep(0.1)
        (folder / "server.json").write_text(json.dumps(server.__dict__))
    except BaseException:
        # Ctrl-C, a stop signal, a hung or failed start: a server left running here would be one that no
        # command finds, so the next would start another beside it. Nobody has its address yet, so nothing is
        # lost by killing it outright, with anything it started in its process group.
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        _forget(folder, server)
        raise
    return server


def _identity(port: int, pid: int) -> LocalServer:
    import prefect

    return LocalServer(url=f"http://127.0.0.1:{port}/api", pid=pid, prefect=prefect.__version__)


def recorded_server(folder: Path | None = None) -> LocalServer | None:
    """The server that ``server.json`` names, whether or not it runs."""
    try:
        return LocalServer(**json.loads(((folder or state_dir()) / "server.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _forget(folder: Path, server: LocalServer) -> None:
    """Remove ``server.json`` if it names ``server``, and only then: another server's record is how commands
    find that one. The caller holds the start lock, so no command writes the file in between."""
    if recorded_server(folder) == server:
        (folder / "server.json").unlink()


def answers(url: str, timeout: float = 2.0, *, any_status: bool = False) -> bool:
    """Whether a server answers at ``url`` within ``timeout`` seconds: with a success, or, ``any_status``,
    with whatever status (a server that wants a key is up all the same)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return any_status
    except (OSError, ValueError):  # refused, timed out, no such host; ValueError: not a URL
        return False


def _kill(pid: int, folder: Path) -> None:
    """Stop the server of ``folder`` that runs as ``pid``. A server that died (kill -9, a reboot) leaves its
    record, and its pid may since be another program's: only a process that is this folder's server is
    signalled."""
    if not _serves(pid, folder):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _serves(pid: int, folder: Path) -> bool:
    """Whether process ``pid`` is the local server of ``folder``, by its command line (``ps`` where there is
    no ``/proc``)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        if Path("/proc/self").exists():
            return False  # no such process
        try:
            command = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True).stdout
        except OSError:  # no ps either: nothing is known of it, so it is not signalled
            return False
    except OSError:
        return False
    return "ifsynth.flows.run.local_prefect" in command and str(folder) in command


@contextmanager
def _locked(path: Path, mode: int) -> Iterator[IO[bytes]]:
    with path.open("ab") as handle:
        fcntl.flock(handle, mode)
        try:
            yield handle
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _retire_when_idle(folder: Path, me: LocalServer, idle: float) -> None:
    """Exit once no command holds the lease and none has touched it for ``idle`` seconds, removing the record
    of this server; exit at once, leaving the record be, when it names another server or none (this one's
    start was given up, or it was replaced): no command finds this one, and two would run. The start lock is
    taken first, so no command is between finding this server and leasing it, nor starting another."""
    while True:
        time.sleep(min(CHECK_SECONDS, idle / 2))
        with (folder / "start.lock").open("ab") as start, (folder / "lease").open("ab") as lease:
            try:
                fcntl.flock(start, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            if recorded_server(folder) != me:
                os._exit(0)
            try:
                fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            if time.time() - os.fstat(lease.fileno()).st_mtime > idle:
                (folder / "server.json").unlink(missing_ok=True)  # this server's: read under the same lock
                os._exit(0)


def main(argv: list[str]) -> None:
    import uvicorn

    folder, port, idle = Path(argv[0]), int(argv[1]), float(argv[2])
    me = _identity(port, os.getpid())
    threading.Thread(target=_retire_when_idle, args=(folder, me, idle), daemon=True).start()
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
