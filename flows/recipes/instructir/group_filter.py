"""The group filter: a query stays only when enough of its instances survived every judge."""

from __future__ import annotations

from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter
from ifsynth.schemas.records import StageCounts


def filter_groups(ctx: RunContext, order: int, *, stage: str, source: str, min_group_size: int) -> StageCounts:
    writer = StageWriter(ctx, stage, order, total=ctx.warehouse.count_items(ctx.run_id, source))
    for page in ctx.warehouse.items(ctx.run_id, source):
        groups: dict[str, list[str]] = {}
        for item in page:
            groups.setdefault(item.group_id, []).append(item.item_id)
        for group, members in groups.items():
            size = len(members)
            decision = "pass" if size >= min_group_size else "reject"
            reason = f"query {group} kept {size} instance{'s' * (size != 1)}; at least {min_group_size} needed"
            for member in members:
                verdict = writer.verdict(
                    member, decision, judge="rule", reason=reason, score=size, threshold=min_group_size
                )
                writer.add(member, Outcome(decision, verdicts=[verdict], n_out=int(decision == "pass")))
                ctx.progress.advance(stage)
    return writer.close()
