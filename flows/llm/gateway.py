"""The LLM gateway: the one place that owns the openai clients and decides retries.

Every stage hands it ``Ask``s and gets ``Reply``s back. On the way it looks up the warehouse cache, bounds
concurrency per endpoint, retries transient failures (429, 5xx, timeouts, connection errors; honouring
Retry-After), records every attempt in ``llm_calls``, validates the answer against its pydantic model and
re-asks a bounded number of times when it does not parse.
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import json
import os
import random
import re
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple
from urllib.parse import urlsplit, urlunsplit

import httpx2
import openai
from pydantic import ValidationError
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

from ifsynth.flows.exceptions import BudgetExhausted
from ifsynth.flows.llm import batch
from ifsynth.flows.llm.limits import AdaptiveLimit, Budget, RateLimit
from ifsynth.flows.llm.local_model import LOCAL_BASE_URL, LocalModelTransport
from ifsynth.flows.llm.wire import ChatWire, Posted
from ifsynth.prompts.registry import Rendered
from ifsynth.schemas.answers import Answer, strict_schema
from ifsynth.schemas.config import Endpoint, Role, RunConfig
from ifsynth.schemas.errors import IfsynthError
from ifsynth.schemas.records import CallRecord
from ifsynth.warehouse.keys import cache_key, canonical_request
from ifsynth.warehouse.store import Warehouse

MAX_REASKS = 2
CHUNK, MAX_CHUNK = 256, 4096  # asks looked up in the cache at a time, first and at most (see Gateway.ask_many)
SLICE = 32  # asks keyed, or started, before the event loop is given back
MAX_RETRY_AFTER = 120.0
RETRY_STATUSES = {408, 409, 429}
# Hosts whose strict mode takes only a subset of JSON Schema (no string lengths); checked locally instead.
STRICT_SUBSET_HOSTS = ("openai.com", "openai.azure.com")


@dataclass(frozen=True)
class Ask:
    """One structured question a stage wants answered."""

    prompt: Rendered
    schema: type[Answer]
    role: Role
    temperature: float
    max_tokens: int
    sample_index: int = 0
    logprobs: int | None = None  # ask for this many top log-probabilities per answer token


class Request(NamedTuple):
    """A request ready to send: its cache key and its body."""

    key: str
    body: dict[str, Any]


@dataclass
class Reply:
    status: Literal["ok", "parse_error", "failed"]
    value: Answer | None = None
    keys: list[str] = field(default_factory=list)
    error: str | None = None
    raw: str | None = None
    cached: int = 0
    sent: int = 0
    logprobs: list[dict[str, Any]] | None = None  # per answer token: token, logprob, top_logprobs


def public_url(url: str) -> str:
    """The base URL as stored and keyed: without credentials, without a trailing slash."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), parts.query, ""))


def is_transient(exc: BaseException) -> bool:
    """The single retry decision: connection trouble, timeouts, 408/409/429 and 5xx; never other 4xx."""
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRY_STATUSES or exc.status_code >= 500
    return False


def retry_after(exc: BaseException | None) -> float | None:
    """Seconds the server asked us to wait, from ``retry-after-ms`` or ``Retry-After`` (seconds or a date)."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    headers = response.headers
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def _pause(exc: BaseException | None, attempt: int) -> float:
    """Seconds to wait after a failed attempt: what the server asked, else exponential backoff with jitter."""
    asked = retry_after(exc)
    if asked is not None:
        return min(asked, MAX_RETRY_AFTER)
    return min(20.0, 2.0 ** (attempt - 1) + random.uniform(0, 1))


class _Wait:
    """Tenacity's wait, counting the attempts made before it took over."""

    def __init__(self, before: int = 0) -> None:
        self.before = before

    def __call__(self, state: Any) -> float:
        return _pause(state.outcome.exception() if state.outcome else None, state.attempt_number + self.before)


_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


