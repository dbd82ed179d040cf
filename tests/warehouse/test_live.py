"""Reading a warehouse another process holds: a reader waits out the moments a run holds the file without
serving it, a writer waits out a reader's query, and a run that does not answer is said so in one line."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ifsynth.schemas.errors import WarehouseError, WarehouseInUse
from ifsynth.schemas.records import RunRecord
from ifsynth.warehouse import live
from ifsynth.warehouse.store import Warehouse
from tests.conftest import REPO
from tests.servers import fixed_reply


def make(path: Path) -> None:
    """A warehouse with one completed run."""
    with Warehouse(path) as warehouse:
        run = RunRecord(run_id="run-1", name="run-1", recipe="instructir", fingerprint="f", config={},
                        code_version="v", status="running", started_at=datetime.now())  # fmt: skip
        warehouse.start_run(run)
        warehouse.finish_run("run-1", "completed")


@contextmanager
def holder(path: Path, body: str) -> Iterator[subprocess.Popen[str]]:
    """Another process that opens ``path`` and runs ``body`` (``w`` is the warehouse); it says `open` once it
    holds the file and runs until its stdin closes."""
    script = textwrap.dedent(
        """
        import sys, time
        from ifsynth.warehouse.live import LiveServer
        from ifsynth.warehouse.store import Warehouse
        {body}
        """
    ).format(body=textwrap.dedent(body))
    process = subprocess.Popen([sys.executable, "-c", script, str(path)], cwd=REPO, text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert process.stdout is not None and process.stdout.readline() == "open\n"
        yield process
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=30)


def test_a_reader_waits_for_a_run_that_holds_the_file_before_it_serves(tmp_path: Path) -> None:
    """A run opens its run, and only then serves readers: one that asks in between gets the run's answer,
    not "in use"."""
    path = tmp_path / "w.duckdb"
    make(path)
    body = """
        with Warehouse(sys.argv[1]) as w:
            print("open", flush=True)
            time.sleep(2.0)
            with LiveServer(w):
                sys.stdin.read()
    """
    with holder(path, body):
        with pytest.raises(WarehouseInUse):
            Warehouse(path, read_only=True)  # held, and not served yet
        runs = live.read(path, "runs")
    assert [r["run_id"] for r in runs] == ["run-1"]


def test_a_reader_gives_up_on_a_holder_that_never_serves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "w.duckdb"
    make(path)
    monkeypatch.setattr(live, "WAIT_SECONDS", 1.0)
    with holder(path, 'with Warehouse(sys.argv[1]):\n    print("open", flush=True)\n    sys.stdin.read()\n'):
        started = time.monotonic()
        with pytest.raises(WarehouseInUse, match="is in use by another process"):
            live.read(path, "runs")
    assert time.monotonic() - started >= 1.0


def test_a_writer_waits_out_a_reader(tmp_path: Path) -> None:
    """`ifsynth funnel` from another shell at the moment a run opens its warehouse does not stop the run."""
    path = tmp_path / "w.duckdb"
    make(path)
    body = """
        w = Warehouse(sys.argv[1], read_only=True)
        print("open", flush=True)
        time.sleep(1.0)
        w.close()
        sys.stdin.read()
    """
    with holder(path, body), Warehouse(path) as warehouse:
        assert warehouse.run("run-1").status == "completed"


def test_a_run_that_does_not_answer_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run too busy to answer is not taken for a dead one: the reader says it did not answer in time."""
    path = tmp_path / "w.duckdb"
    monkeypatch.setattr(live, "TIMEOUT", 0.5)
    with socket.create_server(("127.0.0.1", 0)) as mute:  # accepts, and never replies
        live.live_file(path).write_text(f'{{"pid": 1234, "port": {mute.getsockname()[1]}, "token": "t"}}')
        with pytest.raises(WarehouseError, match=r"\(pid 1234\) did not answer within 0.5 s; it may be busy"):
            live.ask(path, "funnel")
    live.live_file(path).unlink()
    assert live.ask(path, "funnel") is None  # no file: no live writer


def test_a_second_run_is_refused_only_by_the_run_its_live_file_names(tmp_path: Path) -> None:
    """``check_free``: with no live file, a damaged one, or one a dead process left (its port now closed,
    silent, another program's, or a server that is not ours), a run goes on to open the file; the live run the
    file names is named at once."""
    path = tmp_path / "w.duckdb"
    make(path)
    file = live.live_file(path)

    def names(port: int, pid: int = 999999) -> None:
        file.write_text(json.dumps({"pid": pid, "port": port, "token": "t"}))

    live.check_free(path)
    file.write_text("[1, 2]")
    live.check_free(path)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        names(closed.getsockname()[1])
    live.check_free(path)
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        names(silent.getsockname()[1])
        live.check_free(path)
    for status, body in ((200, b"<html>hello</html>"), (200, b'{"pid": 1}'), (403, b'{"error": "wrong token"}')):
        with fixed_reply(status, body) as other:
            port = urlsplit(other.base_url).port
            assert port is not None
            names(port)
            live.check_free(path)
    said = rf"in use by another process \(pid {os.getpid()}, a run\)"
    with Warehouse(path) as warehouse, live.LiveServer(warehouse), pytest.raises(WarehouseInUse, match=said):
        live.check_free(path)


def test_a_live_server_answers_each_request_until_its_block_ends(tmp_path: Path) -> None:
    """Requests are answered one after another while the block runs; as it ends its file goes, its port closes
    and its thread is gone (the end of every run waits for it), and a new block serves again. A server that
    fails to start lets go of what it had made."""
    path = tmp_path / "w.duckdb"
    make(path)
    file = live.live_file(path)
    with Warehouse(path) as warehouse:
        for _ in range(2):
            served = live.LiveServer(warehouse).__enter__()
            port = json.loads(file.read_text())["port"]
            for _ in range(3):
                assert live.ask(path, "writer") == {"pid": os.getpid(), "holder": "a run"}
            ending = threading.Thread(target=served.__exit__)
            ending.start()
            ending.join(timeout=30)
            assert not ending.is_alive(), "the block's end did not stop its server"
            assert "ifsynth-live" not in {thread.name for thread in threading.enumerate()}
            assert not file.exists()
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
        before = _sockets_and_pipes()
        file.with_name(file.name + ".tmp").mkdir()  # where the live file is staged: it cannot be written
        with pytest.raises(IsADirectoryError), live.LiveServer(warehouse):
            pass
        assert "ifsynth-live" not in {thread.name for thread in threading.enumerate()}
        deadline = time.monotonic() + 5  # another thread's socket of the moment goes; one left open stays
        while (left := _sockets_and_pipes() - before) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, f"the server that failed to start left {left} open"


def _sockets_and_pipes() -> set[str]:
    """The process's open sockets and pipes, by inode: what a server that failed to start would leave open
    (counting every descriptor also counts what other threads of the test process open for a moment)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the listing's own descriptor, gone once listed
            if (target := os.readlink(f"/proc/self/fd/{fd}")).startswith(("socket:", "pipe:")):
                found.add(target)
    return found
