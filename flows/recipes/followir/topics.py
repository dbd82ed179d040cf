"""Topic selection: TREC topics with a narrative (and, for an evaluation set, enough judged-relevant documents),
a fixed sample of them, and the judged documents each will be re-judged on.

A topic item holds the topic's fields and the grades of its judged documents (ids only: a TREC topic has
hundreds). An evaluation topic also brings one ``judged`` item per relevant document, which the altered
narratives are re-judged on, and up to ``spot_checks`` judged non-relevant ones, which must stay non-relevant.
"""

from __future__ import annotations

from ifsynth.flows.recipes.followir.settings import FollowIRParams
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter
from ifsynth.schemas.records import ItemRecord, ItemStatus, StageCounts
from ifsynth.schemas.seeds import SeedPair, SeedPassage
from ifsynth.warehouse.keys import hash_sample, item_id

RELEVANT, SPOT_CHECK = "relevant", "spot_check"


def is_topic(item: ItemRecord) -> bool:
    return item.kind == "topic"


def select_topics(ctx: RunContext, order: int, *, stage: str) -> StageCounts:
    params = ctx.params
    assert isinstance(params, FollowIRParams)
    eligible: list[str] = []
    reasons: dict[str, str] = {}
    pairs = list(ctx.source.pairs())  # read once: a TREC collection's judged documents are many
    for pair in pairs:
        reason = _reason(pair, params)
        if reason:
            reasons[pair.query.query_id] = reason
        else:
            eligible.append(pair.query.query_id)
    keep = len(eligible) if ctx.config.limit is None else ctx.config.limit
    chosen = set(hash_sample(eligible, keep, key=lambda qid: f"{params.seed}:{qid}"))
    writer = StageWriter(ctx, stage, order, total=len(eligible) + len(reasons))
    for pair in pairs:
        qid = pair.query.query_id
        topic_id = item_id("topic", [], qid)
        if qid in reasons:
            verdict = writer.verdict(topic_id, "reject", judge="rule", reason=reasons[qid])
            topic = _topic(writer, topic_id, pair, params, status="rejected")
            writer.add(topic_id, Outcome("reject", items=[topic], verdicts=[verdict], n_out=0))
        elif qid in chosen:
            topic = _topic(writer, topic_id, pair, params)
            judged = _judged(writer, topic, pair, params) if params.mode == "eval" else []
            writer.add(topic_id, Outcome("pass", items=[topic, *judged], n_out=1))
        else:
            writer.add(topic_id, Outcome("set_aside"))
        ctx.progress.advance(stage)
    return writer.close()


def _reason(pair: SeedPair, params: FollowIRParams) -> str | None:
    topic = pair.query
    if not topic.narrative.strip():
        return "the topic has no narrative, the instruction FollowIR builds on"
    if not (getattr(topic, params.query_from) or topic.text).strip():
        return f"the topic has neither a {params.query_from} nor a query text"
    if params.mode == "eval" and len(pair.positives) < params.min_relevant:
        return f"{len(pair.positives)} judged-relevant documents; at least {params.min_relevant} needed"
    return None


def _topic(
    writer: StageWriter, topic_id: str, pair: SeedPair, params: FollowIRParams, status: ItemStatus = "ok"
) -> ItemRecord:
    topic = pair.query
    return ItemRecord(
        run_id=writer.ctx.run_id,
        item_id=topic_id,
        stage=writer.stage,
        kind="topic",
        group_id=topic.query_id,
        payload={
            "query_id": topic.query_id,
            "query": getattr(topic, params.query_from) or topic.text,
            "title": topic.title,
            "description": topic.description,
            "narrative": topic.narrative,
            "instruction": topic.narrative,
            "grades": {p.doc_id: p.grade for p in (*pair.positives, *pair.negatives)},
        },
        status=status,
    )


def _judged(writer: StageWriter, topic: ItemRecord, pair: SeedPair, params: FollowIRParams) -> list[ItemRecord]:
    """The topic's relevant documents and a fixed sample of its judged non-relevant ones."""
    key = f"{params.seed}:{topic.group_id}:{{}}".format
    spot = hash_sample(list(pair.negatives), params.spot_checks, key=lambda p: key(p.doc_id))
    chosen = [(RELEVANT, p) for p in pair.positives] + [(SPOT_CHECK, p) for p in sorted(spot, key=lambda p: p.doc_id)]
    return [_document(writer, topic, role, passage, number) for number, (role, passage) in enumerate(chosen, 1)]


def _document(writer: StageWriter, topic: ItemRecord, role: str, passage: SeedPassage, number: int) -> ItemRecord:
    payload = {"doc_id": passage.doc_id, "title": passage.title, "passage": passage.text, "grade": passage.grade}
    return writer.child(topic, "judged", {**payload, "role": role}, passage.doc_id, ord=number)
