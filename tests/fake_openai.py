"""A real-HTTP fake of the OpenAI chat-completions API, served on loopback.

Tests and benchmarks point the real ``openai`` SDK at it, so transport, retries and response parsing run
exactly as in production. Faults are a pure function of (seed, request body, attempt number): two runs against
fresh fakes see the same faults, and a retried request can still succeed on a later attempt.

Hostile modes (``hostile=<name>``, one of ``HOSTILE``) answer one path as a server that breaks the rules would:
a reply trickled a byte at a time, a gzip bomb or an oversized body for ``GET /models``, completions with null
content, no or empty ``choices``, a mistyped envelope or bytes that are not UTF-8. The other paths answer as usual.

Endpoints: POST /v1/chat/completions, POST /v1/embeddings, GET /v1/models, the Batch API (POST /v1/files, GET
/v1/files/{id}/content, POST /v1/batches, GET /v1/batches/{id}: a batch completes on its `batch_polls`-th
retrieval), and for tests GET /_stats and POST /_reset.
Standalone: ``python -m tests.fake_openai --port 8765 --latency 0.2 --rate-429 0.1`` serves until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import email.parser
import email.policy
import functools
import gzip
import hashlib
import json
import math
import random
import re
import signal
import socket
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Literal

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Send

OUTCOMES = ("ok", "429", "500", "timeout", "invalid_json", "length", "400", "422")
FAULTS = ("429", "500", "timeout", "invalid_json", "length")  # order of the cumulative fault draw
KNOWN_MODELS = ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini")
WORDS = (
    "apple", "river", "stone", "light", "paper", "garden", "window", "silver", "market", "forest",
    "bridge", "candle", "harbor", "meadow", "pencil", "rocket", "shadow", "thunder", "valley", "winter",
    "amber", "basket", "castle", "desert", "engine", "feather", "glacier", "hammer", "island", "jacket",
    "kettle", "ladder", "mirror", "needle", "orange", "pillow", "quiet", "ribbon", "saddle", "tunnel",
    "umbrella", "velvet", "wagon", "yellow", "zephyr", "quick", "gentle", "bright", "hollow", "steady",
    "clever", "distant", "early", "famous", "golden", "humble", "little", "modern", "narrow", "simple",
    "search", "query", "answer", "record", "signal", "number", "letter", "travel", "reason", "moment",
)  # fmt: skip

Mode = Literal["random", "responder"]
Responder = Callable[[dict[str, Any]], str | dict[str, Any]]

_FENCED_JSON = re.compile(r"```json[ \t]*\r?\n(.*?)```", re.DOTALL)
_SCHEMA_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean", "null"})
_MAX_DEPTH = 8  # past this, arrays shrink to minItems and unions prefer null, so recursive schemas end
_PLAIN_JSON_ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
_ERRORS = {  # status -> (message, type, code), as the real API shapes them
    "400": ("Invalid request (injected fault).", "invalid_request_error", None),
    "422": ("Unprocessable request (injected fault).", "invalid_request_error", None),
    "429": ("Rate limit reached for requests (injected fault).", "requests", "rate_limit_exceeded"),
    "500": ("The server had an error while processing your request.", "server_error", None),
}
_FORMATS: dict[str, Callable[[random.Random], str]] = {  # string formats pydantic validates
    "date-time": lambda r: f"2024-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}T{r.randint(0, 23):02d}:00:00Z",
    "date": lambda r: f"2024-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}",
    "email": lambda r: f"{r.choice(WORDS)}@example.com",
    "uri": lambda r: f"https://example.com/{r.choice(WORDS)}",
    "uuid": lambda r: str(uuid.UUID(int=r.getrandbits(128), version=4)),
}


@dataclasses.dataclass(frozen=True)
class _Settings:
    """Immutable so a request can take one consistent snapshot while `configure` swaps it."""

    latency: float = 0.0
    mode: Mode = "random"
    responder: Responder | None = None
    seed: int = 0
    rate_429: float = 0.0
    rate_500: float = 0.0
    rate_timeout: float = 0.0
    rate_invalid_json: float = 0.0
    rate_length: float = 0.0
    retry_after: float = 0.05
    timeout_sleep: float = 30.0
    rpm: int = 0  # requests per minute enforced with 429s and announced in x-ratelimit-* headers; 0: none
    hostile: str = ""  # one of HOSTILE: a path answered as a hostile server would; "": none
    trickle_pause: float = 0.05  # seconds between the bytes of a trickled reply

    def __post_init__(self) -> None:
        if self.hostile and self.hostile not in HOSTILE:
            raise ValueError(f"hostile must be one of {sorted(HOSTILE)}, not {self.hostile!r}")
        if self.mode not in ("random", "responder"):
            raise ValueError(f"mode must be 'random' or 'responder', not {self.mode!r}")
        if self.mode == "responder" and self.responder is None:
            raise ValueError("mode='responder' needs a responder")
        rates = self.rates()
        if any(not 0.0 <= r <= 1.0 for r in rates) or sum(rates) > 1.0 + 1e-9:
            raise ValueError(f"fault rates must each be in [0, 1] and sum to at most 1, got {rates}")

    def rates(self) -> tuple[float, ...]:
        return (self.rate_429, self.rate_500, self.rate_timeout, self.rate_invalid_json, self.rate_length)

    def pick_fault(self, draw: float) -> str:
        """One uniform draw against cumulative rates, so each rate is the exact share of its fault."""
        edge = 0.0
        for fault, rate in zip(FAULTS, self.rates(), strict=True):
            edge += rate
            if draw < edge:
                return fault
        return "ok"


def _check_script(script: Sequence[str]) -> deque[str]:
    unknown = [s for s in script if s not in OUTCOMES]
    if unknown:
        raise ValueError(f"unknown script outcomes {unknown}; expected some of {OUTCOMES}")
    return deque(script)


class _Server(uvicorn.Server):
    """uvicorn's server with a main loop that wakes on the stop event, not only on its 0.1 s poll:
    every test that starts a fake pays the shutdown time."""

    def __init__(self, config: uvicorn.Config, stopping: asyncio.Event) -> None:
        super().__init__(config)
        self.stopping = stopping

    async def main_loop(self) -> None:
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864_000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), 0.1)


class FakeOpenAI:
    """Context manager running the fake on 127.0.0.1 in a background thread; see the module docstring."""

    def __init__(
        self,
        *,
        port: int = 0,
        latency: float = 0.0,
        mode: Mode = "random",
        responder: Responder | None = None,
        seed: int = 0,
        rate_429: float = 0.0,
        rate_500: float = 0.0,
        rate_timeout: float = 0.0,
        rate_invalid_json: float = 0.0,
        rate_length: float = 0.0,
        retry_after: float = 0.05,
        timeout_sleep: float = 30.0,
        script: Sequence[str] | None = None,
        rpm: int = 0,
        batch_polls: int = 1,
        batch_api: bool = True,
        hostile: str = "",
        trickle_pause: float = 0.05,
    ) -> None:
        self._settings = _Settings(
            latency=latency,
            mode=mode,
            responder=responder,
            seed=seed,
            rate_429=rate_429,
            rate_500=rate_500,
            rate_timeout=rate_timeout,
            rate_invalid_json=rate_invalid_json,
            rate_length=rate_length,
            retry_after=retry_after,
            timeout_sleep=timeout_sleep,
            rpm=rpm,
            hostile=hostile,
            trickle_pause=trickle_pause,
        )
        self._window: deque[float] = deque()  # times of the requests of the last minute, for `rpm`
        self.batch_polls = batch_polls  # retrievals a batch stays in progress before it completes
        self._files: dict[str, bytes] = {}
        self._batches: dict[str, dict[str, Any]] = {}
        self.batch_stats: Counter[str] = Counter()  # uploads, creates, retrieves, lines answered
        self._script = _check_script(script or ())
        self._port = port
        self._lock = threading.Lock()
        self._seen: Counter[bytes] = Counter()
        self._counts: Counter[str] = Counter()
        self._in_flight = self._peak_in_flight = 0  # chat requests received and not yet answered
        self._bodies: list[bytes] = []  # raw, parsed on demand: keeps memory and per-request cost low
        self._embedded: list[str] = []  # every text sent to /v1/embeddings and answered
        self._embedding_counts: Counter[str] = Counter()  # embeddings requests per outcome
        self._headers: list[list[tuple[bytes, bytes]]] = []
        self._models: set[str] = set(KNOWN_MODELS)
        self._app = Starlette(
            routes=[
                Route("/v1/models", self._list_models, methods=["GET"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                Route("/_stats", self._get_stats, methods=["GET"]),
                Route("/_reset", self._post_reset, methods=["POST"]),
                *(self._batch_routes() if batch_api else ()),  # without: 404, as vLLM or Ollama answer
            ]
        )
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event

    # -- lifecycle -------------------------------------------------------------------------------------

    def __enter__(self) -> FakeOpenAI:
        # An explicit IPPROTO_TCP makes asyncio set TCP_NODELAY on accepted connections (it checks `proto`);
        # without it every response waits ~40 ms on Nagle plus the client's delayed ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self._port))  # bound here, so the port is known and cannot be raced for
        self._port = sock.getsockname()[1]
        self._stopping = asyncio.Event()  # binds to the server's loop on first use
        config = uvicorn.Config(
            self._asgi,
            interface="asgi3",
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="off",
            # per-request work a fake has no use for: X-Forwarded-* rewriting, Server and Date headers
            proxy_headers=False,
            server_header=False,
            date_header=False,
        )
        self._server = _Server(config, self._stopping)
        self._thread = threading.Thread(target=self._run, args=(self._server, sock), name="fake-openai", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10.0
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._server.should_exit = True
                sock.close()
                raise RuntimeError("fake OpenAI server did not start")
            time.sleep(0.005)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving (also mid-test, as a server that goes down would); stopping again does nothing."""
        assert self._server is not None and self._thread is not None and self._loop is not None
        if not self._thread.is_alive():
            return
        self._server.should_exit = True  # before the event: the woken main loop must see it
        self._loop.call_soon_threadsafe(self._stopping.set)  # also wakes stalled requests
        self._thread.join(timeout=10.0)

    def _run(self, server: uvicorn.Server, sock: socket.socket) -> None:
        # uvicorn's loop factory picks uvloop when installed, as `uvicorn.run` would.
        with asyncio.Runner(loop_factory=server.config.get_loop_factory()) as runner:
            runner.run(self._serve(server, sock))

    async def _serve(self, server: uvicorn.Server, sock: socket.socket) -> None:
        self._loop = asyncio.get_running_loop()
        await server.serve(sockets=[sock])

    # -- Python-side API -----------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeOpenAI is not started; use it as a context manager")
        return f"http://127.0.0.1:{self._port}/v1"

    def configure(self, **kw: Any) -> None:
        """Change settings (any constructor argument but `port`) for the requests that follow."""
        with self._lock:
            if "script" in kw:
                self._script = _check_script(kw.pop("script") or ())
            self._settings = dataclasses.replace(self._settings, **kw)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": self._counts.total(),
                "by_outcome": {o: self._counts[o] for o in OUTCOMES},
                "peak_in_flight": self._peak_in_flight,
            }

    def reset(self) -> None:
        """Zero counters, seen-counts (so fault sequences replay) and the request log; settings stay."""
        with self._lock:
            self._seen.clear()
            self._window.clear()
            self._counts.clear()
            self._peak_in_flight = self._in_flight
            self._bodies.clear()
            self._embedded.clear()
            self._embedding_counts.clear()
            self._headers.clear()

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Chat request bodies received so far, oldest first."""
        with self._lock:
            raw = list(self._bodies)
        return [json.loads(b) for b in raw]

    @property
    def embedded(self) -> list[str]:
        """Texts sent to the embeddings endpoint so far, in order."""
        with self._lock:
            return list(self._embedded)

    @property
    def headers(self) -> list[dict[str, str]]:
        """Headers of each chat request (lower-case names), so tests can check what the client sent."""
        with self._lock:
            raw = list(self._headers)
        return [{k.decode("latin-1"): v.decode("latin-1") for k, v in h} for h in raw]

    # -- HTTP handlers ---------------------------------------------------------------------------------------

    async def _asgi(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        """Chat completions straight off the ASGI scope, the rest through Starlette: at thousands of
        requests a second, Starlette's routing and middleware cost the fake more CPU than the answer."""
        settings = self._settings
        raw = HOSTILE[settings.hostile](scope["path"]) if settings.hostile else None
        if raw is not None and scope["type"] == "http":
            await self._hostile(raw, settings.trickle_pause, receive, send)
            return
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions" or scope["method"] != "POST":
            await self._app(scope, receive, send)
            return
        body = await _body(receive)
        if body is None:
            return
        with self._lock:
            self._in_flight += 1
            self._peak_in_flight = max(self._peak_in_flight, self._in_flight)
        try:
            response = await self._chat(body, scope["headers"], asyncio.get_running_loop().time())
            await response(scope, receive, send)
        finally:
            with self._lock:
                self._in_flight -= 1

    async def _hostile(self, raw: Raw, pause: float, receive: Receive, send: Send) -> None:
        """Send a hostile reply as it is, chunk by chunk (``pause`` seconds apart when it trickles); a request's
        body and headers are kept as any chat request's."""
        if await _body(receive) is None:
            return
        with self._lock:
            self._counts["hostile"] += 1
        headers = [(k.encode(), v.encode()) for k, v in raw.headers.items()]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for chunk in raw.chunks():
            if raw.trickle:
                await self._stall(pause)
                if self._stopping.is_set():
                    return
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _chat(self, raw: bytes, request_headers: list[tuple[bytes, bytes]], arrived: float) -> JSONResponse:
        """The answer goes out ``latency`` seconds after the request arrived: the fake's own work on it is
        part of that time, as a real server's is, not added to it."""
        try:
            body = json.loads(raw)
        except ValueError:
            return _error_response(400, "We could not parse the JSON body of your request.", {})
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or "model" not in body:
            return _error_response(400, "'model' and 'messages' are required.", {})
        if body.get("stream"):
            return _error_response(400, "stream=true is not supported by the fake.", {})

        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        key = hashlib.sha256(canonical).digest()
        with self._lock:
            settings = self._settings
            attempt = self._seen[key]
            self._seen[key] = attempt + 1
            digest = hashlib.sha256(b"%s\x00%d\x00%d" % (canonical, settings.seed, attempt)).hexdigest()
            draw = int(digest[:16], 16) / 16**16
            outcome = self._script.popleft() if self._script else settings.pick_fault(draw)
            limits = self._rate_limit(settings.rpm) if settings.rpm else None
            if limits is not None and limits["x-ratelimit-remaining-requests"] == "-1":
                outcome = "429"
            self._counts[outcome] += 1
            self._bodies.append(raw)
            self._headers.append(request_headers)
            self._models.add(str(body["model"]))

        headers = {"x-request-id": f"req_{digest[:24]}"}
        if limits is not None:
            headers.update(limits)
            headers["x-ratelimit-remaining-requests"] = str(max(0, int(limits["x-ratelimit-remaining-requests"])))
        if outcome in _ERRORS:
            if outcome == "429" and limits is not None and limits["x-ratelimit-remaining-requests"] == "-1":
                wait = float(limits["x-ratelimit-reset-requests"].removesuffix("s"))
                headers["retry-after"], headers["retry-after-ms"] = f"{wait:.3f}", str(round(wait * 1000))
            elif outcome == "429":
                headers["retry-after"] = f"{settings.retry_after:g}"
                headers["retry-after-ms"] = str(round(settings.retry_after * 1000))
            await self._until(arrived + settings.latency)
            return _error_response(int(outcome), _ERRORS[outcome], headers)

        content_seed = hashlib.sha256(b"%s\x00%d" % (canonical, settings.seed)).digest()
        before, core, after = _answer(body, settings, random.Random(int.from_bytes(content_seed)))
        finish_reason = "stop"
        if outcome == "invalid_json":
            core = _break_json(core)
        elif outcome == "length":
            core, after, finish_reason = core[: len(core) // 2], "", "length"
        content = before + core + after
        prompt_tokens = sum(len(text.split()) for text in _message_texts(body["messages"]))
        completion_tokens = len(content.split())
        completion = {
            "id": f"chatcmpl-{digest[:24]}",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": finish_reason,
                    "logprobs": _logprobs(content, body.get("top_logprobs") or 0) if body.get("logprobs") else None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        response = JSONResponse(completion, headers=headers)
        await self._until(arrived + settings.latency)
        if outcome == "timeout":
            await self._stall(settings.timeout_sleep)
        return response

    @staticmethod
    async def _until(deadline: float) -> None:
        delay = deadline - asyncio.get_running_loop().time()
        if delay > 0:
            await asyncio.sleep(delay)

    def _rate_limit(self, rpm: int) -> dict[str, str]:
        """Count this request against a sliding one-minute window (call with the lock held); remaining
        -1 means over the limit. The headers are the ones OpenAI sends."""
        now = time.monotonic()
        while self._window and now - self._window[0] >= 60.0:
            self._window.popleft()
        over = len(self._window) >= rpm
        if not over:
            self._window.append(now)
        reset = 60.0 - (now - self._window[0]) if self._window else 0.0
        return {
            "x-ratelimit-limit-requests": str(rpm),
            "x-ratelimit-remaining-requests": "-1" if over else str(rpm - len(self._window)),
            "x-ratelimit-reset-requests": f"{reset:.3f}s",
        }

    # -- the Batch API: files and batches -------------------------------------------------------------

    def _batch_routes(self) -> list[Route]:
        return [
            Route("/v1/files", self._upload, methods=["POST"]),
            Route("/v1/files/{file_id}/content", self._file_content, methods=["GET"]),
            Route("/v1/batches", self._create_batch, methods=["POST"]),
            Route("/v1/batches/{batch_id}", self._retrieve_batch, methods=["GET"]),
        ]

    async def _upload(self, request: Request) -> JSONResponse:
        """A multipart upload (`file`, `purpose`), parsed with the standard library's MIME parser."""
        raw = await request.body()
        head = f"Content-Type: {request.headers.get('content-type', '')}\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + raw)
        fields = {part.get_param("name", header="content-disposition"): part for part in message.iter_parts()}
        if "file" not in fields:
            return _error_response(400, "A `file` part is required.", {})
        payload = fields["file"].get_payload(decode=True)
        content = payload if isinstance(payload, bytes) else b""
        with self._lock:
            file_id = f"file-{uuid.uuid4().hex[:24]}"
            self._files[file_id] = content
            self.batch_stats["uploads"] += 1
        return JSONResponse(_file_object(file_id, len(content), "batch"))

    async def _file_content(self, request: Request) -> Response:
        with self._lock:
            content = self._files.get(request.path_params["file_id"])
        if content is None:
            return _error_response(404, "No such file.", {})
        return Response(content, media_type="application/octet-stream")

    async def _create_batch(self, request: Request) -> JSONResponse:
        body = await request.json()
        with self._lock:
            if body.get("input_file_id") not in self._files:
                return _error_response(400, "input_file_id is not an uploaded file.", {})
            batch_id = f"batch_{uuid.uuid4().hex[:24]}"
            self._batches[batch_id] = {"input": body["input_file_id"], "polls": 0, "output": None}
            self.batch_stats["creates"] += 1
        return JSONResponse(self._batch_object(batch_id))

    async def _retrieve_batch(self, request: Request) -> JSONResponse:
        batch_id = request.path_params["batch_id"]
        with self._lock:
            batch = self._batches.get(batch_id)
            if batch is None:
                return _error_response(404, "No such batch.", {})
            batch["polls"] += 1
            self.batch_stats["retrieves"] += 1
            ready = batch["output"] is None and batch["polls"] >= self.batch_polls
            settings, lines = self._settings, self._files[batch["input"]].decode().splitlines()
        if ready:
            answered = [self._batch_line(json.loads(line), settings) for line in lines if line.strip()]
            with self._lock:
                output = f"file-{uuid.uuid4().hex[:24]}"
                self._files[output] = "".join(json.dumps(a) + "\n" for a in answered).encode()
                batch["output"] = output
                self.batch_stats["lines"] += len(answered)
        return JSONResponse(self._batch_object(batch_id))

    def _batch_line(self, line: dict[str, Any], settings: _Settings) -> dict[str, Any]:
        """One output line: the completion the chat endpoint would give on a first attempt without faults."""
        body = line["body"]
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        content_seed = hashlib.sha256(b"%s\x00%d" % (canonical, settings.seed)).digest()
        before, core, after = _answer(body, settings, random.Random(int.from_bytes(content_seed)))
        content = before + core + after
        prompt_tokens = sum(len(text.split()) for text in _message_texts(body["messages"]))
        completion = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(content.split()),
                      "total_tokens": prompt_tokens + len(content.split())},
        }  # fmt: skip
        return {
            "id": f"batch_req_{uuid.uuid4().hex[:16]}",
            "custom_id": line["custom_id"],
            "response": {"status_code": 200, "request_id": "req_batch", "body": completion},
            "error": None,
        }

    def _batch_object(self, batch_id: str) -> dict[str, Any]:
        batch = self._batches[batch_id]
        done = batch["output"] is not None
        return {
            "id": batch_id,
            "object": "batch",
            "endpoint": "/v1/chat/completions",
            "input_file_id": batch["input"],
            "completion_window": "24h",
            "status": "completed" if done else "in_progress",
            "output_file_id": batch["output"],
            "error_file_id": None,
            "created_at": 0,
            "request_counts": None,
        }

    async def _stall(self, seconds: float) -> None:
        """Sleep like a hung upstream, but wake at shutdown so exiting never waits on a stalled request."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _list_models(self, request: Request) -> JSONResponse:
        with self._lock:
            models = sorted(self._models)
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake-openai"} for m in models]
        return JSONResponse({"object": "list", "data": data})

    async def _embeddings(self, request: Request) -> JSONResponse:
        """Deterministic vectors: each lower-cased word adds 1 to one of EMBEDDING_DIM hashed coordinates, so
        texts sharing words point the same way and identical texts embed identically. Faults come as for chat
        requests (the script first, then the rates); an ``invalid_json`` or ``length`` draw answers normally."""
        raw = await request.body()
        body = json.loads(raw)
        texts = [body["input"]] if isinstance(body["input"], str) else list(body["input"])
        with self._lock:
            settings = self._settings
            attempt = self._seen[raw]
            self._seen[raw] = attempt + 1
            draw = int(hashlib.sha256(b"%s\x00%d\x00%d" % (raw, settings.seed, attempt)).hexdigest()[:16], 16)
            outcome = self._script.popleft() if self._script else settings.pick_fault(draw / 16**16)
            self._embedding_counts[outcome] += 1
            if outcome not in _ERRORS and outcome != "timeout":
                self._embedded += texts
        if outcome in _ERRORS:
            headers = {"retry-after": f"{settings.retry_after:g}"} if outcome == "429" else {}
            return _error_response(int(outcome), _ERRORS[outcome], headers)
        if outcome == "timeout":
            await self._stall(settings.timeout_sleep)
        data = [{"object": "embedding", "index": i, "embedding": _embedding(t)} for i, t in enumerate(texts)]
        usage = {"prompt_tokens": sum(len(t.split()) for t in texts), "total_tokens": 0}
        return JSONResponse({"object": "list", "data": data, "model": body["model"], "usage": usage})

    @property
    def embedding_stats(self) -> dict[str, int]:
        """Requests to the embeddings endpoint so far, per outcome (``ok`` answered), and their total."""
        with self._lock:
            return {"requests": self._embedding_counts.total(), **self._embedding_counts}

    async def _get_stats(self, request: Request) -> JSONResponse:
        return JSONResponse(self.stats())

    async def _post_reset(self, request: Request) -> JSONResponse:
        self.reset()
        return JSONResponse(self.stats())


@dataclasses.dataclass(frozen=True)
class Raw:
    """A hostile reply: headers and body chunks sent as they are, a byte at a time when it trickles."""

    headers: dict[str, str]
    chunks: Callable[[], Iterator[bytes]]
    trickle: bool = False


CHAT, MODELS = "/v1/chat/completions", "/v1/models"
_JSON = {"content-type": "application/json"}


def _envelope(**fields: Any) -> bytes:
    """A chat completion's envelope around ``fields`` (the choices as given, or none)."""
    return json.dumps({"id": "chatcmpl-hostile", "object": "chat.completion", "created": 0, "model": "m",
                       **fields}).encode()  # fmt: skip


