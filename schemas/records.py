"""Rows of the warehouse, as the rest of the code sees them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

ItemStatus = Literal["ok", "rejected", "parse_error", "failed", "accepted"]
Decision = Literal["pass", "reject", "parse_error", "failed"]
JudgeKind = Literal["llm", "rule", "human"]
# A verdict's judge: its kind, named (`llm:positive`, `rule:newline`) when one stage decides an item several ways.
Judge = Annotated[str, StringConstraints(pattern=rf"^({'|'.join(get_args(JudgeKind))})(:[a-z0-9_]+)?$")]
# `died`: marked running, but no process holds the warehouse (killed with -9, the machine went down)
# pending: a shard's run made and waiting for the process that drives it
# How a failed request ended: `transient` (timeouts, connection errors, 429, 5xx: retried, and a rerun may get an
# answer) or `terminal` (other 4xx, a refused reply, no usable answer after the re-asks: a rerun asks the same).
Failure = Literal["transient", "terminal"]
RunStatus = Literal["pending", "running", "completed", "failed", "interrupted", "stopped", "died"]


class Record(BaseModel):
    model_config = ConfigDict(frozen=True)


class Payload(BaseModel):
    """What an item of one kind holds, typed: each kind's model names the fields its readers rely on.

    Items carry their parents' fields on (a rewrite keeps its instruction's query), so a model lets fields it
    does not name pass through (``extra="allow"``) and readers name only what they read."""

    model_config = ConfigDict(frozen=True, extra="allow")


P = TypeVar("P", bound=Payload)


class CallRecord(Record):
    """One attempt at one LLM request. ``key`` is the cache key; several attempts may share it."""

    call_id: str
    key: str
    run_id: str
    stage: str
    template: str
    template_hash: str
    base_url: str
    model: str
    request: dict[str, Any]
    response: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: float | None = None
    cost: float | None = None
    http_status: int | None = None
    error: str | None = None
    attempt: int = 1
    created_at: datetime = Field(default_factory=datetime.now)
    logprobs: list[dict[str, Any]] | None = None
    failure: Failure | None = None  # set on a failed attempt


class ItemRecord(Record):
    """Anything a stage selected or generated. ``item_id`` is derived from content and lineage."""

    run_id: str
    item_id: str
    stage: str
    kind: str
    group_id: str
    parent_ids: tuple[str, ...] = ()
    payload: dict[str, Any] = Field(default_factory=dict)
    status: ItemStatus = "ok"
    call_keys: tuple[str, ...] = ()
    ord: int = 0

    def read(self, model: type[P]) -> P:
        """The payload as its kind's model: a missing or mistyped field fails here, naming the field."""
        return model.model_validate(self.payload)


class VerdictRecord(Record):
    """One decision about one item; human verdicts override machine ones. ``rule`` names what was checked without
    the measured value (``score``) or the limit (``threshold``), so reasons group by rule with no parsing of text."""

    run_id: str
    item_id: str
    stage: str
    judge: Judge
    decision: Decision
    score: float | None = None
    threshold: float | None = None
    reason: str = ""
    call_key: str | None = None
    created_at: datetime = Field(default_factory=datetime.now)
    rule: str = ""


class StageCounts(Record):
    """Every input of a stage ends as passed, set aside, rejected, parse_error or failed (``n_in`` is their sum);
    ``n_out`` counts outputs. Set aside: eligible but not drawn (a seed beyond ``--limit``)."""

    stage: str
    n_in: int = 0
    n_out: int = 0
    set_aside: int = 0
    rejected: int = 0
    parse_error: int = 0
    failed: int = 0
    cached: int = 0
    sent: int = 0


class RunRecord(Record):
    run_id: str
    name: str
    recipe: str
    fingerprint: str
    config: dict[str, Any]
    code_version: str
    status: RunStatus
    started_at: datetime
    ended_at: datetime | None = None
    error: str | None = None
