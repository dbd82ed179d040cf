"""An endpoint as the gateway uses it: its SDK client, its bounds, and the request body it takes.

Chat completions are a plain POST of bytes already serialized, so the body the cache key was computed from is
exactly the body sent, whatever the endpoint's structured-output style. The openai SDK's client still makes the
request's URL, headers (the key, ``OpenAI-Organization``/``-Project``, its own) and timeouts, once per route;
its HTTP client picks, once per route, the transport for that URL (the proxy the environment names, its TLS
context), and that transport's aiohttp session (connection pool) sends every request, with the arguments the
transport itself would pass; each failure is mapped by the transport's own table to the SDK's typed exception,
which ``retry.is_transient`` judges. What is skipped is per-request machinery: the SDK's (request options
copied and validated, headers merged, the URL parsed again, retries it is told not to make) and the httpx
client's around the transport (request and response objects, headers decoded, hooks, cookies, redirects it is
told not to follow). ``bench.gateway --latency 0`` measured each at about a third of the client's CPU per
request (bench/README.md).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import ipaddress
import json
import os
import re
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import httpx2

from ifsynth.flows.llm import aiohttp, loop, openai
from ifsynth.flows.llm.breaker import Breaker
from ifsynth.flows.llm.clock import SYSTEM_CLOCK, Clock
from ifsynth.flows.llm.limits import AdaptiveLimit, RateLimit
from ifsynth.flows.llm.local_model import LOCAL_BASE_URL, serve, weights
from ifsynth.flows.llm.requests import Ask
from ifsynth.flows.llm.retry import ReplyRejected, rejected
from ifsynth.flows.llm.secrets import remember
from ifsynth.schemas.answers import Answer, fit_strings, strict_schema
from ifsynth.schemas.config import Endpoint, RunConfig
from ifsynth.schemas.errors import EndpointDown

if TYPE_CHECKING:
    from openai.types import CreateEmbeddingResponse

# Hosts whose strict mode takes only a subset of JSON Schema (no string lengths); checked locally instead.
STRICT_SUBSET_HOSTS = ("openai.com", "openai.azure.com")
OPENAI_BASE_URL = "https://api.openai.com/v1"
OPENAI_DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
MAX_REPLY_BYTES = 16 * 1024 * 1024  # far above any chat completion with max_tokens set
# `code` alone: how hosted functions (Azure's, say) take their key; `encode`, `zipcode` ... stay
_KEYLIKE = re.compile(r"key|token|secret|passw|sig|auth|credential|^code$", re.IGNORECASE)


def api_key(variable: str) -> str | None:
    """The key an endpoint's ``api_key_env`` names, from this process's environment: never from a config file,
    a flow parameter or the warehouse."""
    return os.environ.get(variable) or None


def public_url(url: str) -> str:
    """The base URL as stored, printed and keyed: without credentials, key-like query parameters (``key``,
    ``token``, ``sig`` ...; ``api-version`` stays) or a trailing slash."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not _KEYLIKE.search(k)])
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), query, ""))


def url_secrets(url: str) -> list[str]:
    """What ``public_url`` removes: the URL's user, password and key-like query values."""
    parts = urlsplit(url)
    found = [parts.username or "", parts.password or ""]
    found += [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if _KEYLIKE.search(k)]
    return [secret for secret in found if len(secret) >= 4]


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with every secret replaced, for error texts that are stored and printed (a server may echo the
    key it was sent)."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def error_text(exc: BaseException, scrub: Callable[[str], str]) -> str:
    """An endpoint's error as stored and shown: one line, without the secrets ``scrub`` removes (a server may
    echo the key it was sent), scrubbed before it is cut so no part of a secret is left."""
    return scrub(" ".join(str(exc).split()))[:300]


