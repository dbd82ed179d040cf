"""Reading a warehouse while a run (or a review page) writes it.

DuckDB lets one process open a database file for writing and no other process open it at all meanwhile,
so ``runs``, ``funnel``, ``audit`` and ``show`` from another shell would be refused for the hours a run
takes. Instead the writing process answers them: it serves those four read queries on a loopback port,
named with a random token in ``<warehouse>.live`` (readable by its owner only), and a reader that finds the
file locked asks there. The answers come from the writer's own connection, so they are as fresh as its
last flush (``FLUSH_SECONDS``); the server costs the writer nothing until it is asked. A run holds the file
a moment before it serves (while it opens its run) and after (while it records how it ended): a reader
waits that out. A second run asks there first (``check_free``), and is refused at once when a run answers.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import os
import secrets
import selectors
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from ifsynth.schemas.errors import IfsynthError, WarehouseError, WarehouseInUse
from ifsynth.warehouse import audit
from ifsynth.warehouse.store import Warehouse

QUERIES: dict[str, Callable[..., Any]] = {
    "runs": audit.runs,
    "funnel": audit.funnel,
    "audit": audit.audit,
    "reasons": audit.reasons,
    "show": audit.show,
}
TIMEOUT = 10.0  # a busy run on two cores may take seconds to answer a funnel
WAIT_SECONDS = 15.0  # how long a reader waits for a run that holds the file and does not serve it yet
WRITER_TIMEOUT = 2.0  # a run says it writes the file without touching it: no reason to wait as for a query


def _serve(server: http.server.ThreadingHTTPServer, stop: int) -> None:
    """Each request as it comes, until the pipe end ``stop`` is written to at the block's end: then at once,
    where socketserver's own loop (``serve_forever``) would first wait for its next poll, at every run's end."""
    with selectors.DefaultSelector() as selector:
        selector.register(server, selectors.EVENT_READ)
        selector.register(stop, selectors.EVENT_READ)
        while all(key.fileobj is server for key, _ in selector.select()):
            server.handle_request()


def live_file(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".live")


class LiveServer:
    """The writer's side: serves QUERIES over ``warehouse`` while the block runs; ``now`` adds the state of
    the stage in progress to a funnel (done and total so far); ``holder`` is what a second writer is told
    holds the file."""

    def __init__(
        self, warehouse: Warehouse, now: Callable[[], dict[str, Any] | None] | None = None, holder: str = "a run"
    ) -> None:
        self.warehouse, self.now, self.holder = warehouse, now, holder
        self.token = secrets.token_hex(16)
        self.file = live_file(warehouse.path)
        self._held = contextlib.ExitStack()  # what the block's end stops and frees, in reverse order

    def __enter__(self) -> LiveServer:
        serving = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                if self.headers.get("x-token") != serving.token:
                    return self._reply(403, {"error": "wrong token"})
                try:
                    asked = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                    self._reply(200, serving.answer(asked["query"], asked.get("args") or {}))
                except IfsynthError as exc:
                    self._reply(400, {"error": str(exc)})
                except (ValueError, KeyError, TypeError) as exc:
                    self._reply(400, {"error": f"bad request: {exc}"})

            def _reply(self, status: int, body: Any) -> None:
                data = json.dumps(body, default=_jsonable, ensure_ascii=False).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        with contextlib.ExitStack() as held:  # whatever fails on the way is let go again
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            held.callback(server.server_close)
            server.daemon_threads = True
            server.timeout = 0  # asked to handle a request only once one waits
            read_end, write_end = os.pipe()  # written to as the block ends: the serving thread stops then
            held.callback(os.close, read_end)
            held.callback(os.close, write_end)
            thread = threading.Thread(target=_serve, args=(server, read_end), name="ifsynth-live", daemon=True)
            thread.start()
            held.callback(thread.join)
            held.callback(os.write, write_end, b"x")
            where = {"pid": os.getpid(), "port": server.server_address[1], "token": self.token}
            staged = self.file.with_name(self.file.name + ".tmp")
            held.callback(staged.unlink, missing_ok=True)
            staged.write_text(json.dumps(where))
            staged.chmod(0o600)
            staged.replace(self.file)
            held.callback(self.file.unlink, missing_ok=True)
            self._held = held.pop_all()
        return self

    def __exit__(self, *_: object) -> None:
        self._held.close()

    def answer(self, query: str, args: dict[str, Any]) -> Any:
        if query == "writer":  # who writes the file: a second run is refused at once (``check_free``)
            return {"pid": os.getpid(), "holder": self.holder}
        if query not in QUERIES:
            raise WarehouseError(f"unknown live query `{query}`")
        result = QUERIES[query](self.warehouse, **args)
        if query == "funnel" and self.now is not None:
            result["in_progress"] = self.now()
        return result


def read(path: str | Path, query: str, *, memory_limit: str | None = None, **args: Any) -> Any:
    """The answer to ``query``: from the file, or, while a run holds it, from the run's process."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            with Warehouse(path, read_only=True, memory_limit=memory_limit) as warehouse:
                return QUERIES[query](warehouse, **args)
        except WarehouseInUse:
            answer = ask(path, query, **args)
            if answer is not None:
                return answer
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def check_free(path: str | Path) -> None:
    """Before a run starts anything slow (Prefect): a warehouse a run is writing is refused at once, with the
    writing process named, instead of after Prefect's start and the writer's wait for the file. Only a run
    that says it is the process its live file names is believed: anything else (no file, a file a dead
    process left, a port now another program's, no answer in time) leaves it to the open, as before."""
    where = _where(path)
    if where is None:
        return
    try:
        answer = _post(where, "writer", {}, timeout=WRITER_TIMEOUT)
    except (OSError, ValueError, http.client.HTTPException):  # timeouts and HTTP errors are OSErrors too
        return
    if isinstance(answer, dict) and answer.get("pid") == where["pid"]:
        raise WarehouseInUse(str(path), f"pid {where['pid']}, {answer.get('holder') or 'a run'}")


