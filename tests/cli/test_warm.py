"""The warm process (flows/cli/warm.py): a run after the first goes through it, and is the same command to its
user: the same output, exit status, warehouse; Ctrl-C and kill reach the run; another environment replaces it."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from ifsynth.flows.cli import warm
from tests.conftest import REPO
from tests.fake_openai import FakeOpenAI
from tests.helpers import as_from_a_shell

pytestmark = pytest.mark.usefixtures("prefect")

STARTED = re.compile(r"started a warm ifsynth process \(pid (\d+)\)")


@pytest.fixture
def runtime() -> Iterator[Path]:
    """A folder of warm processes of the test's own (short: a socket's address has at most 108 bytes), and
    every warm process in it stopped after the test."""
    folder = Path(tempfile.mkdtemp(prefix="w", dir="/tmp"))
    yield folder
    for process in _stop_all(folder):
        _wait_gone(process.pid)
    shutil.rmtree(folder, ignore_errors=True)


def _env(runtime: Path, **extra: str) -> dict[str, str]:
    # without pytest's per-test variable: the environment is part of what a warm process serves
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    return {**env, "XDG_RUNTIME_DIR": str(runtime), "IFSYNTH_WARM": "1", "IFSYNTH_WARM_IDLE": "300", **extra}


def ifsynth(runtime: Path, *args: str, ignoring: tuple[int, ...] = (), **extra: str) -> subprocess.Popen[str]:
    """The command, run as a user would, ignoring the signals ``ignoring`` (as under nohup)."""

    def ignore() -> None:  # and nothing else, whatever the test process ignores or blocks
        as_from_a_shell()
        for signum in ignoring:
            signal.signal(signum, signal.SIG_IGN)

    return subprocess.Popen(
        [sys.executable, "-m", "ifsynth.flows.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(runtime, **extra),
        cwd=REPO,
        preexec_fn=ignore,
    )


def finished(process: subprocess.Popen[str], seconds: float = 240) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=seconds)
    return process.returncode, out, err


def _stop_all(runtime: Path) -> list[warm.Warm]:
    with _runtime_dir(runtime):
        return warm.stop()


def _running(runtime: Path) -> list[warm.Warm]:
    with _runtime_dir(runtime):
        return warm.running()


@contextlib.contextmanager
def _runtime_dir(runtime: Path) -> Iterator[None]:
    """This process's view of the warm processes in ``runtime``, for the duration of the block."""
    saved = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("XDG_RUNTIME_DIR")
        else:
            os.environ["XDG_RUNTIME_DIR"] = saved