def parse_answer(text: str | None, schema: type[Answer]) -> Answer:
    """Validate an answer; tolerate prose or code fences around the JSON object (style ``none``)."""
    if not text or not text.strip():
        raise ValueError("empty answer")
    text = text.strip()
    candidates = [text]
    candidates += [match.group(1) for match in _FENCE.finditer(text)]
    if "{" in text and "}" in text:
        candidates.append(text[text.index("{") : text.rindex("}") + 1])
    errors: list[ValidationError] = []
    for candidate in candidates:
        try:
            return schema.model_validate_json(candidate)
        except ValidationError as exc:
            errors.append(exc)
    # Report the most telling failure: a schema mismatch beats "invalid JSON" from a prose candidate.
    details = min((exc.errors()[0] for exc in errors), key=lambda e: e["type"] == "json_invalid")
    where = ".".join(str(part) for part in details.get("loc", ()))
    raise ValueError(f"{details['msg']}{f' at `{where}`' if where else ''}")


def _proxied(url: str) -> bool:
    """Whether the environment sends this URL through a proxy; such endpoints take the SDK's path, which
    honours proxies (the lean chat path connects directly)."""
    host = urlsplit(url).hostname or ""
    if host in ("localhost", "127.0.0.1", "::1"):  # loopback never goes through a proxy
        return False
    proxies = urllib.request.getproxies()
    return bool(proxies.get(urlsplit(url).scheme) or proxies.get("all")) and not urllib.request.proxy_bypass(host)


class Route:
    """An endpoint with its client and its concurrency bound, shared by the roles that use it."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.base_url = public_url(endpoint.base_url)
        self.limit = AdaptiveLimit(endpoint.concurrency)
        self.rate = RateLimit(endpoint.rpm, endpoint.tpm)
        host = urlsplit(endpoint.base_url).hostname or ""
        self.string_lengths = not host.endswith(STRICT_SUBSET_HOSTS)
        self._schemas: dict[type[Answer], dict[str, Any]] = {}
        self.local = endpoint.base_url == LOCAL_BASE_URL
        # any key does for the embedded model
        self._api_key = "local" if self.local else os.environ.get(endpoint.api_key_env) or "none"
        self._client: openai.AsyncOpenAI | None = None
        self.wire = None
        if not self.local and not _proxied(endpoint.base_url):
            self.wire = ChatWire(
                lambda: self.client,
                url=str(httpx2.URL(endpoint.base_url)).rstrip("/") + "/chat/completions",
                api_key=self._api_key,
                connections=max(endpoint.concurrency * 2, 16),
                timeout=endpoint.timeout,
            )

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The SDK client, built on first use: its TLS context costs tens of milliseconds per gateway, and
        the chat path of a remote endpoint never needs it (only errors, files and batches do)."""
        if self._client is None:
            if self.local:
                http_client = httpx2.AsyncClient(transport=LocalModelTransport())
            else:
                connections = max(self.endpoint.concurrency * 2, 16)
                http_client = openai.DefaultAsyncHttpxClient(
                    limits=httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
                )
            self._client = openai.AsyncOpenAI(
                base_url=self.endpoint.base_url,
                api_key=self._api_key,
                max_retries=0,
                timeout=self.endpoint.timeout,
                http_client=http_client,
            )
        return self._client

    async def chat(self, body: dict[str, Any], payload: str) -> Posted:
        """One chat completion (``payload`` is ``body`` serialized); non-2xx answers and transport failures
        raise the SDK's exceptions."""
        if self.wire is not None:
            return await self.wire.post(payload.encode())
        raw = await self.client.post("/chat/completions", body=body, cast_to=httpx2.Response)
        return Posted(raw.status_code, raw.headers, raw.content)

    async def close(self) -> None:
        if self.wire is not None:
            await self.wire.close()
        if self._client is not None:
            await self._client.close()
            self._client = None

    def schema(self, answer: type[Answer]) -> dict[str, Any]:
        """Built once per answer type: pydantic's schema generation is costly at thousands of requests."""
        if answer not in self._schemas:
            self._schemas[answer] = strict_schema(answer, string_lengths=self.string_lengths)
        return self._schemas[answer]

    def body(self, ask: Ask, model: str, seed: int, messages: list[dict[str, str]]) -> dict[str, Any]:
        schema = self.schema(ask.schema)
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "temperature": ask.temperature,
            "max_tokens": ask.max_tokens,
            "seed": seed,
        }
        if ask.logprobs is not None:
            if self.endpoint.base_url == LOCAL_BASE_URL:
                raise LogprobsUnsupported("the embedded local model returns no token log-probabilities")
            body["logprobs"], body["top_logprobs"] = True, ask.logprobs
        style = self.endpoint.structured_output
        if style == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": ask.schema.__name__, "schema": schema, "strict": True},
            }
        elif style == "json_object":
            body["response_format"] = {"type": "json_object", "schema": schema}
        else:
            described = (
                "\n\nReply with only a JSON object that follows this JSON schema:\n```json\n"
                + json.dumps(schema, sort_keys=True)
                + "\n```"
            )
            messages = [*messages[:-1], {**messages[-1], "content": messages[-1]["content"] + described}]
            body["messages"] = messages
        return body