def not_http(exc: aiohttp.ClientResponseError, scrub: Callable[[str], str]) -> ReplyRejected:
    """Bytes that are not an HTTP reply (a bad status line, a malformed header), which neither the SDK nor its
    aiohttp transport maps, as the refusal of a reply. The bytes quoted are the server's: a secret it echoed
    is scrubbed, and the line is cut. aiohttp's error stays its cause, for ``--debug``'s traceback."""
    refusal = ReplyRejected(f"not an HTTP reply ({scrub(' '.join(exc.message.split()))[:160]})")
    refusal.__cause__ = exc
    return refusal


def _addressing(url: str, key: str | None) -> dict[str, Any]:
    """How an SDK client reaches ``url``: the bare URL, its query as the client's default query (the SDK would
    append paths after it), and ``user:password@`` as HTTP Basic auth (aiohttp refuses credentials in the URL
    beside an Authorization header), sent only when no key is: a key goes as the bearer token, and a request
    carries one Authorization header."""
    parts = urlsplit(url)
    headers = None
    if parts.username is not None and key is None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers = {"Authorization": "Basic " + base64.b64encode(pair).decode()}
    return {
        "base_url": urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", "")),
        "default_query": dict(parse_qsl(parts.query)) or None,
        "default_headers": headers,
    }


def _secrets(url: str, key: str | None) -> list[str]:
    """What error texts about this endpoint must not show: the key sent and the URL's secrets; remembered for
    every log record and unexpected error of the process (``flows.llm.secrets``)."""
    found = [secret for secret in (key or "", *url_secrets(url)) if len(secret) >= 4]
    remember(found)
    return found


def is_loopback(url: str) -> bool:
    """Whether every address the URL's host resolves to is this machine's: decided on the addresses, not the
    spelling (``127.example.net`` may be anywhere); a host that does not resolve is not this machine."""
    host = urlsplit(url).hostname or ""
    try:
        found = [str(info[4][0]).partition("%")[0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)]
        return bool(found) and all(ipaddress.ip_address(address).is_loopback for address in found)
    except (OSError, UnicodeError, ValueError):
        return False


_said: set[str] = set()


def sendable_key(base_url: str, variable: str, notify: Callable[[str], None]) -> str | None:
    """The key to send to ``base_url``: over plain http only to this machine's own addresses (to another it
    would cross the network in clear); the default variable's key going over https to another host than
    OpenAI's is said once per process."""
    key = api_key(variable)
    if key is None or base_url == LOCAL_BASE_URL:
        return key
    where = public_url(base_url)
    if urlsplit(base_url).scheme == "http":
        if is_loopback(base_url):
            return key
        _say_once(notify, f"not sending {variable} to {where}: plain http to another machine; use https")
        return None
    host = urlsplit(base_url).hostname or ""
    if variable == DEFAULT_KEY_ENV and not host.endswith("openai.com"):
        _say_once(notify, f"sending {variable} to {where}, which is not OpenAI's; set api_key_env to send another")
    return key


def key_advice(variable: str, base_url: str, sent: str | None) -> str:
    """What a 401 or 403 asks of the user, given the key ``sendable_key`` returned: to check the key sent, or
    why none was (a key it returns no key for is one it held back), and the URL's credentials if they went
    instead."""
    if base_url == LOCAL_BASE_URL:
        return "the embedded model's server refused it (it takes any key): rerun with --debug and report it"
    if sent is not None:
        return f"check the key in {variable} (and that it may use this model)"
    why = "is not set or empty"
    if api_key(variable) is not None:
        why = "was held back: it goes over plain http only to this machine; give an https URL"
    if urlsplit(base_url).username is not None:
        return f"check the user and password in the base URL, sent as HTTP Basic auth ({variable} {why})"
    return f"{variable} {why}"


def _say_once(notify: Callable[[str], None], message: str) -> None:
    if message not in _said:
        _said.add(message)
        notify(message)


