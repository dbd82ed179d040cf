"""Shared fixtures: a loopback fake of the OpenAI API, a warehouse per test, and ``prefect``: one quiet offline
Prefect server for the session (one for all of pytest-xdist's workers), which in-process flows and child
`ifsynth` processes alike use instead of a temporary server each. Only tests that run a flow request it
(most modules that do, with ``pytestmark = pytest.mark.usefixtures("prefect")``), so a lone run of the
others never pays its start."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn
from unittest import mock

import pytest

from ifsynth.flows.run import local_prefect
from ifsynth.flows.run.runner import PREFECT_DEFAULTS
from tests.fake_openai import FakeOpenAI
from tests.servers import answers, prefect_server

pytest_plugins = ("tests.browser",)  # the headless Chromium page fixture

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"  # InstructIR's public release files (tests/data/README.md)
INSTRUCTIR_SEEDS = DATA / "instructir" / "data_creation" / "msmarco" / "filtered_version"


@pytest.fixture(scope="session", autouse=True)
def offline_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One Prefect home for the session, no key, no Prefect server unless ``prefect`` starts it, ir_datasets
    in a temporary home."""
    home = tmp_path_factory.mktemp("prefect-home")
    saved = dict(os.environ)
    os.environ.update(PREFECT_DEFAULTS)
    os.environ["PREFECT_HOME"] = str(home)
    os.environ["IR_DATASETS_HOME"] = str(tmp_path_factory.mktemp("ir-datasets"))
    os.environ["IFSYNTH_WARM"] = "0"  # each command a process of its own; tests/cli/test_warm.py turns it on
    os.environ.pop("OPENAI_API_KEY", None)
    os.environ.pop("PREFECT_API_URL", None)
    yield
    local_prefect.stop(home / "ifsynth-server")  # the one the session's commands without a server shared
    os.environ.clear()
    os.environ.update(saved)


SHARED_PREFECT = "IFSYNTH_TESTS_PREFECT_API_URL"  # the server pytest-xdist's controller started for its workers


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, the controlling process starts one Prefect server for all its workers before they
    start (they inherit its address) and stops it once they are done: a start costs seconds of both cores,
    once instead of once a worker, and it starts while the workers collect."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not getattr(config.option, "numprocesses", None):
        return
    started = contextlib.ExitStack()
    os.environ[SHARED_PREFECT] = started.enter_context(prefect_server(wait=False))["PREFECT_API_URL"]
    config.add_cleanup(started.close)


@pytest.fixture(scope="session")
def prefect(offline_env: None) -> Iterator[str]:
    """The session's Prefect server: the workers' shared one, or one started for the first test that runs a
    flow; its API URL. A test that runs one without it still passes, each run starting a temporary server of
    its own (several seconds)."""
    with contextlib.ExitStack() as started:
        url = os.environ.get(SHARED_PREFECT)
        if url is None:
            url = started.enter_context(prefect_server())["PREFECT_API_URL"]
        elif not answers(url + "/health", seconds=120):
            raise SystemExit("the Prefect server did not start")
        os.environ["PREFECT_API_URL"] = url
        _refresh_prefect_settings()
        yield url
        _send_prefect_logs()
        os.environ.pop("PREFECT_API_URL")
        _refresh_prefect_settings()


def _send_prefect_logs() -> None:
    """Send the log lines Prefect still holds while its server is up: its log worker sends them as the process
    exits otherwise, to a server stopped by then, and prints an error for each batch."""
    if "prefect.logging.handlers" in sys.modules:
        sys.modules["prefect.logging.handlers"].APILogWorker.drain_all(timeout=30)


def _refresh_prefect_settings() -> None:
    """Prefect reads its settings once, when imported: a test before this one may have imported it."""
    if "prefect.context" in sys.modules:
        sys.modules["prefect.context"].refresh_global_settings_context()


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest) -> Iterator[FakeOpenAI]:
    """One fake for every test of a module, set up by the module's ``FAKE`` (FakeOpenAI's arguments: the
    responder it answers with, a latency ...); random valid answers when the module sets nothing."""
    with FakeOpenAI(**getattr(request.module, "FAKE", {})) as fake:
        yield fake


@pytest.fixture
def make_fake() -> Iterator[Callable[..., FakeOpenAI]]:
    """Start a loopback fake with the given settings (FakeOpenAI's arguments); each is stopped after the test."""
    with contextlib.ExitStack() as started:
        yield lambda **settings: started.enter_context(FakeOpenAI(**settings))


@pytest.fixture
def fake(make_fake: Callable[..., FakeOpenAI]) -> FakeOpenAI:
    return make_fake()


@pytest.fixture
def warehouse_path(tmp_path: Path) -> Path:
    return tmp_path / "wh" / "ifsynth.duckdb"


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the real `ifsynth` command in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "ifsynth.flows.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=REPO,
    )


def invoke(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the `ifsynth` command in this process (its ``main``, one-line errors and exit codes included), for
    tests of what a command says and exits with rather than of its process: no interpreter start, which costs
    seconds a call. ``cli`` is for what needs a process of its own (signals, a process that dies, concurrency)."""
    from ifsynth.flows.cli.app import main

    def exit_now(code: int) -> NoReturn:  # main leaves by os._exit after an error line (see _exit_after_error)
        raise SystemExit(code)

    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        mock.patch.dict(os.environ, env or {}),
        mock.patch.object(sys, "argv", ["ifsynth", *args]),
        mock.patch.object(os, "_exit", exit_now),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
        contextlib.chdir(REPO),
    ):
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(["ifsynth", *args], code, stdout.getvalue(), stderr.getvalue())