def _choice(content: Any) -> dict[str, Any]:
    return {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}


@functools.cache
def _bomb() -> bytes:
    """64 MiB of JSON whitespace, gzipped to about 64 KB."""
    return gzip.compress(b" " * 2**26, compresslevel=9)


def _on(path: str, reply: Callable[[], Raw]) -> Callable[[str], Raw | None]:
    return lambda asked: reply() if asked == path else None


def _once(body: bytes, headers: dict[str, str] = _JSON, *, trickle: bool = False) -> Raw:
    return Raw(headers, lambda: iter([body[i : i + 1] for i in range(len(body))] if trickle else [body]), trickle)


# mode -> the reply it gives a path (None: the path is answered as usual)
HOSTILE: dict[str, Callable[[str], Raw | None]] = {
    "trickle": _on(CHAT, lambda: _once(_envelope(choices=[_choice('{"answer": "trickled"}')]), trickle=True)),
    "models_gzip_bomb": _on(MODELS, lambda: _once(_bomb(), {**_JSON, "content-encoding": "gzip"})),
    "models_oversize": _on(MODELS, lambda: Raw(_JSON, lambda: (b" " * 2**20 for _ in range(24)))),
    "chat_gzip_bomb": _on(CHAT, lambda: _once(_bomb(), {**_JSON, "content-encoding": "gzip"})),
    "chat_oversize": _on(CHAT, lambda: Raw(_JSON, lambda: (b" " * 2**20 for _ in range(24)))),
    "null_content": _on(CHAT, lambda: _once(_envelope(choices=[_choice(None)]))),
    "empty_content": _on(CHAT, lambda: _once(_envelope(choices=[_choice("")]))),
    "no_choices": _on(CHAT, lambda: _once(_envelope())),
    "empty_choices": _on(CHAT, lambda: _once(_envelope(choices=[]))),
    "wrong_types": _on(CHAT, lambda: _once(_envelope(choices=[{"index": 0, "message": 5}]))),
    # text that is not UTF-8: as bytes, and as the lone surrogate a server that kept undecodable bytes escapes
    "bad_utf8": _on(CHAT, lambda: _once(_envelope(choices=[_choice("@@")]).replace(b"@@", b"\xff\xfe"))),
    "lone_surrogate": _on(CHAT, lambda: _once(_envelope(choices=[_choice("@@")]).replace(b"@@", b"\\udcff"))),
}


