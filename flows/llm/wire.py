"""Chat completions over the wire, lean: the request path that runs thousands of times per stage.

The openai SDK builds a typed request, an httpx2 request and a typed response for every call; at a few
thousand calls a second that costs more CPU than the rest of a run. The gateway POSTs chat completions with
its own keep-alive client (``flows/http1.py``) instead, and keeps the SDK for everything else: the embedded
model, the files and batches endpoints, and endpoints reached through a proxy. Failures still surface as the
SDK's exception types, built by the SDK itself, so retry decisions and recorded errors do not depend on which
path a request took.
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx2
import openai

from ifsynth.flows.llm import http1

try:
    import uvloop
except ImportError:  # not on Windows
    uvloop = None

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop where it is installed: it spends about a third less CPU per request.

    While it runs, the cyclic garbage collector pauses less, since each pause delays the answers of every
    request in flight: the objects that existed before (the imported libraries, the stage's inputs) sit in
    its permanent generation, so full collections do not walk them again, and young collections run every
    10,000 allocations instead of 700. Both are undone afterwards."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop if uvloop else None
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(thresholds[0], 10_000), *thresholds[1:])
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main)
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


@dataclass(frozen=True, slots=True)
class Posted:
    """A 2xx answer: its status, headers (read with lower-case names) and body."""

    status: int
    headers: Mapping[str, str]
    content: bytes


def headers(api_key: str) -> dict[str, str]:
    """What the SDK sends with a chat completion that the endpoint may act on: the key, and the organization
    and project it reads from its own environment variables (billing and rate limits go by them)."""
    sent = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json", "Accept": "application/json"}
    for header, variable in (("OpenAI-Organization", "OPENAI_ORG_ID"), ("OpenAI-Project", "OPENAI_PROJECT_ID")):
        if value := os.environ.get(variable):
            sent[header] = value
    return sent


class ChatWire:
    """POST /chat/completions on one endpoint."""

    def __init__(
        self, client: Callable[[], openai.AsyncOpenAI], *, url: str, api_key: str, connections: int, timeout: float
    ) -> None:
        self._client = client  # the SDK client, asked for only to build an error
        self._url = url
        self._http = http1.Client(
            url,
            headers(api_key),
            timeout=timeout,
            max_idle=connections,
            ssl_context=httpx2.create_ssl_context() if url.startswith("https:") else None,  # the SDK's trust store
        )

    async def post(self, data: bytes) -> Posted:
        """POST a serialized request body."""
        try:
            response = await self._http.post(data)
        except TimeoutError:
            raise openai.APITimeoutError(request=self._request()) from None
        except http1.ConnectionFailed as exc:
            raise openai.APIConnectionError(message=str(exc), request=self._request()) from None
        if response.status >= 300:  # redirects are not followed: a moved endpoint is a configuration error
            failed = httpx2.Response(
                response.status,
                headers=list(response.headers.items()),
                content=response.content,
                request=self._request(),
            )
            raise self._client()._make_status_error_from_response(failed)
        return Posted(response.status, response.headers, response.content)

    async def close(self) -> None:
        await self._http.close()

    def _request(self) -> httpx2.Request:
        return httpx2.Request("POST", self._url)
