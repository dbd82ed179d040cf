"""Shapes of LLM answers. Each is sent as a JSON schema and validated on the way back.

Schemas that depend on the request (how many instructions, which candidate ids) are built by small
factories, so a constrained decoder can enforce them and the cache key changes with them.
"""

from __future__ import annotations

from copy import deepcopy
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be blank")
    return text.strip()


# minLength lets a constrained decoder (vLLM, llama.cpp, the embedded model) rule out empty strings; the
# validator also rejects blank ones, whatever the endpoint enforced.
NonEmpty = Annotated[str, Field(min_length=1), AfterValidator(_not_blank)]
LENGTH_KEYWORDS = ("minLength", "maxLength")


class Answer(BaseModel):
    """Base of every answer: closed objects, so the schema can be sent in strict mode."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Instructions(Answer):
    """An answer that makes instruction items: ``entries`` says what each adds to its payload."""

    def entries(self) -> list[dict[str, str]]:
        raise NotImplementedError(f"{type(self).__name__} makes no instruction items")


class InstructionList(Instructions):
    instructions: list[NonEmpty]

    def entries(self) -> list[dict[str, str]]:
        """One payload update per instruction item the answer makes (with any other field, e.g. ``language``)."""
        extra = self.model_dump(exclude={"instructions"})
        return [{"instruction": text, **extra} for text in self.instructions]


@cache
def instruction_list(k: int, *, language: bool = False) -> type[InstructionList]:
    """An answer holding exactly ``k`` instructions; with ``language``, also the programming language they name."""
    fields: dict[str, Any] = {"instructions": (Annotated[list[NonEmpty], Field(min_length=k, max_length=k)], ...)}
    if language:
        fields["language"] = (NonEmpty, ...)
    return create_model(f"{'Code' * language}Instructions{k}", __base__=InstructionList, **fields)


class Poisoning(Answer):
    """InF-IR's poisoning answers name the passage's two or three core aspects first: the negative is written to
    diverge from them."""

    aspects: Annotated[list[NonEmpty], Field(min_length=2, max_length=3)]


class InstructionPoisoning(Poisoning):
    """InF-IR's I-: an instruction close to I+ that, read with Q+, asks for something other than P+."""

    negative_instruction: NonEmpty


class CodeInstructionPoisoning(InstructionPoisoning):
    language: NonEmpty


class QueryPoisoning(Poisoning):
    """InF-IR's Q-: a query close to Q+ that, read with I+, diverges from the passage's core aspects."""

    negative_query: NonEmpty


def instruction_poisoning(*, language: bool = False) -> type[InstructionPoisoning]:
    return CodeInstructionPoisoning if language else InstructionPoisoning


class Rewrite(Answer):
    plan: NonEmpty
    revised_passage: NonEmpty


class RelevanceJudgement(Answer):
    explanation: NonEmpty
    score: Literal[1, 2, 3, 4, 5]


class CandidatePick(Answer):
    explanation: NonEmpty
    best: str


def _one_of(values: tuple[str, ...] | tuple[int, ...]) -> Any:
    """``Literal[values]``, for a model built at run time (a type checker reads only written-out Literals)."""
    return Literal[values]


@cache
def candidate_pick(labels: tuple[str, ...]) -> type[CandidatePick]:
    """An answer that must name one of ``labels``."""
    return create_model(
        f"Pick{len(labels)}",
        __base__=CandidatePick,
        best=(_one_of(labels), ...),
    )


class TwoSentenceInstruction(Instructions):
    """An InfoSearch instruction: the core query restated, then the restriction to one condition."""

    restated_query: NonEmpty
    restriction: NonEmpty

    def entries(self) -> list[dict[str, str]]:
        return [
            {
                "instruction": f"{self.restated_query} {self.restriction}",
                "restated_query": self.restated_query,
                "restriction": self.restriction,
            }
        ]


class KeywordCondition(Answer):
    explanation: NonEmpty
    keyword: NonEmpty


class Reversal(Answer):
    reversed_restriction: NonEmpty


class NegationJudgement(RelevanceJudgement):
    """How clearly a reversed instruction negates its instruction, on the same 1-5 rubric shape."""


class QueryNegatives(Answer):
    passages: list[NonEmpty]


@cache
def query_negatives(n: int) -> type[QueryNegatives]:
    """An answer holding exactly ``n`` hard-negative passages."""
    return create_model(
        f"QueryNegatives{n}",
        __base__=QueryNegatives,
        passages=(Annotated[list[NonEmpty], Field(min_length=n, max_length=n)], ...),
    )