def _file_object(file_id: str, size: int, purpose: str) -> dict[str, Any]:
    return {"id": file_id, "object": "file", "bytes": size, "created_at": 0, "filename": "input.jsonl",
            "purpose": purpose, "status": "processed"}  # fmt: skip


def _error_response(status: int, error: str | tuple[str, str, str | None], headers: dict[str, str]) -> JSONResponse:
    message, kind, code = (error, "invalid_request_error", None) if isinstance(error, str) else error
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def _break_json(text: str) -> str:
    """Cut mid-way, as a model that ran off would; the leading brace keeps even a cut scalar invalid JSON."""
    cut = text[: len(text) // 2]
    return cut if text[:1] in ("{", "[") else "{" + cut


def _message_texts(messages: list[Any]) -> Iterator[str]:
    """Text of each message, whether `content` is a string or a list of content parts."""
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    yield part["text"]


def _looks_like_schema(value: Any) -> bool:
    """Tells a schema from an example instance in a prompt: a schema has `properties` or a schema type."""
    if not isinstance(value, dict):
        return False
    kind = value.get("type")
    return "properties" in value or kind in _SCHEMA_TYPES or isinstance(kind, list)


def _prompt_schema(messages: list[Any]) -> dict[str, Any] | None:
    """The last fenced ```json block in the messages that parses as a JSON schema."""
    blocks = [m.group(1) for text in _message_texts(messages) for m in _FENCED_JSON.finditer(text)]
    for block in reversed(blocks):
        with contextlib.suppress(ValueError):
            candidate = json.loads(block)
            if _looks_like_schema(candidate):
                return candidate
    return None


def _answer(body: dict[str, Any], settings: _Settings, rng: random.Random) -> tuple[str, str, str]:
    """The reply as (before, core, after): faults damage only the core, e.g. the JSON inside the prose."""
    if settings.mode == "responder":
        assert settings.responder is not None
        reply = settings.responder(body)
        return "", reply if isinstance(reply, str) else json.dumps(reply), ""
    response_format = body.get("response_format")
    if not isinstance(response_format, dict):
        response_format = {}
    kind = response_format.get("type")
    json_mode = kind in ("json_schema", "json_object")
    schema = None
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
    elif kind == "json_object":
        schema = response_format.get("schema")
    if isinstance(schema, dict):
        return "", _dump(_Sampler(schema, rng).sample(schema)), ""
    schema = _prompt_schema(body["messages"])
    if schema is not None:
        core = _dump(_Sampler(schema, rng).sample(schema))
        # JSON mode forbids prose; otherwise wrap it, to exercise the client's fenced-block extraction.
        return ("", core, "") if json_mode else ("Sure, here is the JSON you asked for.\n```json\n", core, "\n```")
    if json_mode:
        return "", _dump(_Sampler(_PLAIN_JSON_ANSWER, rng).sample(_PLAIN_JSON_ANSWER)), ""
    return "", " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))), ""


_TOKEN = re.compile(r"\s*\w+|\s*[^\w\s]|\s+$")
DIGIT_SPREAD = (0.6, 0.25, 0.15)  # a digit token's probability, then its two neighbours'


def _logprobs(content: str, top: int) -> dict[str, Any]:
    """Deterministic token log-probabilities: a digit token keeps 0.6 and gives 0.25 and 0.15 to its neighbour
    digits (upper first), any other token is certain."""

    def entry(token: str, p: float) -> dict[str, Any]:
        return {"token": token, "logprob": math.log(p), "bytes": list(token.encode())}

    tokens = []
    for token in _TOKEN.findall(content):
        text = token.strip()
        if text.isdigit() and len(text) == 1:
            d = int(text)
            neighbours = [n for n in (d + 1, d - 1, d + 2, d - 2) if 0 <= n <= 9][:2]
            spread = [(token, DIGIT_SPREAD[0])] + [
                (token.replace(text, str(n)), p) for n, p in zip(neighbours, DIGIT_SPREAD[1:], strict=True)
            ]
        else:
            spread = [(token, 1.0)]
        tokens.append({**entry(*spread[0]), "top_logprobs": [entry(t, p) for t, p in spread[:top]]})
    return {"content": tokens, "refusal": None}


EMBEDDING_DIM = 64


def _embedding(text: str) -> list[float]:
    vector = [0.0] * EMBEDDING_DIM
    for word in re.findall(r"\w+", text.lower()):
        vector[int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % EMBEDDING_DIM] += 1.0
    return vector


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Combine two schemas, unioning properties and required so allOf parts all hold."""
    merged = {**base, **extra}
    if "properties" in base and "properties" in extra:
        merged["properties"] = {**base["properties"], **extra["properties"]}
    if "required" in base and "required" in extra:
        merged["required"] = list(dict.fromkeys([*base["required"], *extra["required"]]))
    return merged


def _number_or_none(schema: dict[str, Any], key: str) -> float | None:
    value = schema.get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


class _Sampler:
    """Draws a random instance that validates against a JSON schema (the subset structured outputs use)."""

    def __init__(self, root: dict[str, Any], rng: random.Random) -> None:
        self.root = root
        self.rng = rng

    def resolve(self, schema: Any) -> Any:
        """Follow `$ref` (a JSON pointer into the root, e.g. #/$defs/X), keeping sibling keywords."""
        while isinstance(schema, dict) and "$ref" in schema:
            target: Any = self.root
            for part in schema["$ref"].lstrip("#").strip("/").split("/"):
                if part:
                    target = target[part.replace("~1", "/").replace("~0", "~")]
            schema = _merge(target, {k: v for k, v in schema.items() if k != "$ref"})
        return schema

    def sample(self, schema: Any, depth: int = 0) -> Any:
        schema = self.resolve(schema)
        if not isinstance(schema, dict):  # `true` / `{}`-like: anything goes
            return self.words(1, 3)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return self.rng.choice(schema["enum"])
        for union in ("anyOf", "oneOf"):
            if union in schema:
                options = [self.resolve(o) for o in schema[union]]
                if depth >= _MAX_DEPTH:
                    options = [o for o in options if isinstance(o, dict) and o.get("type") == "null"] or options
                rest = {k: v for k, v in schema.items() if k != union}
                choice = self.rng.choice(options)
                return self.sample(_merge(rest, choice) if isinstance(choice, dict) else choice, depth)
        if "allOf" in schema:
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                merged = _merge(merged, self.resolve(part))
            return self.sample(merged, depth)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = self.rng.choice(kind)
        if kind is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
        if kind == "object":
            return {name: self.sample(sub, depth + 1) for name, sub in schema.get("properties", {}).items()}
        if kind == "array":
            return self.array(schema, depth)
        if kind == "integer":
            return self.integer(schema)
        if kind == "number":
            return self.number(schema)
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "null":
            return None
        return self.string(schema)

    def array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        if "prefixItems" in schema:  # tuples
            return [self.sample(item, depth + 1) for item in schema["prefixItems"]]
        low = schema.get("minItems", 0 if depth >= _MAX_DEPTH else 1)
        high = max(low, schema.get("maxItems", low + 2))
        count = low if depth >= _MAX_DEPTH else self.rng.randint(low, high)
        items = schema.get("items", {})
        if not schema.get("uniqueItems"):
            return [self.sample(items, depth + 1) for _ in range(count)]
        unique: dict[str, Any] = {}
        for _ in range(count * 10):  # bounded: a small enum may not have `count` distinct values
            value = self.sample(items, depth + 1)
            unique.setdefault(json.dumps(value, sort_keys=True), value)
            if len(unique) == count:
                break
        return list(unique.values())

    def integer(self, schema: dict[str, Any]) -> int:
        low, high = _number_or_none(schema, "minimum"), _number_or_none(schema, "maximum")
        ex_low, ex_high = _number_or_none(schema, "exclusiveMinimum"), _number_or_none(schema, "exclusiveMaximum")
        lo = -(-low // 1) if low is not None else (ex_low // 1 + 1 if ex_low is not None else None)
        hi = high // 1 if high is not None else (-(-ex_high // 1) - 1 if ex_high is not None else None)
        lo, hi = _default_range(lo, hi)
        return self.rng.randint(int(lo), max(int(lo), int(hi)))

    def number(self, schema: dict[str, Any]) -> float:
        low = _number_or_none(schema, "minimum")
        high = _number_or_none(schema, "maximum")
        lo, hi = _default_range(
            low if low is not None else _number_or_none(schema, "exclusiveMinimum"),
            high if high is not None else _number_or_none(schema, "exclusiveMaximum"),
        )
        value = round(self.rng.uniform(lo, hi), 2)
        # Rounding can land on a bound, which an exclusive bound forbids; the midpoint satisfies either kind.
        return value if lo < value < hi else (lo + hi) / 2

    def string(self, schema: dict[str, Any]) -> str:
        fmt = _FORMATS.get(schema.get("format", ""))
        if fmt is not None:
            return fmt(self.rng)
        text = self.words(1, 4)
        while len(text) < schema.get("minLength", 1):
            text += " " + self.rng.choice(WORDS)
        max_length = schema.get("maxLength")
        if max_length is not None and len(text) > max_length:
            text = text[:max_length]
            if text.endswith(" "):  # the cut must not leave trailing whitespace
                text = text[:-1] + "s"
        return text

    def words(self, low: int, high: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(low, high)))


def _default_range(lo: float | None, hi: float | None) -> tuple[float, float]:
    """Fill a missing bound 100 away from the other one (0..100 when both are missing)."""
    if lo is None:
        lo = 0 if hi is None else hi - 100
    return lo, lo + 100 if hi is None else hi


async def _body(receive: Receive) -> bytes | None:
    """A request's whole body; None when the client went away before sending it."""
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the fake on 127.0.0.1 for manual runs and benchmarks, until SIGINT or SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m tests.fake_openai", description=main.__doc__)
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per chat request")
    parser.add_argument("--mode", choices=["random"], default="random", help="'responder' needs Python")
    parser.add_argument("--seed", type=int, default=0)
    for fault in FAULTS:
        parser.add_argument(f"--rate-{fault.replace('_', '-')}", type=float, default=0.0, metavar="P")
    parser.add_argument("--retry-after", type=float, default=0.05, help="seconds, sent on 429s")
    parser.add_argument("--timeout-sleep", type=float, default=30.0, help="stall of a 'timeout' fault")
    parser.add_argument("--rpm", type=int, default=0, help="requests per minute enforced (0: none)")
    args = vars(parser.parse_args(argv))

    stop_signals = {signal.SIGINT, signal.SIGTERM}
    # Blocked before the server thread starts (it inherits the mask), so only sigwait below receives them.
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    with FakeOpenAI(**args) as fake:
        print(fake.base_url, flush=True)
        signal.sigwait(stop_signals)


if __name__ == "__main__":
    main()