def endpoint_summaries(config: RunConfig) -> dict[str, dict[str, Any]]:
    """Each role's endpoint as a run's fingerprint and a release's card show it: no credentials, no key."""
    summaries = {}
    for role in ("generator", "judge"):
        endpoint = config.endpoint_for(role)
        summary: dict[str, Any] = {
            "base_url": public_url(endpoint.base_url),
            "structured_output": endpoint.structured_output,
        }
        if endpoint.members:
            summary["members"] = [public_url(member.base_url) for member in endpoint.members]
        summaries[role] = summary
    return summaries


def preflight(endpoint: Endpoint, notify: Callable[[str], None] = lambda _: None) -> None:
    """Before Prefect starts and before any chat request: the embedded model is installed, or the endpoint can
    be reached and takes the key (``GET /models``). Anything else it answers (no /models, a redirect, a
    proxy's page) is left to the run, whose breaker judges real requests."""
    if endpoint.base_url == LOCAL_BASE_URL:
        weights(endpoint.local_model)
        return
    if endpoint.members:
        _preflight_pool(endpoint, notify)
        return
    loop.run(_look(endpoint, notify), tune_gc=False)  # a stop signal ends the look as it ends a stage


async def _look(endpoint: Endpoint, notify: Callable[[str], None]) -> None:
    """``GET /models`` with the route's address, key and reply guards, under one deadline for the whole reply.
    Sent with httpx alone, not the SDK: a run whose every answer is cached then never imports the SDK, and the
    look needs nothing of it but the status and the body's size."""
    key = sendable_key(endpoint.base_url, endpoint.api_key_env, notify)
    where, secrets = public_url(endpoint.base_url), _secrets(endpoint.base_url, key)
    addressing = _addressing(endpoint.base_url, key)
    headers = {"Accept-Encoding": "identity", **(addressing["default_headers"] or {})}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    for variable, header in (("OPENAI_ORG_ID", "OpenAI-Organization"), ("OPENAI_PROJECT_ID", "OpenAI-Project")):
        if os.environ.get(variable):  # as the SDK sends them: a key may be refused under the wrong organization
            headers[header] = os.environ[variable]
    within = min(endpoint.timeout, 15.0)
    try:
        async with (
            httpx2.AsyncClient(
                verify=tls(),
                headers=headers,
                params=addressing["default_query"],
                timeout=within,
                follow_redirects=False,
                event_hooks={"response": [_guard]},
            ) as client,
            asyncio.timeout(within),
        ):
            response = await client.get(addressing["base_url"].rstrip("/") + "/models")
            await response.aread()
    except (TimeoutError, httpx2.TimeoutException):
        return  # slow to list models is not down; the run's own timeouts decide
    except Exception as exc:
        refusal = rejected(exc)
        if refusal is not None:
            raise EndpointDown(f"endpoint {where} sent a reply ifsynth refuses ({refusal}) to GET /models") from None
        if isinstance(exc, httpx2.TransportError):
            said = scrub(" ".join(str(exc.__cause__ or exc).split()) or type(exc).__name__, secrets)
            raise EndpointDown(
                f"endpoint {where} cannot be reached ({said[:160]}): check that URL and that the server is up"
            ) from None
        return  # whatever else: the run's breaker decides
    if response.status_code in (401, 403):
        advice = key_advice(endpoint.api_key_env, endpoint.base_url, key)
        raise EndpointDown(f"endpoint {where} answered {response.status_code}: {advice}")
    # anything else it answers (no /models, a redirect, a proxy's page) is left to the run's breaker


def tls() -> ssl.SSLContext:
    """The TLS context this process's clients verify with, as httpx makes it (``SSL_CERT_FILE``/``SSL_CERT_DIR``
    when set, else the system's certificates). Reading the certificates costs 30-140 ms a time (measured), once
    for the look and once for the SDK's client, the second at a run's first request; made once instead, and in
    the warm process before it forks, so that a run it serves reads none. A changed certificate file or folder
    makes a new one."""
    paths = ssl.get_default_verify_paths()
    chosen = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    places = (*chosen, paths.openssl_cafile, paths.openssl_capath)
    return _tls(tuple(_stamp(place) for place in places))