def strict_schema(model: type[BaseModel], *, string_lengths: bool = True) -> dict[str, Any]:
    """The model's JSON schema in strict form: closed objects, all keys required.

    ``string_lengths=False`` drops minLength and maxLength, which OpenAI's strict mode does not accept.
    """
    schema = model.model_json_schema()

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node["additionalProperties"] = False
                node["required"] = list(node["properties"])
            if not string_lengths:
                for keyword in LENGTH_KEYWORDS:
                    node.pop(keyword, None)
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    schema.pop("title", None)
    return schema


# Free text runs about four characters a token with the small models' tokenizers; three leaves room for words
# that split into more tokens. A key, its quotes and the punctuation around it take a few tokens more.
CHARS_PER_TOKEN = 3
TOKENS_PER_FIELD = 8


def fit_strings(schema: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """``schema`` with every free-text string bounded (``maxLength``) so the whole answer fits ``max_tokens``.

    A constrained decoder then closes each string, and the object, before the budget runs out, where an
    unbounded one lets a small model write on until the budget cuts the JSON. Each string takes an equal share
    of the budget left after the keys; an array of strings counts as many as it may hold."""
    fitted = deepcopy(schema)
    strings: list[tuple[dict[str, Any], int]] = []  # (string node, how many of it the answer holds)

    def walk(node: Any, times: int) -> int:
        """The keys and array items under ``node``; collects the free-text strings."""
        if not isinstance(node, dict):
            return 0
        if node.get("type") == "string" and "enum" not in node and "maxLength" not in node:
            strings.append((node, times))
        if node.get("type") == "array":
            many: int = node.get("maxItems") or node.get("minItems") or 1
            return many + walk(node.get("items"), times * many)
        properties = node.get("properties", {})
        return len(properties) + sum(walk(child, times) for child in properties.values())

    fields = walk(fitted, 1)
    slots = sum(times for _, times in strings)
    if slots:
        share = (max_tokens - TOKENS_PER_FIELD * fields) * CHARS_PER_TOKEN // slots
        for node, _ in strings:
            node["maxLength"] = max(share, node.get("minLength", 1))
    return fitted


class InstructionFit(Answer):
    """An LLM judge's grade of one retrieved passage (INSTFOL); its only field, so the grade is the first
    number in the answer and its token's log-probabilities can be read."""

    score: int


@cache
def instruction_fit(maximum: int) -> type[InstructionFit]:
    """A grade from 0 to ``maximum``."""
    return create_model(
        f"InstructionFit{maximum}",
        __base__=InstructionFit,
        score=(_one_of(tuple(range(maximum + 1))), ...),
    )


class Alteration(Answer):
    change: NonEmpty
    narrative: NonEmpty


class AlteredNarratives(Instructions):
    """FollowIR's altered narratives: each keeps every requirement of the original and narrows it, by a further
    requirement or an exclusion; ``change`` says what was added."""

    alterations: list[Alteration]

    def entries(self) -> list[dict[str, str]]:
        return [{"instruction": a.narrative, "change": a.change} for a in self.alterations]


@cache
def altered_narratives(k: int) -> type[AlteredNarratives]:
    """An answer holding exactly ``k`` candidate alterations."""
    return create_model(
        f"AlteredNarratives{k}",
        __base__=AlteredNarratives,
        alterations=(Annotated[list[Alteration], Field(min_length=k, max_length=k)], ...),
    )


class RelevanceLabel(Answer):
    """A binary relevance judgment, as a TREC assessor gives one, with the reason first."""

    explanation: NonEmpty
    relevant: bool


class ShortCommand(Instructions):
    """A narrative cut to an abstract task command of about ten words that names no entity."""

    command: NonEmpty

    def entries(self) -> list[dict[str, str]]:
        return [{"instruction": self.command}]


class InstructionKeywords(Instructions):
    keywords: Annotated[list[NonEmpty], Field(min_length=1, max_length=2)]

    def entries(self) -> list[dict[str, str]]:
        return [{"instruction": ", ".join(self.keywords)}]


class SyntheticDocuments(Answer):
    """FollowIR's training documents for one (query, narrative): some relevant, some not."""

    relevant: list[NonEmpty]
    non_relevant: list[NonEmpty]


@cache
def synthetic_documents(n: int) -> type[SyntheticDocuments]:
    """An answer holding exactly ``n`` relevant and ``n`` non-relevant documents."""
    exactly = Annotated[list[NonEmpty], Field(min_length=n, max_length=n)]
    return create_model(
        f"SyntheticDocuments{n}", __base__=SyntheticDocuments, relevant=(exactly, ...), non_relevant=(exactly, ...)
    )


class LevelInstruction(Answer):
    """IFIR: the next instruction level, with the conditions it adds to the one below."""

    added: Annotated[list[NonEmpty], Field(min_length=1)]
    instruction: NonEmpty


class LevelCheck(Answer):
    """IFIR: whether a level keeps every condition of the level below and adds at least one."""

    explanation: NonEmpty
    keeps_all: bool
    adds: bool
