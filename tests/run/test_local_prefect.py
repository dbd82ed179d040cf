"""The local Prefect server that commands share when no PREFECT_API_URL is set: started once, reused, never
two at once, kept while a command holds it, gone after its idle time, and never used when the user names a
server of their own."""

from __future__ import annotations

import dataclasses
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import prefect
import pytest

from ifsynth.flows.cli import warm
from ifsynth.flows.run import local_prefect
from ifsynth.flows.run.prefect_api import free_port, prefect_api, prepare, start_reporting
from ifsynth.schemas.errors import Interrupted
from tests.conftest import REPO, invoke
from tests.fake_openai import FakeOpenAI

LEASE = """
import sys, time
from ifsynth.flows.run.local_prefect import local_prefect
with local_prefect(lambda line: print("note:", line, flush=True)) as url:
    print(url, flush=True)
    time.sleep(float(sys.argv[1])) if sys.argv[1] != "-" else sys.stdin.read()  # "-": until stdin closes
"""
# The server's entry point, checking its state every argv[1] seconds instead of every CHECK_SECONDS.
SERVER = """
import sys
from ifsynth.flows.run import local_prefect
local_prefect.CHECK_SECONDS = float(sys.argv[1])
local_prefect.main(sys.argv[2:])
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A Prefect home of this test's own, with no configured server; its local server stopped at the end, and
    any other server process of it killed (one that its state file does not name, `stop` cannot reach)."""
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    _refresh()
    yield tmp_path / "prefect"
    local_prefect.stop(tmp_path / "prefect" / "ifsynth-server")
    for pid in servers(tmp_path / "prefect"):
        os.kill(pid, signal.SIGKILL)
    monkeypatch.undo()
    _refresh()


def _refresh() -> None:
    if "prefect.context" in sys.modules:
        sys.modules["prefect.context"].refresh_global_settings_context()


