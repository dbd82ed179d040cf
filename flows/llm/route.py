"""An endpoint as the gateway uses it: its SDK client, its bounds, and the request body it takes.

Chat completions go through the openai SDK's client as a plain POST (``client.post``), so the body the cache
key was computed from is exactly the body sent, whatever the endpoint's structured-output style; the SDK
still owns the connection pool, proxies, TLS, the default headers (``OpenAI-Organization``/``-Project``) and
turns every non-2xx answer into its typed exception, which ``retry.is_transient`` judges.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import httpx2
import openai

from ifsynth.flows.llm.breaker import Breaker
from ifsynth.flows.llm.limits import AdaptiveLimit, RateLimit
from ifsynth.flows.llm.local_model import LOCAL_BASE_URL, LocalModelTransport
from ifsynth.flows.llm.requests import Ask
from ifsynth.flows.llm.retry import ReplyRejected
from ifsynth.schemas.answers import Answer, strict_schema
from ifsynth.schemas.config import Endpoint, RunConfig
from ifsynth.schemas.errors import LogprobsUnsupported

# Hosts whose strict mode takes only a subset of JSON Schema (no string lengths); checked locally instead.
STRICT_SUBSET_HOSTS = ("openai.com", "openai.azure.com")
OPENAI_BASE_URL = "https://api.openai.com/v1"
OPENAI_DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
MAX_REPLY_BYTES = 16 * 1024 * 1024  # far above any chat completion with max_tokens set


def api_key(variable: str) -> str | None:
    """The key an endpoint's ``api_key_env`` names, from this process's environment: never from a config file,
    a flow parameter or the warehouse."""
    return os.environ.get(variable) or None


def public_url(url: str) -> str:
    """The base URL as stored and keyed: without credentials, without a trailing slash."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), parts.query, ""))


def endpoint_summaries(config: RunConfig) -> dict[str, dict[str, str]]:
    """Each role's endpoint as a run's fingerprint and a release's card show it: no credentials, no key."""
    return {
        role: {
            "base_url": public_url(config.endpoint_for(role).base_url),
            "structured_output": config.endpoint_for(role).structured_output,
        }
        for role in ("generator", "judge")
    }


class Route:
    """An endpoint with its client and its concurrency bound, shared by the roles that use it."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.base_url = public_url(endpoint.base_url)
        self.limit = AdaptiveLimit(endpoint.concurrency)
        self.rate = RateLimit(endpoint.rpm, endpoint.tpm)
        host = urlsplit(endpoint.base_url).hostname or ""
        self.string_lengths = not host.endswith(STRICT_SUBSET_HOSTS)
        self.local = endpoint.base_url == LOCAL_BASE_URL
        self.breaker = Breaker(self.base_url, endpoint.api_key_env)
        self._schemas: dict[type[Answer], dict[str, Any]] = {}
        self._client: openai.AsyncOpenAI | None = None

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The SDK client, built on first use (a route whose every ask is cached never needs one)."""
        if self._client is None:
            if self.local:
                http_client = httpx2.AsyncClient(transport=LocalModelTransport())
            else:
                connections = self.endpoint.concurrency
                http_client = openai.DefaultAioHttpClient(
                    limits=httpx2.Limits(max_connections=connections, max_keepalive_connections=connections),
                    follow_redirects=False,  # a redirected POST loses its body; the breaker names the target
                    headers={"Accept-Encoding": "identity"},
                    event_hooks={"response": [_guard]},
                )
            self._client = openai.AsyncOpenAI(
                base_url=self.endpoint.base_url,
                # any key does for the embedded model; a missing one is the endpoint's 401 to report
                api_key="local" if self.local else api_key(self.endpoint.api_key_env) or "none",
                max_retries=0,  # retries are the gateway's: retry.is_transient
                timeout=self.endpoint.timeout,
                http_client=http_client,
            )
        return self._client

    async def chat(self, payload: bytes) -> httpx2.Response:
        """One chat completion, its body already serialized (the bytes the cache key was computed from, sent as
        they are: the SDK neither copies nor re-encodes them); a non-2xx answer or a transport failure raises
        the SDK's exception."""
        try:
            return await self.client.post("/chat/completions", content=payload, cast_to=httpx2.Response)
        except openai.APITimeoutError as exc:
            refused = _refused(exc)
            if refused is None:
                raise
            # the aiohttp transport maps every connection failure to a connect *timeout*; say what happened
            raise openai.APIConnectionError(message=f"Connection error: {refused}", request=exc.request) from exc
        except ReplyRejected as exc:  # raised by _guard, past the SDK's own error mapping
            request = httpx2.Request("POST", f"{self.base_url}/chat/completions")
            raise openai.APIConnectionError(message=f"Reply refused: {exc}", request=request) from exc

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def schema(self, answer: type[Answer]) -> dict[str, Any]:
        """Built once per answer type: pydantic's schema generation is costly at thousands of requests."""
        if answer not in self._schemas:
            self._schemas[answer] = strict_schema(answer, string_lengths=self.string_lengths)
        return self._schemas[answer]

    def body(self, ask: Ask, model: str, seed: int, messages: list[dict[str, str]]) -> dict[str, Any]:
        """The request for ``ask`` in this endpoint's structured-output style; the cache key is its hash."""
        schema = self.schema(ask.schema)
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "temperature": ask.temperature,
            "max_tokens": ask.max_tokens,
            "seed": seed,
        }
        if ask.top_p is not None:
            body["top_p"] = ask.top_p
        if ask.logprobs is not None:
            if self.local:
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
            body["messages"] = [*messages[:-1], {**messages[-1], "content": messages[-1]["content"] + described}]
        return body


class _Capped(httpx2.AsyncByteStream):
    """A response body read through a byte budget: reading past it raises instead of filling memory."""

    def __init__(self, stream: Any, limit: int) -> None:
        self._stream, self._left = stream, limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            self._left -= len(chunk)
            if self._left < 0:
                raise ReplyRejected(f"a reply over {MAX_REPLY_BYTES // 2**20} MB")
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


async def _guard(response: httpx2.Response) -> None:
    """Refuse, before reading it, a reply that could not be a completion: a compressed body we did not accept
    (a small gzip can inflate to gigabytes) or one over MAX_REPLY_BYTES; cap the rest as it is read."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise ReplyRejected(f"a {encoding}-compressed reply, though only identity was accepted")
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_REPLY_BYTES:
        raise ReplyRejected(f"a reply of {int(length) // 2**20} MB")
    response.stream = _Capped(response.stream, MAX_REPLY_BYTES)  # type: ignore[assignment]


def _refused(exc: BaseException) -> aiohttp.ClientConnectorError | None:
    """The failure to connect (refused, unreachable, no such host) behind an exception, if there is one."""
    cause = exc.__cause__ or exc.__context__
    while cause is not None:
        if isinstance(cause, aiohttp.ClientConnectorError) and not isinstance(cause, TimeoutError):
            return cause
        cause = cause.__cause__ or cause.__context__
    return None
