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

import asyncio
import json
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ifsynth.schemas.errors import IfsynthError
from ifsynth.schemas.records import CallRecord
from ifsynth.warehouse.keys import sha256

if TYPE_CHECKING:
    from ifsynth.flows.llm.gateway import Ask, Gateway, Route

DONE = "completed"
FAILED = ("failed", "expired", "cancelled")


class BatchFailed(IfsynthError):
    """The endpoint ended a batch without answers."""


async def fetch(gateway: Gateway, stage: str, missing: dict[str, tuple[Ask, dict[str, Any]]]) -> int:
    """Get answers for ``missing`` (cache key -> (ask, body)) through the Batch API; returns rows ingested."""
    by_route: dict[int, tuple[Route, dict[str, tuple[Ask, dict[str, Any]]]]] = {}
    for key, (ask, body) in missing.items():
        route = gateway.route(ask.role)
        by_route.setdefault(id(route), (route, {}))[1][key] = (ask, body)
    ingested = 0
    for route, requests in by_route.values():
        batch_id = _pending(gateway, route, requests) or await _submit(gateway, stage, route, requests)
        output = await _poll(gateway, route, batch_id)
        ingested += await _ingest(gateway, stage, route, requests, output)
        gateway.warehouse.execute("UPDATE llm_batches SET status = 'ingested' WHERE batch_id = ?", [batch_id])
    return ingested


def _request_set(requests: dict[str, Any]) -> str:
    return sha256("\n".join(sorted(requests)))


def _pending(gateway: Gateway, route: Route, requests: dict[str, Any]) -> str | None:
    """The batch an earlier invocation submitted for exactly these requests, if it is still to be ingested."""
    rows = gateway.warehouse.sql(
        "SELECT batch_id FROM llm_batches WHERE run_id = ? AND base_url = ? AND request_set = ? "
        "AND status = 'submitted' ORDER BY created_at DESC LIMIT 1",
        [gateway.run_id, route.base_url, _request_set(requests)],
    )
    return rows[0]["batch_id"] if rows else None


async def _submit(gateway: Gateway, stage: str, route: Route, requests: dict[str, tuple[Ask, dict[str, Any]]]) -> str:
    lines = "".join(
        json.dumps({"custom_id": key, "method": "POST", "url": "/v1/chat/completions", "body": body}) + "\n"
        for key, (_, body) in requests.items()
    )
    uploaded = await route.client.files.create(file=("requests.jsonl", lines.encode()), purpose="batch")
    batch = await route.client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    gateway.warehouse.execute(
        "INSERT INTO llm_batches VALUES (?, ?, ?, ?, ?, ?, 'submitted', ?)",
        [batch.id, gateway.run_id, stage, route.base_url, _request_set(requests), len(requests), datetime.now()],
    )
    return batch.id


async def _poll(gateway: Gateway, route: Route, batch_id: str) -> str:
    while True:
        batch = await route.client.batches.retrieve(batch_id)
        if batch.status == DONE and batch.output_file_id:
            return batch.output_file_id
        if batch.status in FAILED or (batch.status == DONE and not batch.output_file_id):
            gateway.warehouse.execute("UPDATE llm_batches SET status = 'failed' WHERE batch_id = ?", [batch_id])
            raise BatchFailed(
                f"batch {batch_id} ended `{batch.status}` without answers; run again to submit a new one, "
                "or drop --batch to send the requests live"
            )
        await asyncio.sleep(gateway.config.batch_poll_seconds)


async def _ingest(
    gateway: Gateway, stage: str, route: Route, requests: dict[str, tuple[Ask, dict[str, Any]]], output: str
) -> int:
    from ifsynth.flows.llm.gateway import _token_logprobs as token_logprobs  # llm imports this module

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
        choice = (data.get("choices") or [{}])[0]
        usage = data.get("usage") or {}
        failed = status != 200 or answer.get("error") is not None
        gateway.warehouse.add_call(
            CallRecord(
                call_id=uuid.uuid4().hex,
                key=key,
                run_id=gateway.run_id,
                stage=stage,
                template=ask.prompt.template,
                template_hash=ask.prompt.template_hash,
                base_url=route.base_url,
                model=body["model"],
                request=body,
                response=None if failed else (choice.get("message") or {}).get("content"),
                finish_reason=None if failed else choice.get("finish_reason"),
                prompt_tokens=usage.get("prompt_tokens"),
                completion_tokens=usage.get("completion_tokens"),
                cost=gateway._cost(body["model"], usage.get("prompt_tokens"), usage.get("completion_tokens")),
                http_status=status,
                error=f"batch: {json.dumps(answer.get('error') or data.get('error'))[:300]}" if failed else None,
                logprobs=None if failed else token_logprobs(choice),
            )
        )
        rows += 1
    return rows