def ask(path: str | Path, query: str, **args: Any) -> Any | None:
    """The answer of the process writing ``path``; None when no live writer serves it (no file, or a file
    left by a process that died)."""
    where = _where(path)
    if where is None:
        return None
    try:
        return _revive(_post(where, query, args, timeout=TIMEOUT))
    except urllib.error.HTTPError as exc:
        said = json.loads(exc.read() or b"{}").get("error", f"the running process answered {exc.code}")
        raise WarehouseError(said) from None
    except TimeoutError:
        raise WarehouseError(
            f"the run writing `{path}` (pid {where['pid']}) did not answer within {TIMEOUT:g} s; "
            "it may be busy: ask again"
        ) from None
    except (OSError, ValueError, http.client.HTTPException):
        return None  # no process at that port (the file was left by one that died), or not ours


def _where(path: str | Path) -> dict[str, Any] | None:
    """The writing process's pid, port and token, from its live file; None without one."""
    try:
        where = json.loads(live_file(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(where, dict) or not {"pid", "port", "token"} <= where.keys():
        return None
    return where


def _post(where: dict[str, Any], query: str, args: dict[str, Any], *, timeout: float) -> Any:
    """``query`` asked of the process at ``where``; a timeout raises ``TimeoutError``, whatever layer saw it."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{where['port']}/",
        data=json.dumps({"query": query, "args": args}).encode(),
        headers={"x-token": where["token"], "content-type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return json.loads(reply.read())
    except OSError as exc:
        if isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError):
            raise TimeoutError from None
        raise


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return str(value)


def _revive(value: Any) -> Any:
    """Timestamps back to datetimes (``*_at`` keys), so answers print like those read from the file."""
    if isinstance(value, list):
        return [_revive(v) for v in value]
    if isinstance(value, dict):
        return {
            k: datetime.fromisoformat(v) if k.endswith("_at") and isinstance(v, str) else _revive(v)
            for k, v in value.items()
        }
    return value
