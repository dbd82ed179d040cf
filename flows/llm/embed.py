"""Embeddings through the gateway: an OpenAI-compatible ``/embeddings`` endpoint under the same concurrency and
rate limits, retries, budget and circuit breaker as chat requests, every attempt a row in ``llm_calls``.

Vectors are cached per text (endpoint, model and text, keyed as LLM requests are), not per request, so a rerun
sends nothing whatever the batch size, and a text embedded for one release serves every other. Each answered
batch is stored as it lands: a run stopped halfway keeps what it paid for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ifsynth.flows.llm import openai
from ifsynth.flows.llm.answers import call_cost
from ifsynth.flows.llm.gateway import Gateway, GatewayFailure, Since, refused
from ifsynth.flows.llm.pool import Pool
from ifsynth.flows.llm.retry import failure
from ifsynth.flows.llm.route import error_text
from ifsynth.schemas.errors import EndpointDown
from ifsynth.schemas.records import CallRecord
from ifsynth.warehouse.keys import canonical, sha256

TEMPLATE = "embeddings"  # what llm_calls names an embedding request's template (it has none)
BATCH = 64  # texts per request: TEI's default maximum client batch is 32-128, OpenAI's 2048


@dataclass
class EmbedCounts:
    """What an invocation cost: texts asked for, how many came from the cache, requests sent and failed."""

    texts: int = 0
    cached: int = 0
    requests: int = 0
    failed: int = 0
    tokens: int = 0

    def line(self, model: str, base_url: str) -> str:
        """One line in the manner of ``funnel``'s accounting."""
        embedded = self.texts - self.cached
        return (
            f"embeddings ({model} at {base_url}): {self.texts} texts, {self.cached} cached, {embedded} embedded "
            f"in {self.requests} requests sent ({self.failed} failed), {self.tokens} tokens"
        )


def text_key(key_url: str, model: str, text: str) -> str:
    """The cache key of one text's vector."""
    return sha256(canonical({"base_url": key_url, "model": model, "input": text}))


class Embedder:
    """Vectors of texts from one model at the gateway's generator endpoint."""

    def __init__(
        self, gateway: Gateway, model: str, stage: str, *, batch: int = BATCH, counts: EmbedCounts | None = None
    ) -> None:
        self.gateway, self.model, self.stage, self.batch = gateway, model, stage, batch
        self.counts = counts if counts is not None else EmbedCounts()

    async def vectors(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order; cached ones first, the rest in batches sent concurrently."""
        pool = self.gateway.pool("generator")
        keys = {text: text_key(pool.key_url, self.model, text) for text in dict.fromkeys(texts)}
        found = await asyncio.to_thread(self.gateway.warehouse.embeddings, list(keys.values()))
        self.counts.texts += len(keys)
        self.counts.cached += sum(1 for key in keys.values() if key in found)
        missing = [text for text, key in keys.items() if key not in found]
        chunks = [missing[at : at + self.batch] for at in range(0, len(missing), self.batch)]
        answers = await asyncio.gather(*(self._send(pool, chunk, keys) for chunk in chunks), return_exceptions=True)
        for answer in answers:
            if isinstance(answer, GatewayFailure):
                failed = sum(1 for a in answers if isinstance(a, BaseException))
                raise EndpointDown(
                    f"endpoint {pool.first.base_url} did not embed {failed} of {len(chunks)} batches ({answer}); "
                    "the vectors it gave are kept, and the same command continues"
                )
            if isinstance(answer, BaseException):
                raise answer
            found.update(answer)
        return [found[keys[text]] for text in texts]

    async def _send(self, pool: Pool, chunk: list[str], keys: dict[str, str]) -> dict[str, list[float]]:
        body = {"model": self.model, "input": [text or " " for text in chunk]}  # OpenAI refuses an empty input
        key = sha256(canonical({"base_url": pool.key_url, **body}))
        vectors, attempts = await self.gateway.retrying(pool, lambda n, since: self._attempt(pool, key, body, n, since))
        self.counts.requests += attempts
        stored = {keys[text]: vector for text, vector in zip(chunk, vectors, strict=True)}
        await asyncio.to_thread(self.gateway.warehouse.add_embeddings, self.model, stored)
        return stored

    async def _attempt(
        self, pool: Pool, key: str, body: dict[str, Any], attempt: int, since: Since
    ) -> list[list[float]]:
        """One request, bounded and accounted as the gateway bounds and accounts a chat request."""
        gateway, texts = self.gateway, body["input"]
        route = await pool.pick()
        route.breaker.check()
        record: dict[str, Any] = {
            "call_id": f"{key[:20]}{attempt:04x}{time.monotonic_ns():012x}",
            "key": key,
            "run_id": gateway.run_id,
            "stage": self.stage,
            "template": TEMPLATE,
            "template_hash": "",
            "base_url": route.address,
            "model": self.model,
            "request": body,
            "attempt": attempt,
        }
        estimate = sum(len(text) for text in texts) / 4  # tokens, roughly, as the gateway reserves them
        reserved = 0.0
        if gateway.budget is not None:
            reserved = gateway.budget.reserve(call_cost(gateway.config.prices, self.model, int(estimate), 0))
        await route.rate.acquire(estimate)
        async with route.limit:
            started = time.perf_counter()
            try:
                answer, headers = await route.embed(self.model, texts, since.window(pool.endpoint))
            except (openai.APIStatusError, openai.APIConnectionError) as exc:
                status = refused(route, exc, gateway.budget, reserved)
                self.counts.failed += 1
                error = f"{type(exc).__name__}: {error_text(exc, route.scrub)}"
                gateway.warehouse.add_call(
                    CallRecord(**record, http_status=status, error=error, failure=failure(exc)),
                )
                pool.failed(route, exc)
                raise
            latency = (time.perf_counter() - started) * 1000
        route.limit.succeeded()
        pool.succeeded(route)
        route.rate.observe(headers)
        route.breaker.succeeded()
        vectors = [item.embedding for item in sorted(answer.data, key=lambda item: item.index)]
        if len(vectors) != len(texts):
            raise EndpointDown(
                f"endpoint {route.base_url} answered {len(vectors)} embeddings for {len(texts)} texts; "
                "check that it serves /embeddings for this model"
            )
        tokens = answer.usage.prompt_tokens if answer.usage is not None else None
        cost = call_cost(gateway.config.prices, self.model, tokens, 0)
        if gateway.budget is not None:
            gateway.budget.settle(reserved, cost)
        self.counts.tokens += tokens or 0
        gateway.warehouse.add_call(
            CallRecord(
                **record,
                response=f"{len(vectors)} vectors of {len(vectors[0]) if vectors else 0} dimensions",
                prompt_tokens=tokens,
                completion_tokens=0,
                latency_ms=latency,
                cost=cost,
                http_status=200,
            )
        )
        return vectors
