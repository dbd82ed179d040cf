"""Topic selection: TREC topics with a narrative (and, for an evaluation set, enough judged-relevant documents),
a fixed sample of them, and the judged documents each will be re-judged on.

A topic item holds the topic's fields and the grades of its judged documents (ids only: a TREC topic has
hundreds). An evaluation topic also brings one ``judged`` item per relevant document, which the altered
narratives are re-judged on, and up to ``spot_checks`` judged non-relevant ones, which must stay non-relevant.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ifsynth.flows.recipes.followir.settings import FollowIRParams
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Decided, Env, Outcome, RuleStage
from ifsynth.schemas.followir import RELEVANT, SPOT_CHECK, JudgedDocument, Role, Topic
from ifsynth.schemas.records import ItemRecord, ItemStatus
from ifsynth.schemas.seeds import SeedPair, SeedPassage
from ifsynth.warehouse.keys import hash_sample, item_id


def is_topic(item: ItemRecord) -> bool:
    return item.kind == "topic"


@dataclass(frozen=True)
class Drawn:
    """A TREC topic with its judged documents, and whether the run's sample (``--limit``) drew it among the
    eligible ones."""

    pair: SeedPair
    drawn: bool


@dataclass(frozen=True, kw_only=True)
class SelectTopics(RuleStage[Drawn]):
    """Every topic of the seeds: rejected when it cannot become a FollowIR topic, else kept when drawn, else
    set aside."""

    name: str = "select"

    def inputs(self, ctx: RunContext) -> list[list[Drawn]]:
        """One page: the sample is drawn among all eligible topics (the limit is the run's, not the recipe's)."""
        params = ctx.params
        assert isinstance(params, FollowIRParams)
        pairs = list(ctx.source.pairs())  # read once: a TREC collection's judged documents are many
        eligible = [pair.query.query_id for pair in pairs if _reason(pair, params) is None]
        keep = len(eligible) if ctx.config.limit is None else ctx.config.limit
        chosen = set(hash_sample(eligible, keep, key=lambda qid: f"{params.seed}:{qid}"))
        return [[Drawn(pair, pair.query.query_id in chosen) for pair in pairs]]

    def decide(self, env: Env, page: list[Drawn]) -> Iterable[Decided]:
        params = env.params
        assert isinstance(params, FollowIRParams)
        for entry in page:
            pair = entry.pair
            topic_id = item_id("topic", [], pair.query.query_id)
            reason = _reason(pair, params)
            if reason:
                verdict = env.verdict(topic_id, "reject", judge="rule", reason=reason)
                topic = _topic(env, topic_id, pair, params, status="rejected")
                yield topic_id, Outcome("reject", items=[topic], verdicts=[verdict], n_out=0)
            elif entry.drawn:
                topic = _topic(env, topic_id, pair, params)
                judged = _judged(env, topic, pair, params) if params.mode == "eval" else []
                yield topic_id, Outcome("pass", items=[topic, *judged], n_out=1)
            else:
                yield topic_id, Outcome("set_aside")


def _reason(pair: SeedPair, params: FollowIRParams) -> str | None:
    topic = pair.query
    if not topic.narrative.strip():
        return "the topic has no narrative, the instruction FollowIR builds on"
    if not (getattr(topic, params.query_from) or topic.text).strip():
        return f"the topic has neither a {params.query_from} nor a query text"
    if params.mode == "eval" and len(pair.positives) < params.min_relevant:
        return f"{len(pair.positives)} judged-relevant documents; at least {params.min_relevant} needed"
    return None


def _topic(env: Env, topic_id: str, pair: SeedPair, params: FollowIRParams, status: ItemStatus = "ok") -> ItemRecord:
    topic = pair.query
    payload = Topic(
        query_id=topic.query_id,
        query=getattr(topic, params.query_from) or topic.text,
        title=topic.title,
        description=topic.description,
        narrative=topic.narrative,
        instruction=topic.narrative,
        grades={p.doc_id: p.grade for p in (*pair.positives, *pair.negatives)},
    )
    return ItemRecord(
        run_id=env.run_id,
        item_id=topic_id,
        stage=env.stage,
        kind="topic",
        group_id=topic.query_id,
        payload=payload.model_dump(mode="json"),
        status=status,
    )


def _judged(env: Env, topic: ItemRecord, pair: SeedPair, params: FollowIRParams) -> list[ItemRecord]:
    """The topic's relevant documents and a fixed sample of its judged non-relevant ones."""
    key = f"{params.seed}:{topic.group_id}:{{}}".format
    spot = hash_sample(list(pair.negatives), params.spot_checks, key=lambda p: key(p.doc_id))
    chosen: list[tuple[Role, SeedPassage]] = [(RELEVANT, p) for p in pair.positives]
    chosen += [(SPOT_CHECK, p) for p in sorted(spot, key=lambda p: p.doc_id)]
    return [_document(env, topic, role, passage, number) for number, (role, passage) in enumerate(chosen, 1)]


def _document(env: Env, topic: ItemRecord, role: Role, passage: SeedPassage, number: int) -> ItemRecord:
    payload = JudgedDocument(
        doc_id=passage.doc_id, title=passage.title, passage=passage.text, grade=passage.grade, role=role
    )
    return env.child(topic, "judged", payload, passage.doc_id, ord=number)