def _stamp(place: str | None) -> tuple[str, int | None, int | None] | None:
    if not place:
        return None
    try:
        found = os.stat(place)
    except OSError:
        return (place, None, None)
    return (place, found.st_mtime_ns, found.st_size)


@functools.lru_cache(maxsize=1)
def _tls(stamps: tuple[tuple[str, int | None, int | None] | None, ...]) -> ssl.SSLContext:
    """``stamps`` only keys the cache: httpx reads the same places itself."""
    return httpx2.create_ssl_context()


def _preflight_pool(endpoint: Endpoint, notify: Callable[[str], None]) -> None:
    """A pool may start with members down (they are tried again during the run), not with all of them."""
    down = []
    for member in endpoint.members:
        try:
            preflight(endpoint.model_copy(update={"base_url": member.base_url, "members": ()}), notify)
        except EndpointDown as exc:
            down.append(exc)
    if len(down) == len(endpoint.members):
        raise EndpointDown(f"no member of the pool can be reached; the first: {down[0]}")
    for failure in down:
        notify(f"{failure}; the run starts without it and tries it again later")


class Route:
    """An endpoint with its client and its concurrency bound, shared by the roles that use it."""

    def __init__(
        self, endpoint: Endpoint, notify: Callable[[str], None] = lambda _: None, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.endpoint = endpoint
        self.clock = clock
        self.base_url = public_url(endpoint.base_url)
        self.key = sendable_key(endpoint.base_url, endpoint.api_key_env, notify)
        self.secrets = _secrets(endpoint.base_url, self.key)
        self.local = endpoint.base_url == LOCAL_BASE_URL
        # the embedded server queues what its slots cannot take; more in flight would only run into timeouts
        self.limit = AdaptiveLimit(endpoint.local_parallel if self.local else endpoint.concurrency, clock=clock)
        self.rate = RateLimit(endpoint.rpm, endpoint.tpm, clock=clock)
        host = urlsplit(endpoint.base_url).hostname or ""
        self.string_lengths = not host.endswith(STRICT_SUBSET_HOSTS)
        self.address = self.base_url  # where requests go: the embedded server's loopback port once started
        self.breaker = Breaker(self.base_url, key_advice(endpoint.api_key_env, endpoint.base_url, self.key), self.scrub)
        self._schemas: dict[type[Answer], dict[str, Any]] = {}
        self._client: openai.AsyncOpenAI | None = None
        self._http: httpx2.AsyncClient | None = None  # the SDK client's HTTP client
        self._chat: _ChatPost | None = None

    async def ready(self) -> None:
        """Start the embedded model's server on the first request (in a thread: loading blocks for seconds)."""
        if self.local and self.address == self.base_url:
            self.address = public_url(await asyncio.to_thread(serve, self.endpoint))

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The SDK client, built on first use (a route whose every ask is cached never needs one)."""
        if self._client is None:
            connections = self.limit.maximum
            http_client = openai.DefaultAioHttpClient(
                verify=tls(),
                limits=httpx2.Limits(max_connections=connections, max_keepalive_connections=connections),
                follow_redirects=False,  # a redirected POST loses its body; the breaker names the target
                headers={"Accept-Encoding": "identity"},
                event_hooks={"response": [_guard]},
            )
            self._http = http_client
            self._client = openai.AsyncOpenAI(
                **_addressing(self.address if self.local else self.endpoint.base_url, self.key),
                # any key does for the embedded model; a missing one is the endpoint's 401 to report
                api_key="local" if self.local else self.key or "none",
                max_retries=0,  # retries are the gateway's: retry.is_transient
                timeout=self.endpoint.timeout,
                http_client=http_client,
            )
        return self._client

    def scrub(self, text: str) -> str:
        return scrub(text, self.secrets)

    async def chat(self, payload: bytes, within: float) -> Posted:
        """One chat completion, its body already serialized (the bytes the cache key was computed from, sent as
        they are: the SDK neither copies nor re-encodes them), read in full within ``within`` seconds; a non-2xx
        answer or a transport failure raises the SDK's exception."""
        async with self._exchange("POST", "/chat/completions", within):
            return await self._post_chat(payload)
        raise AssertionError("unreachable")  # the block returns or raises

    async def _post_chat(self, payload: bytes) -> Posted:
        """What ``client.post`` does for one request with no SDK retries and a static key (ifsynth's only kind),
        without its per-request cost; failures are mapped to the SDK's exceptions as it maps them."""
        post = self._chat or self._prepare_chat()
        try:
            with post.mapped():
                async with post.session.post(post.url, data=payload, **post.options) as response:
                    _refuse(response.headers)
                    body = await _read_capped(response)
        except httpx2.TimeoutException as exc:
            raise openai.APITimeoutError(request=post.request) from exc
        except (httpx2.RequestError, ssl.SSLError) as exc:
            raise openai.APIConnectionError(request=post.request) from exc
        if not 200 <= response.status < 300:  # a redirect too: it is not followed (the breaker names its target)
            failed = httpx2.Response(response.status, headers=response.raw_headers, content=body, request=post.request)
            raise self.client._make_status_error_from_response(failed)
        return Posted(response.status, response.headers, body)

    def _prepare_chat(self) -> _ChatPost:
        """The chat request as the SDK makes it, and the session, proxy and timeouts its transport would send it
        with (``AiohttpTransport.handle_async_request``), once per route."""
        from openai._models import FinalRequestOptions
        from openai._vendor.httpx_aiohttp.transport import AiohttpTransport, map_aiohttp_exceptions

        made = self.client._build_request(FinalRequestOptions.construct(method="post", url="/chat/completions"))
        assert self._http is not None  # made with the client
        transport = self._http._transport_for_url(made.url)
        assert isinstance(transport, AiohttpTransport)  # openai.DefaultAioHttpClient's, for every URL
        if not isinstance(transport.client, aiohttp.ClientSession):
            transport.client = transport.get_client()
        timeout, proxy = made.extensions.get("timeout", {}), transport.proxy
        options = {
            "headers": {name: value for name, value in made.headers.items() if name != "content-length"},
            "allow_redirects": False,
            "auto_decompress": False,
            "compress": False,
            "timeout": aiohttp.ClientTimeout(
                sock_connect=timeout.get("connect"), sock_read=timeout.get("read"), connect=timeout.get("pool")
            ),
            "server_hostname": made.extensions.get("sni_hostname"),
            "proxy": str(proxy.url) if proxy else None,
            "proxy_auth": aiohttp.BasicAuth(*proxy.auth) if proxy and proxy.auth else None,
            "proxy_headers": proxy.headers if proxy else None,
        }
        self._chat = _ChatPost(made, str(made.url), transport.client, options, map_aiohttp_exceptions)
        return self._chat

    async def embed(
        self, model: str, texts: list[str], within: float
    ) -> tuple[CreateEmbeddingResponse, httpx2.Headers]:
        """One ``/embeddings`` request (floats: not every server speaks base64) and the answer's headers (rate
        limits), under the same deadline and guards as ``chat``."""
        async with self._exchange("POST", "/embeddings", within):
            raw = await self.client.embeddings.with_raw_response.create(
                model=model, input=texts, encoding_format="float"
            )
            return raw.parse(), raw.headers
        raise AssertionError("unreachable")

    @contextlib.asynccontextmanager
    async def _exchange(self, method: str, path: str, within: float) -> AsyncIterator[None]:
        """One request and its whole reply under one deadline: the SDK's timeout applies to each read, so a
        reply trickled a byte at a time would never end; every failure as the SDK's exception."""
        try:
            async with asyncio.timeout(within):
                yield
        except TimeoutError:
            request = httpx2.Request(method, f"{self.base_url}{path}")
            raise openai.APITimeoutError(request=request) from None
        except openai.APITimeoutError as exc:
            refused = _refused(exc)
            if refused is None:
                raise
            # the aiohttp transport maps every connection failure to a connect *timeout*; say what happened
            what = "error" if isinstance(refused, aiohttp.ClientConnectorError) else "reset"
            said = str(refused) or type(refused).__name__
            raise openai.APIConnectionError(message=f"Connection {what}: {said}", request=exc.request) from exc
        except (ReplyRejected, aiohttp.ClientResponseError) as exc:
            # ReplyRejected: raised by _guard, past the SDK's own error mapping. ClientResponseError: bytes that
            # are not an HTTP reply (a bad status line, a malformed header), which neither the SDK nor its
            # transport maps; raw, the run would stop as on an unexpected error. Refused, like any reply no
            # answer can come from, they fail the request and count toward the breaker's streak.
            refusal = not_http(exc, self.scrub) if isinstance(exc, aiohttp.ClientResponseError) else exc
            request = httpx2.Request(method, f"{self.base_url}{path}")
            raise openai.APIConnectionError(message=f"Reply refused: {refusal}", request=request) from refusal

    async def close(self) -> None:
        if self._client is not None:
            try:
                await self._client.close()
            finally:  # the next request makes a new session
                self._client, self._http, self._chat = None, None, None

    def schema(self, answer: type[Answer]) -> dict[str, Any]:
        """Built once per answer type: pydantic's schema generation is costly at thousands of requests."""
        if answer not in self._schemas:
            self._schemas[answer] = strict_schema(answer, string_lengths=self.string_lengths)
        return self._schemas[answer]

    def body(self, ask: Ask, model: str, seed: int, messages: list[dict[str, str]]) -> dict[str, Any]:
        """The request for ``ask`` in this endpoint's structured-output style; the cache key is its hash."""
        schema = self.schema(ask.schema)
        if self.local:  # a small model on CPU runs on to its budget: close its strings before then
            schema = fit_strings(schema, ask.max_tokens)
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
    _refuse(response.headers)
    response.stream = _Capped(response.stream, MAX_REPLY_BYTES)


def _refuse(headers: Mapping[str, str]) -> None:
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise ReplyRejected(f"a {encoding}-compressed reply, though only identity was accepted")
    length = headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_REPLY_BYTES:
        raise ReplyRejected(f"a reply of {int(length) // 2**20} MB")


async def _read_capped(response: aiohttp.ClientResponse) -> bytes:
    """A reply's body, read through MAX_REPLY_BYTES: one not sized by its headers is refused once past it."""
    if response.content_length is not None:  # within the cap: _refuse saw it
        return await response.read()
    return b"".join([chunk async for chunk in _Capped(response.content.iter_any(), MAX_REPLY_BYTES)])


@dataclass(frozen=True)
class Posted:
    """A chat completion's reply, read in full: what the gateway uses of it."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes


@dataclass(frozen=True)
class _ChatPost:
    """How a route sends a chat completion (``Route._prepare_chat``)."""

    request: httpx2.Request  # what a failure's SDK exception names
    url: str
    session: aiohttp.ClientSession
    options: dict[str, Any]
    mapped: Callable[[], contextlib.AbstractContextManager[None]]  # aiohttp's exceptions as httpx's


def _refused(exc: BaseException) -> aiohttp.ClientConnectionError | None:
    """The connection failure behind an exception, if there is one: to connect (refused, unreachable, no such
    host), or a connection the server dropped (reset, disconnected)."""
    cause = exc.__cause__ or exc.__context__
    while cause is not None:
        if isinstance(cause, aiohttp.ClientConnectionError) and not isinstance(cause, TimeoutError):
            return cause
        cause = cause.__cause__ or cause.__context__
    return None
