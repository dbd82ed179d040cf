"""OpenAI Batch API mode (``ifsynth run ... --batch``): the uncached requests of a page go out as one batch
job, are polled until done and ingested into llm_calls under their usual cache keys; the stage then answers
every ask from the cache, exactly as a rerun would.

A stage's requests depend on the previous stage's answers, so batch mode goes stage by stage (page by page
within a stage): one batch round-trip each, which on OpenAI can take up to the 24 h completion window.
Re-asks of answers that do not parse, and requests the batch failed, are then sent live. The batch id and
the keys it answers are stored (``llm_batches``) before polling starts, so a run stopped while it waits
polls the same batch when run again instead of submitting a second one.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from ifsynth.flows.llm import aiohttp, openai
from ifsynth.flows.llm.answers import call_cost, completion_of
from ifsynth.flows.llm.requests import Ask
from ifsynth.flows.llm.retry import is_transient_status
from ifsynth.flows.llm.route import Route, error_text, not_http
from ifsynth.schemas.config import Price
from ifsynth.schemas.errors import BatchFailed, EndpointDown
from ifsynth.schemas.records import CallRecord, Failure
from ifsynth.warehouse.keys import sha256
from ifsynth.warehouse.store import Warehouse

DONE = "completed"
FAILED = ("failed", "expired", "cancelled")
Requests = dict[str, tuple[Ask, dict[str, Any]]]  # cache key -> (ask, body)


async def fetch(
    warehouse: Warehouse,
    route: Route,
    requests: Requests,
    *,
    run_id: str,
    stage: str,
    prices: Mapping[str, Price],
    poll_seconds: float,
) -> int:
    """Get answers for ``requests`` through ``route``'s Batch API into llm_calls; returns rows ingested."""
    request_set = sha256("\n".join(sorted(requests)))
    batch_id = warehouse.pending_batch(run_id, route.base_url, request_set)
    if batch_id is None:
        batch_id = await _submit(route, requests)
        warehouse.add_batch(batch_id, run_id, stage, route.base_url, request_set, len(requests))
    output = await _poll(warehouse, route, batch_id, poll_seconds)
    ingested = await _ingest(warehouse, route, requests, output, run_id=run_id, stage=stage, prices=prices)
    warehouse.set_batch_status(batch_id, "ingested")
    return ingested


@contextlib.contextmanager
def _refused(route: Route, call: str) -> Iterator[None]:
    """An SDK error of a Batch API call, or bytes that are not an HTTP reply (which the SDK does not map), as
    one line without the route's secrets (a server may echo the key into its error) and without the error
    chained under it, which a traceback would print."""
    try:
        yield
    except (openai.APIError, aiohttp.ClientResponseError) as exc:
        status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
        if call == "POST /files" and status in (404, 405, 501):
            said = f"has no Batch API ({call} answered {status}): drop --batch to send the requests one by one"
        elif status in (401, 403):
            said = f"answered {status} to {call}: {route.breaker.key_advice}"
        else:
            error = (
                f"Reply refused: {not_http(exc, route.scrub)}"
                if isinstance(exc, aiohttp.ClientResponseError)
                else f"{type(exc).__name__}: {error_text(exc, route.scrub)}"
            )
            said = f"failed {call} ({error}); the run stopped, and continues when rerun"
        raise EndpointDown(f"endpoint {route.base_url} {said}") from None


async def _submit(route: Route, requests: Requests) -> str:
    lines = "".join(
        json.dumps({"custom_id": key, "method": "POST", "url": "/v1/chat/completions", "body": body}) + "\n"
        for key, (_, body) in requests.items()
    )
    with _refused(route, "POST /files"):
        uploaded = await route.client.files.create(file=("requests.jsonl", lines.encode()), purpose="batch")
    with _refused(route, "POST /batches"):
        batch = await route.client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    return batch.id


async def _poll(warehouse: Warehouse, route: Route, batch_id: str, poll_seconds: float) -> str:
    while True:
        with _refused(route, "GET /batches"):
            batch = await route.client.batches.retrieve(batch_id)
        if batch.status == DONE and batch.output_file_id:
            return batch.output_file_id
        if batch.status in FAILED or (batch.status == DONE and not batch.output_file_id):
            warehouse.set_batch_status(batch_id, "failed")
            raise BatchFailed(
                f"batch {batch_id} ended `{batch.status}` without answers; run again to submit a new one, "
                "or drop --batch to send the requests live"
            )
        await route.clock.sleep(poll_seconds)


async def _ingest(
    warehouse: Warehouse,
    route: Route,
    requests: Requests,
    output: str,
    *,
    run_id: str,
    stage: str,
    prices: Mapping[str, Price],
) -> int:
    with _refused(route, "GET /files content"):
        content = await route.client.files.content(output)
    rows = 0
    for line in content.text.splitlines():
        if not line.strip():
            continue
        answer = json.loads(line)
        key = answer.get("custom_id")
        if key not in requests:
            continue  # not ours: never write an answer under a key it does not belong to
        ask, body = requests[key]
        response = answer.get("response") or {}
        status = response.get("status_code")
        data = response.get("body") or {}
        failed = status != 200 or answer.get("error") is not None
        completion = completion_of(data)
        said = route.scrub(f"batch: {json.dumps(answer.get('error') or data.get('error'))}")  # scrubbed, then cut
        warehouse.add_call(
            CallRecord(
                call_id=uuid.uuid4().hex,
                key=key,
                run_id=run_id,
                stage=stage,
                template=ask.prompt.template,
                template_hash=ask.prompt.template_hash,
                base_url=route.base_url,
                model=body["model"],
                request=body,
                response=None if failed else completion.text,
                finish_reason=None if failed else completion.finish_reason,
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
                cost=call_cost(prices, body["model"], completion.prompt_tokens, completion.completion_tokens),
                http_status=status,
                error=said[:307] if failed else None,
                logprobs=None if failed else completion.logprobs,
                failure=_failure(status) if failed else None,
            )
        )
        rows += 1
    return rows


def _failure(status: int | None) -> Failure:
    """A request the batch answered with an error: transient if its status would have been retried."""
    return "transient" if status is not None and is_transient_status(status) else "terminal"