def lease(seconds: float | None, **env: str) -> subprocess.Popen[str]:
    """A command holding the local server for ``seconds``, or (None) until its stdin is closed."""
    return subprocess.Popen(
        [sys.executable, "-c", LEASE, "-" if seconds is None else str(seconds)], cwd=REPO, env={**os.environ, **env},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def servers(home: Path) -> list[int]:
    """Processes of a local server whose state folder is in ``home``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"ifsynth.flows.run.local_prefect" in argv and str(home).encode() in b" ".join(argv):
            found.append(int(proc.name))
    return found


def test_commands_at_once_start_one_server_and_later_ones_reuse_it(home: Path) -> None:
    first, second = lease(0.5), lease(0.5)
    outputs = [process.communicate(timeout=180) for process in (first, second)]
    assert first.returncode == second.returncode == 0, outputs
    urls = {out.splitlines()[-1] for out, _ in outputs}
    assert len(urls) == 1, "both commands talk to one server"
    notes = [line for out, _ in outputs for line in out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "ifsynth prefect-server --stop" in notes[0], "said once, by the one that started it"
    assert len(servers(home)) == 1
    third = lease(0)
    out, _ = third.communicate(timeout=60)
    assert out.splitlines() == [urls.pop()], "a later command reuses it, silently"


def test_the_server_stays_while_a_command_holds_it_and_retires_when_idle(home: Path) -> None:
    holder = lease(None, IFSYNTH_PREFECT_IDLE="1")
    try:
        deadline = time.monotonic() + 180
        while local_prefect.running(home / "ifsynth-server") is None:
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        (pid,) = servers(home)
        time.sleep(3)  # longer than its idle time, but the command still holds it
        assert local_prefect.running(home / "ifsynth-server") is not None
    finally:
        holder.communicate(timeout=60)  # closes its stdin: the command ends and lets the server go
    assert holder.returncode == 0
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists(), "gone once idle"
    assert not (home / "ifsynth-server" / "server.json").exists()


def test_stop_stops_it_and_the_next_command_starts_another(home: Path) -> None:
    assert lease(0).wait(timeout=180) == 0
    stopped = subprocess.run(
        [sys.executable, "-m", "ifsynth.flows.cli", "prefect-server", "--stop"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert stopped.returncode == 0 and stopped.stdout.startswith(
        "stopped the local Prefect server at http://127.0.0.1:"
    )
    assert servers(home) == []
    shown = subprocess.run(
        [sys.executable, "-m", "ifsynth.flows.cli", "prefect-server"], cwd=REPO, capture_output=True, text=True
    )
    assert shown.stdout.startswith("no local Prefect server runs")


def test_a_configured_server_wins(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with answering() as url:
        monkeypatch.setenv("PREFECT_API_URL", url)
        with prefect_api():
            pass
    assert not (home / "ifsynth-server").exists() and servers(home) == []


def test_a_configured_server_that_does_not_answer_is_one_line_before_the_run(
    home: Path, tmp_path: Path, server: FakeOpenAI
) -> None:
    """Not Prefect's "Failed to reach API" RuntimeError after its retries: the URL and what to do, exit 2,
    nothing written, and no local server started in its place."""
    url = f"http://127.0.0.1:{free_port()}/api"
    warehouse = tmp_path / "w.duckdb"
    run = invoke(
        "--warehouse", str(warehouse), "run", "instructir", "--seeds", "demo", "--base-url", server.base_url,
        "--model", "m", env={"PREFECT_API_URL": url},
    )  # fmt: skip
    *said, last = run.stderr.strip().splitlines()
    assert run.returncode == 2 and said == [f"instructir: seeds demo, model m at {server.base_url}; checking inputs"]
    assert last.startswith(f"error: no Prefect server answers at PREFECT_API_URL={url}: start it, or unset")
    assert not warehouse.exists() and servers(home) == []


def test_a_server_slow_to_answer_is_kept_not_replaced(home: Path) -> None:
    """On a loaded machine a busy server may take seconds to answer its health check: taking it for hung and
    replacing it would kill the runs that use it."""
    folder = home / "ifsynth-server"
    folder.mkdir(parents=True)
    process = subprocess.Popen(["sleep", "120"])  # stands for the server's process
    try:
        with answering(delay=3) as url:
            server = local_prefect.LocalServer(url, process.pid, prefect.__version__)
            (folder / "server.json").write_text(json.dumps(dataclasses.asdict(server)))
            assert local_prefect.running(folder) == server
        assert process.poll() is None, "not killed"
    finally:
        process.kill()
        process.wait()


@contextmanager
def recording_another_process(
    home: Path,
) -> Iterator[tuple[Path, local_prefect.LocalServer, subprocess.Popen[bytes]]]:
    """The state folder, with a record naming a process that is no server of it (a `sleep`, killed after) at an
    address where nothing answers: the folder, the record and the process."""
    folder = home / "ifsynth-server"
    folder.mkdir(parents=True)
    other = subprocess.Popen(["sleep", "120"])
    try:
        server = local_prefect.LocalServer(f"http://127.0.0.1:{free_port()}/api", other.pid, prefect.__version__)
        (folder / "server.json").write_text(json.dumps(dataclasses.asdict(server)))
        yield folder, server, other
    finally:
        other.kill()
        other.wait()


def test_a_dead_servers_record_whose_pid_is_another_programs_now_kills_nothing(home: Path) -> None:
    """A server killed with -9 (or a reboot) leaves its record; its pid, reused, is another program's, which
    taking the record for a hung server must not signal. The record is stale: no server runs, and `--stop`
    clears it."""
    with recording_another_process(home) as (folder, _, other):  # a program of the user's, under the dead pid
        assert local_prefect.running(folder) is None
        assert local_prefect.stop(folder) is None and not (folder / "server.json").exists()
        assert other.poll() is None, "another program was signalled"


@pytest.mark.parametrize("error", [Interrupted(signal.SIGINT), RuntimeError("a bug")], ids=["ctrl-c", "error"])
def test_a_start_that_does_not_complete_stops_its_server_and_records_none(home: Path, error: BaseException) -> None:
    """Ctrl-C (or any error) while the server starts: a half-started server left running would be one that no
    command finds, so the next starts a second beside it, and `--stop` cannot reach it."""
    started: list[int] = []

    def health_then_error(*_: object, **__: object) -> bool:
        deadline = time.monotonic() + 60
        while not started and time.monotonic() < deadline:  # its command line shows once its exec is through
            started.extend(servers(home))
        raise error

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(local_prefect, "answers", health_then_error)
        with pytest.raises(type(error)), local_prefect.local_prefect():
            pass
    assert len(started) == 1, "the server had started"
    assert servers(home) == [] and not Path(f"/proc/{started[0]}").exists()
    assert not (home / "ifsynth-server" / "server.json").exists()


def test_a_retiring_server_leaves_another_servers_record_in_place(home: Path) -> None:
    """A server that its state file does not name (one whose start was given up) must not remove the record of
    the server that commands use: they would start another beside it, and `--stop` could not reach it."""
    with recording_another_process(home) as (folder, recorded, _):  # stands for the recorded server's process
        (folder / "lease").touch()
        os.utime(folder / "lease", (0, 0))  # idle for long
        with serving(folder, idle=0.2) as retiring:
            _, err = retiring.communicate(timeout=60)
            assert retiring.returncode == 0, err
        assert local_prefect.LocalServer(**json.loads((folder / "server.json").read_text())) == recorded


def test_a_server_that_no_record_names_exits_before_its_idle_time(home: Path) -> None:
    """A server whose start was given up (its command killed, or stopped twice) is one that no command finds:
    it exits at its next check, not after its idle time, so it never runs beside the next command's."""
    folder = home / "ifsynth-server"
    folder.mkdir(parents=True)
    with serving(folder, idle=3600) as orphan:
        _, err = orphan.communicate(timeout=60)
        assert orphan.returncode == 0, err


@contextmanager
def serving(folder: Path, idle: float) -> Iterator[subprocess.Popen[str]]:
    """A local server's process, as ``_start`` starts it but checking its state every 0.05 s; killed at the
    end if still there."""
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER, "0.05", str(folder), str(free_port()), str(idle)],
        cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        yield process
    finally:
        process.kill()
        process.communicate()


