"""The group filter: a query stays only when enough of its instances survived every judge."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from ifsynth.flows.run.stage import Decided, Env, Outcome, RuleStage
from ifsynth.schemas.payloads import RewriteItem
from ifsynth.schemas.records import Decision, ItemRecord, Payload


@dataclass(frozen=True, kw_only=True)
class FilterGroups(RuleStage[ItemRecord]):
    """Each surviving instance passes when its query (its group) kept at least ``min_group_size`` of them."""

    reads: ClassVar[type[Payload]] = RewriteItem
    name: str = "group_filter"
    source: str = "rewrite"
    min_group_size: int

    def decide(self, env: Env, page: list[ItemRecord]) -> Iterable[Decided]:
        groups: dict[str, list[str]] = {}
        for item in page:  # a page holds whole groups
            groups.setdefault(item.group_id, []).append(item.item_id)
        decided: list[Decided] = []
        for group, members in groups.items():
            size = len(members)
            decision: Decision = "pass" if size >= self.min_group_size else "reject"
            reason = f"query {group} kept {size} instance{'s' * (size != 1)}; at least {self.min_group_size} needed"
            for member in members:
                verdict = env.verdict(
                    member,
                    decision,
                    judge="rule",
                    reason=reason,
                    score=size,
                    threshold=self.min_group_size,
                    rule="instances per query",
                )
                decided.append((member, Outcome(decision, verdicts=[verdict], n_out=int(decision == "pass"))))
        return decided