class Gateway:
    """Answers asks for one run, one stage at a time; open it with ``async with``."""

    def __init__(
        self, config: RunConfig, warehouse: Warehouse, run_id: str, *, seed: int = 0, budget: Budget | None = None
    ) -> None:
        self.config = config
        self.warehouse = warehouse
        self.run_id = run_id
        self.seed = seed
        self.budget = budget
        self._routes: dict[Endpoint, Route] = {}
        self._by_role: dict[Role, Route] = {}
        # Call ids: a random prefix per gateway and a counter, unique without a system call per request.
        self._call_prefix = uuid.uuid4().hex[:20]
        self._calls = itertools.count()

    async def __aenter__(self) -> Gateway:
        for role in ("generator", "judge"):
            endpoint = self.config.endpoint_for(role)
            if endpoint not in self._routes:
                self._routes[endpoint] = Route(endpoint)
            self._by_role[role] = self._routes[endpoint]
        return self

    async def __aexit__(self, *_: object) -> None:
        for route in self._routes.values():
            await route.close()
        self._routes.clear()
        self._by_role.clear()

    def route(self, role: Role) -> Route:
        return self._by_role[role]

    async def ask_many(self, stage: str, asks: Sequence[Ask], on_done: Callable[[], None] | None = None) -> list[Reply]:
        """Answer every ask, cached ones first; concurrency is bounded per endpoint.

        Asks are keyed and looked up in the cache a chunk at a time, the next chunk while half of one still
        waits to be sent: preparing holds the event loop (answers that arrive meanwhile wait), so a whole
        page prepared up front would stall the first requests. The first chunk is small, so requests leave
        at once; each next one is twice as large, up to MAX_CHUNK, because a lookup scans every call in the
        warehouse whatever the number of keys. Lookups run in a worker thread: DuckDB scans without the GIL,
        so answers keep being handled meanwhile. In batch mode the whole page is prepared first: its uncached
        requests go out as one batch."""
        stopped: list[BudgetExhausted] = []
        size = len(asks) if self.config.batch else CHUNK
        bound = max(route.limit.maximum for route in self._routes.values())
        low = bound  # the next chunk is prepared once at most this many asks are outstanding
        room = asyncio.Event()
        outstanding = 0

        async def one(ask: Ask, request: Request, cache: dict[str, Any]) -> Reply | None:
            nonlocal outstanding
            try:
                reply = await self._answer(stage, ask, request, cache)
            except BudgetExhausted as exc:
                stopped.append(exc)  # the others finish what they reserved: those answers land in the cache
                return None
            finally:
                outstanding -= 1
                if outstanding <= low:
                    room.set()
            if on_done is not None:
                on_done()
            return reply

        tasks: list[asyncio.Future[Reply | None]] = []
        start = 0
        while start < len(asks):
            if outstanding > low:
                room.clear()
                await room.wait()
            part = asks[start : start + size]
            start += len(part)
            size = min(size * 2, MAX_CHUNK)
            low = bound + size // 2
            first: list[Request] = []
            for at in range(0, len(part), SLICE):  # answers that arrive meanwhile are handled between slices
                first += [self._request(ask, list(ask.prompt.messages), 0) for ask in part[at : at + SLICE]]
                await asyncio.sleep(0)
            keys = [request.key for request in first]
            cache = await asyncio.to_thread(self.warehouse.cached, keys)
            if self.config.batch:
                missing = {r.key: (ask, r.body) for ask, r in zip(part, first, strict=True) if r.key not in cache}
                if missing and await batch.fetch(self, stage, missing):
                    cache = await asyncio.to_thread(self.warehouse.cached, keys)
            outstanding += len(part)
            for at in range(0, len(part), SLICE):
                pairs = zip(part[at : at + SLICE], first[at : at + SLICE], strict=True)
                tasks += [asyncio.ensure_future(one(ask, request, cache)) for ask, request in pairs]
                await asyncio.sleep(0)  # let these requests go out
        replies = await asyncio.gather(*tasks)
        if stopped:
            raise stopped[0]
        return [reply for reply in replies if reply is not None]

    def _request(self, ask: Ask, messages: list[dict[str, str]], reask: int) -> Request:
        route = self.route(ask.role)
        # A re-ask samples with another seed: the same seed could give back the same unusable answer, and
        # since the seed is keyed, two re-asks with identical messages are still two requests.
        body = route.body(ask, self.config.model_for(ask.role), self.seed + reask, messages)
        return Request(cache_key(route.base_url, body, ask.sample_index), body)

    async def _answer(self, stage: str, ask: Ask, request: Request, cache: dict[str, dict[str, Any]]) -> Reply:
        reply = Reply(status="failed")
        for reask in range(MAX_REASKS + 1):
            key = request.key
            reply.keys.append(key)
            hit = cache.get(key) if reask == 0 else self.warehouse.cached([key]).get(key)
            if hit is not None:
                reply.cached += 1
                text, finish = hit["response"], hit["finish_reason"]
                reply.logprobs = json.loads(hit["logprobs"]) if hit.get("logprobs") else None
            else:
                try:
                    text, finish, reply.logprobs, attempts = await self._send(stage, ask, request)
                    reply.sent += attempts
                except _Failed as failure:
                    reply.sent += failure.attempts
                    reply.status, reply.error = "failed", failure.reason
                    return reply
            reply.raw = text
            try:
                reply.value = parse_answer(text, ask.schema)
                reply.status, reply.error = "ok", None
                return reply
            except ValueError as exc:
                cut = " (the answer was cut off at max_tokens)" if finish == "length" else ""
                reply.status, reply.error = "parse_error", f"{exc}{cut}"
            messages = [
                *ask.prompt.messages,
                {"role": "assistant", "content": (text or "")[:4000]},
                {
                    "role": "user",
                    "content": f"That answer could not be used: {reply.error}. "
                    "Reply again with only the JSON object, complete and valid.",
                },
            ]
            request = self._request(ask, messages, reask + 1)
        return reply

    async def _send(
        self, stage: str, ask: Ask, request: Request
    ) -> tuple[str | None, str | None, list[dict[str, Any]] | None, int]:
        """Send with retries; every attempt becomes a row in llm_calls.

        The first attempt runs outside tenacity: most requests succeed at once, and its bookkeeping costs
        more CPU than the request itself at thousands of requests a second."""
        route = self.route(ask.role)
        key, body = request.key, request.body
        payload = canonical_request(body)  # serialized once: sent as is and stored as is
        attempts = 1
        try:
            try:
                return (*await self._attempt(stage, ask, key, body, payload, route, attempts), attempts)
            except (openai.APIStatusError, openai.APIConnectionError) as exc:
                if not is_transient(exc) or route.endpoint.max_attempts == 1:
                    raise
                await asyncio.sleep(_pause(exc, attempts))
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(route.endpoint.max_attempts - 1),
                wait=_Wait(before=1),
                retry=retry_if_exception(is_transient),
                reraise=True,
            ):
                with attempt:
                    attempts += 1
                    return (*await self._attempt(stage, ask, key, body, payload, route, attempts), attempts)
        except openai.APIStatusError as exc:
            raise _Failed(f"HTTP {exc.status_code}: {_short(exc)}", attempts) from None
        except openai.APIConnectionError as exc:
            raise _Failed(f"{type(exc).__name__}: {_short(exc)}", attempts) from None
        raise AssertionError("unreachable")

    async def _attempt(
        self, stage: str, ask: Ask, key: str, body: dict[str, Any], payload: str, route: Route, attempt: int
    ) -> tuple[str | None, str | None, list[dict[str, Any]] | None]:
        record = {
            "call_id": f"{self._call_prefix}{next(self._calls):012x}",
            "key": key,
            "run_id": self.run_id,
            "stage": stage,
            "template": ask.prompt.template,
            "template_hash": ask.prompt.template_hash,
            "base_url": route.base_url,
            "model": body["model"],
            "request": body,
            "attempt": attempt,
        }
        estimate = len(payload) / 4  # prompt tokens, roughly: what rate limits and budgets reserve up front
        reserved = 0.0
        if self.budget is not None:
            reserved = self.budget.reserve(self._cost(body["model"], int(estimate), ask.max_tokens))
        await route.rate.acquire(estimate + ask.max_tokens)
        async with route.limit:
            started = time.perf_counter()
            try:
                raw = await route.chat(body, payload)
            except (openai.APIStatusError, openai.APIConnectionError) as exc:
                status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
                if isinstance(exc, openai.APIStatusError):
                    route.rate.observe(exc.response.headers)
                if self.budget is not None:
                    self.budget.settle(reserved, 0.0 if status is not None else None)
                if status == 429:
                    route.limit.throttled()
                self.warehouse.add_call(
                    CallRecord(
                        **record,
                        latency_ms=(time.perf_counter() - started) * 1000,
                        http_status=status,
                        error=f"{type(exc).__name__}: {_short(exc)}",
                    ),
                    request_json=payload,
                )
                raise
            latency = (time.perf_counter() - started) * 1000
        route.limit.succeeded()
        route.rate.observe(raw.headers)
        text, finish, prompt_tokens, completion_tokens, logprobs = _completion(raw)
        cost = self._cost(body["model"], prompt_tokens, completion_tokens)
        if self.budget is not None:
            self.budget.settle(reserved, cost)
        self.warehouse.add_call(
            CallRecord(
                **record,
                response=text,
                finish_reason=finish,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                latency_ms=latency,
                cost=cost,
                http_status=raw.status,
                logprobs=logprobs,
            ),
            request_json=payload,
        )
        return text, finish, logprobs

    def _cost(self, model: str, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
        price = self.config.prices.get(model)
        if price is None or prompt_tokens is None or completion_tokens is None:
            return None
        return (prompt_tokens * price.input + completion_tokens * price.output) / 1e6


class LogprobsUnsupported(IfsynthError):
    """Token log-probabilities were asked of an endpoint that cannot give them."""

    exit_code = 2


def _token_logprobs(choice: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The answer's tokens with their log-probabilities and alternatives, when the endpoint returned them."""
    content = (choice.get("logprobs") or {}).get("content")
    if not content:
        return None
    return [
        {
            "token": t.get("token"),
            "logprob": t.get("logprob"),
            "top_logprobs": [
                {"token": a.get("token"), "logprob": a.get("logprob")} for a in t.get("top_logprobs") or []
            ],
        }
        for t in content
    ]


def _completion(
    response: Posted,
) -> tuple[str | None, str | None, int | None, int | None, list[dict[str, Any]] | None]:
    """Text, finish reason, token counts and token log-probabilities of a chat completion. A body that is not
    one is kept as the text, so it fails parsing on the record (and is re-asked) instead of crashing the run."""
    try:
        data = json.loads(response.content)
        choice = (data.get("choices") or [{}])[0]
        message, usage = choice.get("message") or {}, data.get("usage") or {}
        return (
            message.get("content"),
            choice.get("finish_reason"),
            usage.get("prompt_tokens"),
            usage.get("completion_tokens"),
            _token_logprobs(choice),
        )
    except (ValueError, AttributeError, TypeError, IndexError):
        return response.content.decode("utf-8", "replace"), None, None, None, None


class _Failed(Exception):
    def __init__(self, reason: str, attempts: int) -> None:
        super().__init__(reason)
        self.reason, self.attempts = reason, attempts


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300]