@contextmanager
def answering(delay: float = 0.0) -> Iterator[str]:
    """A server that answers Prefect's health check, as any running Prefect server does, after ``delay``
    seconds; its API URL."""

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(delay)
            self.send_response(200 if self.path == "/api/health" else 404)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health) as health:
        threading.Thread(target=health.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{health.server_address[1]}/api"
        finally:
            health.shutdown()


@pytest.mark.parametrize("ahead", [prepare, warm._ahead], ids=["prepare", "warm"])
def test_prefects_settings_made_ahead_are_the_ones_a_run_takes(
    home: Path, monkeypatch: pytest.MonkeyPatch, ahead: Callable[[], bool]
) -> None:
    """The warm process makes them between commands (flows/cli/warm.py); a run then does not make them again,
    they are Prefect's own ``temporary_settings`` for that server, and a user's Prefect variables are still
    theirs."""
    from prefect.settings import (
        PREFECT_API_SSL_CERT_FILE,
        PREFECT_API_URL,
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        Settings,
        get_current_settings,
        temporary_settings,
    )

    with answering() as url:
        assert not ahead(), "no local server recorded yet: the warm process tries again"
        folder = _record(home, url)
        assert ahead()
        made = Settings.copy_with_update
        monkeypatch.setattr(Settings, "copy_with_update", lambda *_, **__: pytest.fail("settings made again"))
        with prefect_api():
            taken = get_current_settings()
            assert taken.api.url == url and taken.flows.heartbeat_frequency is None
        monkeypatch.setattr(Settings, "copy_with_update", made)
        bundle = str(folder / "plain-http-ca.pem")
        updates = {PREFECT_API_URL: url, PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None, PREFECT_API_SSL_CERT_FILE: bundle}
        with temporary_settings(updates=updates) as prefects:
            assert taken.model_dump() == prefects.model_dump()
        monkeypatch.setenv("PREFECT_LOGGING_TO_API_BATCH_SIZE", "1234567")  # a variable set since
        with prefect_api():
            assert get_current_settings().logging.to_api.batch_size == 1234567
            assert get_current_settings().api.url == url
        monkeypatch.setenv("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "60")
        with prefect_api():
            assert get_current_settings().flows.heartbeat_frequency == 60
    assert get_current_settings().api.url is None, "only within the block"


def _record(home: Path, url: str) -> Path:
    """A local server recorded at ``url`` (an answering stand-in): its state folder."""
    folder = home / "ifsynth-server"
    folder.mkdir(parents=True, exist_ok=True)
    record = {"url": url, "pid": os.getpid(), "prefect": prefect.__version__}  # a pid local_prefect never kills
    (folder / "server.json").write_text(json.dumps(record))
    return folder


def test_prefects_clients_of_the_local_server_read_a_bundle_of_one_certificate(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every Prefect client makes a TLS context from a certificate bundle, whatever its server speaks; the
    local server is plain HTTP, so its clients read one certificate, not the environment's whole bundle. A
    server of the user's is theirs: its clients read the bundle they would without ifsynth."""
    import ssl

    from prefect.client.orchestration import get_client

    read: list[str | None] = []
    make = ssl.create_default_context

    def recorded(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        read.append(kwargs.get("cafile"))
        return make(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", recorded)
    with answering() as url:
        bundle = str(_record(home, url) / "plain-http-ca.pem")
        with prefect_api():
            get_client(sync_client=True)
        assert read == [bundle]
        assert make(cafile=bundle).cert_store_stats()["x509_ca"] == 1, "a bundle ssl reads, of one certificate"
        read.clear()
        monkeypatch.setenv("PREFECT_API_URL", url)
        with prefect_api():
            get_client(sync_client=True)
        assert read and read[0] != bundle


def test_a_bundle_that_cannot_be_made_leaves_prefects_clients_their_own(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No certificate to copy, no folder to write it in, or a write that fails: no bundle, nothing left half
    made, and the local server's clients read the bundle they would without ifsynth."""
    import certifi
    from prefect.settings import PREFECT_API_SSL_CERT_FILE

    state = tmp_path / "state"
    with monkeypatch.context() as patched:
        patched.setattr(certifi, "contents", lambda: "no certificate here")
        assert local_prefect.plain_http_bundle(state) is None
        with answering() as url:
            folder, theirs = _record(home, url), PREFECT_API_SSL_CERT_FILE.value()
            with prefect_api():
                assert PREFECT_API_SSL_CERT_FILE.value() == theirs
            assert not (folder / "plain-http-ca.pem").exists()
    (tmp_path / "a file").write_text("")
    assert local_prefect.plain_http_bundle(tmp_path / "a file" / "state") is None

    def full(*_: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(os, "replace", full)
        assert local_prefect.plain_http_bundle(state) is None
    assert sorted(p.name for p in state.iterdir()) == [], "the partial file removed"
    assert local_prefect.plain_http_bundle(state) == state / "plain-http-ca.pem"
    assert sorted(p.name for p in state.iterdir()) == ["plain-http-ca.pem"]


def test_a_run_starts_prefects_reporting_off_its_own_thread_with_its_settings(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prefect's event and log workers are started as a run begins, from another thread, toward the run's API."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL

    started: list[tuple[str, bool, str | None]] = []
    both = threading.Event()

    def starts(service: str) -> Callable[[], None]:
        def instance() -> None:
            started.append((service, threading.current_thread() is threading.main_thread(), PREFECT_API_URL.value()))
            if len(started) == 2:
                both.set()

        return instance

    monkeypatch.setattr(EventsWorker, "instance", starts("events"))
    monkeypatch.setattr(APILogWorker, "instance", starts("logs"))
    with answering() as url:
        monkeypatch.setenv("PREFECT_API_URL", url)
        with prefect_api():
            start_reporting()
            assert both.wait(10)
    assert started == [("events", False, url), ("logs", False, url)]
