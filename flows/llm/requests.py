"""What stages and the gateway hand each other: an ``Ask`` goes in, a ``Reply`` comes out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Literal, NamedTuple, TypeVar

from ifsynth.prompts.registry import Rendered
from ifsynth.schemas.answers import Answer
from ifsynth.schemas.config import Role
from ifsynth.schemas.records import Failure

A = TypeVar("A", bound=Answer)
B = TypeVar("B", bound=Answer)


@dataclass(frozen=True)
class Ask(Generic[A]):
    """One structured question a stage wants answered, in the shape of ``schema``."""

    prompt: Rendered
    schema: type[A]
    role: Role
    temperature: float
    max_tokens: int
    sample_index: int = 0
    logprobs: int | None = None  # ask for this many top log-probabilities per answer token
    top_p: float | None = None  # nucleus sampling; None leaves the endpoint's default (and the cache key) alone


class Request(NamedTuple):
    """A request ready to send: its cache key and its body."""

    key: str
    body: dict[str, Any]


@dataclass
class Reply(Generic[A]):
    """How an ``Ask[A]`` ended: its answer (``ok``), or why not, with every cache key it took (re-asks included)."""

    status: Literal["ok", "parse_error", "failed"]
    value: A | None = None
    keys: list[str] = field(default_factory=list)
    error: str | None = None
    raw: str | None = None
    cached: int = 0
    sent: int = 0
    logprobs: list[dict[str, Any]] | None = None  # per answer token: token, logprob, top_logprobs
    failure: Failure | None = None  # why a reply that is not ``ok`` is not: may a rerun cure it?
    cut: bool = False  # the answer ran past max_tokens unfinished: too long for its budget, not re-asked

    def answer(self, schema: type[B]) -> B:
        """The answer, typed as ``schema``; ``Unanswered`` when the ask gave none that parsed as it.

        A stage that needs the answer to decide reads it so and says nothing of failures: the stage machinery
        records the input as failed (or unparsed), with the reply's reason, for every stage in one place. The
        schema is named here, not taken from ``A``: one input's replies may answer different asks (a write and
        its check), so ``handle`` receives them as ``Reply[Any]`` and each read says, and checks, what it reads."""
        if self.status != "ok" or not isinstance(self.value, schema):
            raise Unanswered(self)
        return self.value


class Unanswered(Exception):
    """An ask a stage needed gave no usable answer (``Reply.answer``); caught by the stage machinery, never a
    user's error."""

    def __init__(self, reply: Reply[Any]) -> None:
        super().__init__(reply.error or reply.status)
        self.reply = reply