def _serving(runtime: Path, seconds: float = 180) -> Path:
    """The socket of the one warm process started in ``runtime``, once it takes commands."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sockets = list(runtime.glob("ifsynth-warm-*/*.sock"))
        if sockets:
            return sockets[0]
        time.sleep(0.1)
    raise AssertionError("no warm process took commands in time: " + _log(runtime))


def _log(runtime: Path) -> str:
    return "".join(p.read_text() for p in runtime.glob("ifsynth-warm-*/*.log"))


def _wait_gone(pid: int, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or "Z" in _state(pid):
            return True
        time.sleep(0.05)
    return False


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _run_args(warehouse: Path, base_url: str, *extra: str) -> list[str]:
    return ["--warehouse", str(warehouse), "run", "instructir", "--seeds", "demo", "--base-url", base_url,
            "--model", "m", "--json", *extra]  # fmt: skip


def _key_of(runtime: Path) -> str:
    """The key the running warm process serves (its command line's second argument)."""
    (server,) = _running(runtime)
    return Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")[-3].decode()


def _decided(funnel: dict[str, Any]) -> list[dict[str, Any]]:
    """A funnel's stages without where their answers came from."""
    return [{k: v for k, v in stage.items() if k not in ("cached", "sent")} for stage in funnel["stages"]]


def _primed(
    runtime: Path, warehouse: Path, fake: FakeOpenAI, ignoring: tuple[int, ...] = ()
) -> tuple[int, dict[str, Any]]:
    """A first run, which runs by itself and starts the warm process; the process's pid and the run's funnel."""
    code, out, err = finished(ifsynth(runtime, *_run_args(warehouse, fake.base_url), ignoring=ignoring))
    assert code == 0, err
    started = STARTED.search(err)
    assert started, err
    _serving(runtime)
    return int(started.group(1)), json.loads(out)


def test_a_later_run_is_forked_from_the_warm_process_and_says_writes_and_exits_as_it_would_alone(
    runtime: Path, tmp_path: Path, fake: FakeOpenAI
) -> None:
    pid, first = _primed(runtime, tmp_path / "a.duckdb", fake)
    sent = fake.stats()["requests"]

    code, out, err = finished(ifsynth(runtime, *_run_args(tmp_path / "a.duckdb", fake.base_url)))
    assert code == 0, err
    assert "started a warm" not in err
    forked = re.findall(r"command (\d+) ended: exit 0", _log(runtime))
    assert len(forked) == 1, _log(runtime)
    again = json.loads(out)
    assert again["llm_calls"]["sent"] == 0 and again["llm_calls"]["cached"] == first["llm_calls"]["sent"]
    assert _decided(again) == _decided(first)
    assert fake.stats()["requests"] == sent
    assert "select:" in err  # the run's progress reached this command's standard error

    # the same command by itself says the same
    code, alone, _ = finished(ifsynth(runtime, *_run_args(tmp_path / "a.duckdb", fake.base_url), IFSYNTH_WARM="0"))
    assert code == 0
    assert json.loads(alone)["stages"] == again["stages"]
    assert _state(pid) not in ("gone", "Z")  # the warm process goes on, for the next command

    # a failing command exits and says through it as it would alone
    bad = [*_run_args(tmp_path / "a.duckdb", fake.base_url), "--set", "instructions_per_query=zero"]
    through = finished(ifsynth(runtime, *bad))
    alone_bad = finished(ifsynth(runtime, *bad, IFSYNTH_WARM="0"))
    assert through[0] == alone_bad[0] == 2
    assert through[2] == alone_bad[2]
    assert through[2].startswith("error: setting `instructions_per_query`: Input should be a valid integer")
    assert through[2].count("\n") == 1
    assert re.search(r"command \d+ ended: exit 2", _log(runtime))

    # its help names the program as the command by itself does
    ended = len(re.findall(r"ended: exit 0", _log(runtime)))
    helped = [finished(ifsynth(runtime, "run", "--help", IFSYNTH_WARM=on))[1] for on in ("1", "0")]
    assert helped[0] == helped[1] and "python -m ifsynth.flows.cli run" in helped[0]
    assert len(re.findall(r"ended: exit 0", _log(runtime))) == ended + 1  # the first went through it

    # a caller that leaves before the warm process reads its request gets no run, and costs it nothing
    (server,) = _running(runtime)
    started = len(re.findall(r"command \d+ started", _log(runtime)))
    os.kill(server.pid, signal.SIGSTOP)
    try:
        _caller(runtime, _run_args(tmp_path / "x.duckdb", fake.base_url)).close()
    finally:
        os.kill(server.pid, signal.SIGCONT)
    code, out, err = finished(ifsynth(runtime, *_run_args(tmp_path / "a.duckdb", fake.base_url)))
    assert code == 0 and "started a warm" not in err, err
    assert "a command refused: ConnectionAbortedError" in _log(runtime)
    assert len(re.findall(r"command \d+ started", _log(runtime))) == started + 1  # the later command's alone
    assert _state(pid) not in ("gone", "Z")


def _caller(runtime: Path, args: list[str], stderr: int | None = None, blocked: tuple[int, ...] = ()) -> socket.socket:
    """A command's side of the warm process's protocol, by hand: the request to run ``args`` sent, with
    ``stderr`` (or nothing) as its standard error, the signals a fresh Python ignores, and ``blocked``. Its
    pid comes next on the connection."""
    caller = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    caller.connect(str(_serving(runtime)))
    request = {**warm._request(), "key": _key_of(runtime), "argv": ["ifsynth", *args], "env": _env(runtime),
               "cwd": str(REPO), "ignored": [signal.SIGPIPE, signal.SIGXFSZ], "blocked": list(blocked)}  # fmt: skip
    data = json.dumps(request).encode()
    with open(os.devnull, "r+b") as null:
        fds = [null.fileno(), null.fileno(), null.fileno() if stderr is None else stderr]
        socket.send_fds(caller, [struct.pack("!I", len(data)) + data], fds)
    return caller


def _line(caller: socket.socket) -> dict[str, Any]:
    caller.settimeout(120)
    line = b""
    while not line.endswith(b"\n"):
        chunk = caller.recv(1)
        assert chunk, f"the warm process closed the connection after {line!r}"
        line += chunk
    reply: dict[str, Any] = json.loads(line)
    return reply


def test_a_run_begins_only_on_its_commands_word(
    runtime: Path, tmp_path: Path, fake: FakeOpenAI, make_fake: Callable[..., FakeOpenAI]
) -> None:
    """A command that gave up on the warm process runs by itself; the run forked for it must then never begin,
    whether the command left (it timed out) or the warm process died before the command's word."""
    _primed(runtime, tmp_path / "a.duckdb", fake)
    sent = fake.stats()["requests"]

    def attempt(name: str) -> tuple[socket.socket, int, int]:
        """A request to run into warehouse ``name``, its pid, and the read end of its standard error."""
        read, write = os.pipe()
        caller = _caller(runtime, _run_args(tmp_path / name, fake.base_url), stderr=write)
        os.close(write)
        return caller, _line(caller)["pid"], read

    def said(read: int) -> str:
        with open(read, "rb") as stream:  # until the run's end: nothing else holds the pipe's write end
            return stream.read().decode()

    # the word given, the run begins and its end comes back: the protocol above is the command's
    caller, pid, read = attempt("given.duckdb")
    caller.sendall(warm.GO)
    assert _line(caller) == {"exit": 0}
    assert "checking inputs" in said(read)
    assert (tmp_path / "given.duckdb").exists()
    sent_given = fake.stats()["requests"]
    assert sent_given > sent

    # a signal sent before the word waits, held, for the run's own handlers: Ctrl-C ends it before it began
    caller, pid, read = attempt("interrupted.duckdb")
    os.killpg(pid, signal.SIGINT)
    caller.sendall(warm.GO)
    assert _line(caller) == {"exit": 128 + signal.SIGINT}
    assert said(read) == ""
    caller.close()

    # the command leaves with its pid and without the word
    caller, pid, read = attempt("left.duckdb")
    time.sleep(1.0)  # a run that began would have said so by now
    held = _signals(pid, "SigBlk")
    assert all(held & (1 << (signum - 1)) for signum in warm.HELD)
    caller.close()
    assert _wait_gone(pid)
    assert said(read) == ""
    assert f"command {pid} lost its caller: it had not begun" in _log(runtime)

    # once begun, the run's signal mask is its command's: what the command blocked, and none of the held
    slow = make_fake(latency=30.0)
    read, write = os.pipe()
    caller = _caller(runtime, _run_args(tmp_path / "blocked.duckdb", slow.base_url), write, (signal.SIGWINCH,))
    os.close(write)
    pid = _line(caller)["pid"]
    caller.sendall(warm.GO)
    deadline = time.monotonic() + 120
    while slow.stats()["requests"] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    blocked = _signals(pid, "SigBlk")
    assert blocked & (1 << (signal.SIGWINCH - 1)) and not any(blocked & (1 << (n - 1)) for n in warm.HELD)
    caller.close()  # the command gone: its run goes too
    assert _wait_gone(pid)
    os.close(read)

    # the warm process dies before the word comes
    caller, pid, read = attempt("died.duckdb")
    time.sleep(1.0)
    (server,) = _running(runtime)
    os.kill(server.pid, signal.SIGKILL)
    assert _wait_gone(pid)
    assert said(read) == ""
    caller.close()

    assert not any((tmp_path / name).exists() for name in ("interrupted.duckdb", "left.duckdb", "died.duckdb"))
    assert fake.stats()["requests"] == sent_given


def test_ctrl_c_and_kill_reach_the_run_the_warm_process_forked(
    runtime: Path, tmp_path: Path, make_fake: Callable[..., FakeOpenAI]
) -> None:
    # started by a command that ignores SIGALRM: the runs it forks ignore what their own commands do, no more
    _primed(runtime, tmp_path / "a.duckdb", make_fake(), ignoring=(signal.SIGALRM,))
    slow = make_fake(latency=30.0)  # no run of it ends by itself while the test waits

    sent = slow.stats()["requests"]
    command = ifsynth(runtime, *_run_args(tmp_path / "b.duckdb", slow.base_url))
    child = _forked_child(runtime, slow, after=0, sent=sent)
    command.send_signal(signal.SIGINT)
    code, _, err = finished(command, 60)
    assert code == 128 + signal.SIGINT, err
    assert "interrupted; run the same command again" in err
    runs = subprocess.run(
        [sys.executable, "-m", "ifsynth.flows.cli", "--warehouse", str(tmp_path / "b.duckdb"), "runs", "--json"],
        capture_output=True, text=True, env=_env(runtime), cwd=REPO, check=True,
    )  # fmt: skip
    assert json.loads(runs.stdout)[0]["status"] == "interrupted"
    assert _wait_gone(child)

    # a command killed outright (its signals cannot be passed on) takes its run with it
    sent = slow.stats()["requests"]
    command = ifsynth(runtime, *_run_args(tmp_path / "c.duckdb", slow.base_url))
    child = _forked_child(runtime, slow, after=1, sent=sent)
    command.kill()
    command.wait()
    assert _wait_gone(child), f"the run {child} outlived its killed command"
    assert "lost its caller: killed" in _log(runtime)

    # a run killed outright (the OOM killer, say): its command dies of the same signal, and runs nothing again
    sent = slow.stats()["requests"]
    command = ifsynth(runtime, *_run_args(tmp_path / "e.duckdb", slow.base_url))
    child = _forked_child(runtime, slow, after=2, sent=sent)
    os.kill(child, signal.SIGKILL)
    code, _, err = finished(command, 60)
    assert code == -signal.SIGKILL, err
    assert err.count("checking inputs") == 1

    # a command that ignores hang-ups (nohup) has a run that ignores them too, and ignores what it does alone
    sent = slow.stats()["requests"]
    command = ifsynth(runtime, *_run_args(tmp_path / "f.duckdb", slow.base_url), ignoring=(signal.SIGHUP,))
    child = _forked_child(runtime, slow, after=3, sent=sent)
    ignored = _signals(child, "SigIgn")
    assert ignored == _signals(command.pid, "SigIgn")
    assert ignored & (1 << (signal.SIGHUP - 1)) and not ignored & (1 << (signal.SIGALRM - 1))
    os.killpg(child, signal.SIGHUP)
    time.sleep(0.5)
    assert command.poll() is None and _state(child) not in ("gone", "Z")
    command.send_signal(signal.SIGINT)
    assert finished(command, 60)[0] == 128 + signal.SIGINT

    # the warm process killed outright: the command still reaches its run, and waits for its end
    sent = slow.stats()["requests"]
    command = ifsynth(runtime, *_run_args(tmp_path / "d.duckdb", slow.base_url))
    child = _forked_child(runtime, slow, after=4, sent=sent)
    (server,) = _running(runtime)
    os.kill(server.pid, signal.SIGKILL)
    assert _wait_gone(server.pid)
    assert command.poll() is None  # its run goes on
    command.send_signal(signal.SIGINT)
    code, _, err = finished(command, 60)
    assert code == warm.EXIT_LOST
    assert "interrupted; run the same command again" in err  # the run's own last line, then the command's
    said = f"its run (process {child}) may not have begun or finished: run the same command again to continue it"
    assert err.rstrip().endswith(said)


def _signals(pid: int, field: str) -> int:
    """The signals ``pid`` blocks (``SigBlk``) or ignores (``SigIgn``), as a mask."""
    return int(re.search(rf"{field}:\s+(\w+)", Path(f"/proc/{pid}/status").read_text()).group(1), 16)  # type: ignore[union-attr]


def _forked_child(runtime: Path, fake: FakeOpenAI, after: int, sent: int) -> int:
    """The pid of the warm process's child after the ``after`` first, once its run has sent a request (the
    fake had answered ``sent`` before)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        started = re.findall(r"command (\d+) started", _log(runtime))
        if len(started) > after and fake.stats()["requests"] > sent:
            return int(started[after])
        time.sleep(0.1)
    raise AssertionError("the run did not start: " + _log(runtime))


def test_a_command_of_another_environment_runs_alone_and_replaces_the_warm_process(
    runtime: Path, tmp_path: Path, fake: FakeOpenAI
) -> None:
    old, _ = _primed(runtime, tmp_path / "a.duckdb", fake)
    code, _, err = finished(ifsynth(runtime, *_run_args(tmp_path / "a.duckdb", fake.base_url), SOME_SETTING="x"))
    assert code == 0, err
    new = STARTED.search(err)
    assert new and int(new.group(1)) != old, err
    assert _wait_gone(old), "the replaced warm process is still there"
    _serving(runtime)
    assert [w.pid for w in _running(runtime)] == [int(new.group(1))]


def test_it_stops_when_idle_and_on_warm_stop(runtime: Path, tmp_path: Path, fake: FakeOpenAI) -> None:
    pid, _ = _primed(runtime, tmp_path / "a.duckdb", fake)
    said = subprocess.run(
        [sys.executable, "-m", "ifsynth.flows.cli", "warm", "--stop"],
        capture_output=True, text=True, env=_env(runtime), cwd=REPO, check=True,
    )  # fmt: skip
    assert f"stopping {pid}: runs in {REPO}" in said.stdout
    assert _wait_gone(pid)
    assert not list(runtime.glob("ifsynth-warm-*/*.sock"))

    code, _, err = finished(ifsynth(runtime, *_run_args(tmp_path / "a.duckdb", fake.base_url), IFSYNTH_WARM_IDLE="1"))
    assert code == 0, err
    idle = STARTED.search(err)
    assert idle
    assert _wait_gone(int(idle.group(1)), 120), "an idle warm process stayed"
    assert "retired (idle)" in _log(runtime)
    listed = subprocess.run(
        [sys.executable, "-m", "ifsynth.flows.cli", "warm"],
        capture_output=True, text=True, env=_env(runtime), cwd=REPO, check=True,
    )  # fmt: skip
    assert listed.stdout.strip() == "no warm process runs"


def test_warm_stop_finds_a_warm_process_still_loading(runtime: Path) -> None:
    """Its record comes before it loads (a second or more): `ifsynth warm --stop` right after the command that
    started it stops it, where it used to say that none runs."""
    with _runtime_dir(runtime):
        place = warm.Place.here()
        assert place is not None
        place.start("key")
        deadline = time.monotonic() + 30
        while not (found := warm.running()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert found and not list(runtime.glob("ifsynth-warm-*/*.sock")), "listed while it loads"
        assert [w.pid for w in warm.stop()] == [found[0].pid]
    assert _wait_gone(found[0].pid)
    assert not list(runtime.glob("ifsynth-warm-*/*.sock")) and not _running(runtime)


@pytest.mark.parametrize("idle", ["nan", "inf", "-1", "0", "soon"])
def test_an_idle_time_that_is_no_number_of_seconds_is_one_line(runtime: Path, idle: str) -> None:
    code, _, err = finished(ifsynth(runtime, "run", "instructir", "--seeds", "nowhere:x", IFSYNTH_WARM_IDLE=idle))
    assert (code, err) == (2, "error: IFSYNTH_WARM_IDLE is a number of seconds above 0\n")
    assert not _running(runtime)


@pytest.mark.parametrize(
    ("args", "env", "wanted"),
    [
        (["run", "instructir"], {}, True),
        (["--warehouse", "w.duckdb", "--memory-limit", "1GB", "run", "x"], {}, True),
        (["--warehouse=w.duckdb", "run"], {}, True),
        (["--debug", "run", "x"], {}, False),  # --debug sets Prefect's logging before its import
        (["runs"], {}, False),
        (["--warehouse", "run"], {}, False),  # `run` is the warehouse's name here
        (["run", "x"], {"IFSYNTH_WARM": "0"}, False),
        (["run", "x"], {"IFSYNTH_WARM": "off"}, False),
    ],
)
def test_which_commands_it_serves(
    args: list[str], env: dict[str, str], wanted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IFSYNTH_WARM", env.get("IFSYNTH_WARM", "1"))
    assert warm._wanted(args) is wanted


def test_the_key_follows_what_a_process_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    key = warm._request()["key"]
    monkeypatch.setenv("_", "/usr/bin/anything")  # a shell's bookkeeping: the same process would load
    assert warm._request()["key"] == key
    monkeypatch.setenv("PREFECT_API_URL", "http://elsewhere/api")
    assert warm._request()["key"] != key
    monkeypatch.delenv("PREFECT_API_URL")
    assert warm._request()["key"] == key
    (tmp_path / "prefect.toml").write_text("[logging]\nlevel = 'DEBUG'\n")  # Prefect reads it at its import
    assert warm._request()["key"] != key


@pytest.mark.parametrize(("mode", "served"), [(0o700, True), (0o1777, True), (0o777, False), (0o775, False)])
def test_warm_processes_live_only_where_no_one_else_may_replace_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int, served: bool
) -> None:
    base = tmp_path / "base"
    base.mkdir()
    base.chmod(mode)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    assert (warm.Place.folder() is not None) is served


@pytest.mark.parametrize(("flags", "plain"), [([], True), (["-s"], False), (["-O"], False), (["-X", "dev"], False)])
def test_an_interpreter_with_other_flags_runs_by_itself(flags: list[str], plain: bool) -> None:
    plain_env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}  # PYTHONWARNINGS is a flag too
    said = subprocess.run(
        [sys.executable, *flags, "-c", "from ifsynth.flows.cli import warm; print(warm._plain_interpreter())"],
        capture_output=True, text=True, check=True, env=plain_env,
    )  # fmt: skip
    assert said.stdout.strip() == str(plain)


@contextlib.contextmanager
def _server_here(runtime: Path) -> Iterator[tuple[warm.Server, socket.socket, list[int]]]:
    """A warm process's server in this process, as a command's request reaches its ``_fork``: the command's
    connection and its three streams, closed after with the server, whatever ``_fork`` left of them."""
    place = warm.Place(runtime / "p")
    with place.file(".lock").open("ab") as lock:
        server = warm.Server(place, "key", 60.0, lock)
        server.selector = selectors.DefaultSelector()  # as its loop makes it
        ours, theirs = socket.socketpair()
        fds = [os.open(os.devnull, os.O_RDWR) for _ in range(3)]
        try:
            yield server, ours, fds
        finally:
            server.selector.close()
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            for end in (ours, theirs, server.listener):
                if end is not None:
                    end.close()


def test_a_fork_refused_leaves_the_warm_process_as_it_was(runtime: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process limit or a lack of memory refuses one command's fork: that command runs by itself, and the
    warm process's signals and files are as before, for the commands after it."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    made: list[int] = []
    real_pipe = os.pipe

    def pipe() -> tuple[int, int]:
        ends = real_pipe()
        made.extend(ends)
        return ends

    def refused() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    with _server_here(runtime) as (server, ours, fds):
        monkeypatch.setattr(os, "pipe", pipe)
        monkeypatch.setattr(os, "fork", refused)
        try:
            with pytest.raises(BlockingIOError):
                server._fork(ours, {"key": "key"}, fds)
            assert signal.pthread_sigmask(signal.SIG_BLOCK, ()) == mask
            assert gc.get_freeze_count() == 0
            assert len(made) == 2
            for fd in made:  # the go pipe's two ends, closed
                with pytest.raises(OSError):
                    os.fstat(fd)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def test_a_forked_run_leaves_the_warm_process_s_objects_out_of_its_collections(
    runtime: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's collector never walks what the warm process had loaded: a full collection there touches every
    object's header, so every page they are on is copied, 0.15 s of each command (bench/README.md). The warm
    process goes on collecting its own garbage."""
    told, tell = os.pipe()

    def become(*_: object) -> NoReturn:
        os.write(tell, str(gc.get_freeze_count()).encode())
        os._exit(0)

    monkeypatch.setattr(warm.Server, "_become", become)
    loaded = len(gc.get_objects())
    with _server_here(runtime) as (server, ours, fds):
        try:
            server._fork(ours, {"key": "key"}, fds)
            os.close(tell)  # the child's alone: a child that died before it wrote is an empty read, not a hang
            frozen = int(os.read(told, 64) or -1)
            for pid, child in server.children.items():
                os.waitpid(pid, 0)
                child.close_go()
        finally:
            os.close(told)
            with contextlib.suppress(OSError):  # closed already once the fork was made
                os.close(tell)
    assert frozen >= loaded * 0.9
    assert gc.get_freeze_count() == 0
