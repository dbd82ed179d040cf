"""Instruction reversal: the restriction of an instruction turned into its clear negation.

Only the restriction is rewritten. The reversed instruction is the core query verbatim followed by the
negated restriction, as in every reversed example of the paper ("What is diabetes? Please respond in a
language other than Chinese."), so it shares no rephrasing with the instructed query that a retriever could
match on. A judge then scores how clearly the reversal negates the instruction (template ``judge_reversal``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.stage import Env, LLMStage, Outcome
from ifsynth.schemas.answers import Reversal
from ifsynth.schemas.infosearch import Instruction
from ifsynth.schemas.records import ItemRecord, Payload


def sentence(query: str) -> str:
    """The query as it opens a request: unchanged, with a full stop when it ends without punctuation."""
    query = query.strip()
    return query if query.endswith((".", "?", "!", "。", "？", "！")) else f"{query}."


@dataclass(frozen=True, kw_only=True)
class ReverseInstructions(LLMStage[ItemRecord]):
    """One call per instruction negates its restriction; the reversed instruction is the core query followed
    by the negated restriction."""

    reads: ClassVar[type[Payload]] = Instruction
    name: str = "reversal"
    source: str = "instructions"

    def build(self, env: Env, instruction: ItemRecord) -> list[Ask]:
        read = instruction.read(Instruction)
        variables = {"instruction": read.instruction, "restriction": read.restriction, "dimension": read.dimension}
        return [self.ask(env, Reversal, query=read.query, **variables)]

    def handle(self, env: Env, instruction: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        answer = reply.answer(Reversal)
        restriction = answer.reversed_restriction
        reversed_instruction = f"{sentence(instruction.read(Instruction).query)} {restriction}"
        payload = {
            **instruction.payload,
            "reversed_restriction": restriction,
            "reversed_instruction": reversed_instruction,
        }
        return Outcome("pass", items=[env.child(instruction, "reversal", payload, reversed_instruction, reply=reply)])
