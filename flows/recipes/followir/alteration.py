"""Choosing each topic's alteration: the first candidate, in the order written, that narrows relevance by the
configured share.

A candidate is passed over, with a ``rule`` verdict that says why, when one of its re-judgments is missing (the
call failed or its answer did not parse), when it makes a spot-checked non-relevant document relevant (an
alteration may only narrow relevance, or the original non-relevant judgments would no longer hold), or when the
share of relevant documents it flips lies outside ``flip_share``. Candidates after the kept one are set aside
unexamined. A kept candidate becomes an ``altered_topic`` item: the topic, both narratives and the flipped
documents."""

from __future__ import annotations

from ifsynth.flows.recipes.followir.settings import FollowIRParams
from ifsynth.flows.recipes.followir.topics import RELEVANT, SPOT_CHECK
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter
from ifsynth.schemas.records import ItemRecord, StageCounts

JUDGE = "rule:flip_share"


def select_alterations(ctx: RunContext, order: int, *, stage: str, candidates: str, labels: str) -> StageCounts:
    params = ctx.params
    assert isinstance(params, FollowIRParams)
    by_topic: dict[str, list[ItemRecord]] = {}
    for page in ctx.warehouse.items(ctx.run_id, candidates, status=None):
        for item in page:
            if item.status in ("ok", "failed", "parse_error"):  # the last two were short of a re-judgment
                by_topic.setdefault(item.group_id, []).append(item)
    judged: dict[str, list[ItemRecord]] = {}
    for page in ctx.warehouse.items(ctx.run_id, labels):
        for item in page:
            judged.setdefault(item.parent_ids[0], []).append(item)
    documents = _documents(ctx)
    writer = StageWriter(ctx, stage, order, total=sum(map(len, by_topic.values())))
    for group in sorted(by_topic):
        kept: ItemRecord | None = None
        for candidate in sorted(by_topic[group], key=lambda item: item.payload["k"]):
            if kept is not None:
                writer.add(candidate.item_id, Outcome("set_aside"))
                ctx.progress.advance(stage)
                continue
            outcome, flipped = _examine(writer, candidate, judged.get(candidate.item_id, []), documents[group], params)
            if outcome.decision == "pass":
                kept = candidate
                outcome.items.append(_altered_topic(writer, candidate, flipped, documents[group]))
            writer.add(candidate.item_id, outcome)
            ctx.progress.advance(stage)
    return writer.close()


def _documents(ctx: RunContext) -> dict[str, dict[str, str]]:
    """Per topic, the role (relevant or spot check) of each document it is re-judged on."""
    roles: dict[str, dict[str, str]] = {}
    for page in ctx.warehouse.items(ctx.run_id, "select"):
        for item in page:
            if item.kind == "judged":
                roles.setdefault(item.group_id, {})[item.payload["doc_id"]] = item.payload["role"]
    return roles


def _examine(
    writer: StageWriter,
    candidate: ItemRecord,
    labels: list[ItemRecord],
    roles: dict[str, str],
    params: FollowIRParams,
) -> tuple[Outcome, list[str]]:
    """The candidate's verdict, and the relevant documents it flips."""
    relevant = sorted(doc for doc, role in roles.items() if role == RELEVANT)
    got = {label.payload["doc_id"]: label for label in labels}
    flipped = [doc for doc in relevant if doc in got and not got[doc].payload["relevant"]]
    share = len(flipped) / len(relevant) if relevant else 0.0
    low, high = params.flip_share
    missing = sorted(set(roles) - set(got))
    widened = [
        doc for doc, role in sorted(roles.items()) if role == SPOT_CHECK and doc in got and got[doc].payload["relevant"]
    ]
    measured = f"flips {len(flipped)} of {len(relevant)} relevant documents ({share:.0%})"
    if missing:
        reason = f"{len(missing)} of {len(roles)} re-judgments missing (failed or unparsable): {', '.join(missing)}"
        reason, threshold = f"{reason}; {measured}", None
    elif widened:
        reason = f"widens relevance: originally non-relevant {', '.join(widened)} judged relevant under it; {measured}"
        threshold = None
    elif not low <= share <= high:
        reason, threshold = f"{measured}, outside [{low:.0%}, {high:.0%}]", low if share < low else high
    else:
        verdict = writer.verdict(candidate.item_id, "pass", judge=JUDGE, reason=measured, score=share)
        return Outcome("pass", verdicts=[verdict], n_out=1), flipped
    verdict = writer.verdict(candidate.item_id, "reject", judge=JUDGE, reason=reason, score=share, threshold=threshold)
    return Outcome("reject", verdicts=[verdict], n_out=0), flipped


def _altered_topic(writer: StageWriter, candidate: ItemRecord, flipped: list[str], roles: dict[str, str]) -> ItemRecord:
    p = candidate.payload
    payload = {
        "query_id": p["query_id"],
        "query": p["query"],
        "title": p["title"],
        "description": p["description"],
        "instruction_og": p["narrative"],
        "instruction_changed": p["instruction"],
        "change": p["change"],
        "candidate": p["k"],
        "grades": p["grades"],
        "flipped": flipped,
        "relevant": sorted(doc for doc, role in roles.items() if role == RELEVANT),
    }
    return writer.child(candidate, "altered_topic", payload)
