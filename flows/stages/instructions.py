"""Instruction generation: one call per input, each instruction of the answer an item of its own.

InstructIR asks for k scenarios per seed query; InfoSearch for one two-sentence instruction per (query, condition).
They differ only in template variables and answer schema: the schema's ``entries()`` says what each
instruction item adds to the payload. InF-IR also cuts each instruction at its first newline, on record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.stage import Env, LLMStage, Outcome
from ifsynth.flows.stages.text_rules import first_line, newline_verdicts
from ifsynth.schemas.answers import Instructions, instruction_list
from ifsynth.schemas.payloads import QueryItem
from ifsynth.schemas.records import ItemRecord, Payload, VerdictRecord

Variables = Callable[[ItemRecord], dict[str, Any]]


@dataclass(frozen=True, kw_only=True)
class GenerateInstructions(LLMStage[ItemRecord]):
    """By default InstructIR's: ``k`` instructions from the query alone, answered as an instruction list. The
    gold passage stays out of the prompt: the instruction says how to search, the query what, and a model that
    sees the passage leaks its content into the instruction."""

    reads: ClassVar[type[Payload]] = QueryItem  # by default; ``variables`` reads what its recipe's kind holds
    name: str = "instructions"
    source: str = "select"
    k: int = 1
    schema: type[Instructions] | None = None
    variables: Variables | None = None
    cut_at_newline: bool = False

    @property
    def answer(self) -> type[Instructions]:
        return self.schema or instruction_list(self.k)

    def template_variables(self, seed: ItemRecord) -> dict[str, Any]:
        if self.variables is not None:
            return self.variables(seed)
        return {"query": seed.read(QueryItem).query, "k": self.k}

    def build(self, env: Env, seed: ItemRecord) -> list[Ask]:
        return [self.ask(env, self.answer, **self.template_variables(seed))]

    def handle(self, env: Env, seed: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        answer = reply.answer(self.answer)
        items: list[ItemRecord] = []
        verdicts: list[VerdictRecord] = []
        for number, entry in enumerate(answer.entries(), 1):
            generated = entry["instruction"]
            text = first_line(generated) if self.cut_at_newline else generated
            payload = {**seed.payload, **entry, "instruction": text, "k": number}
            item = env.child(seed, "instruction", payload, number, text, reply=reply, ord=seed.ord + number)
            verdicts += newline_verdicts(env, item.item_id, "instruction", generated, text)
            items.append(item)
        return Outcome("pass", items=items, verdicts=verdicts)
