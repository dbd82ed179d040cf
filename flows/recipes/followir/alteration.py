"""Choosing each topic's alteration: the first candidate, in the order written, that narrows relevance by the
configured share.

A candidate is passed over, with a ``rule`` verdict that says why, when one of its re-judgments is missing (the
call failed or its answer did not parse), when it makes a spot-checked non-relevant document relevant (an
alteration may only narrow relevance, or the original non-relevant judgments would no longer hold), or when the
share of relevant documents it flips lies outside ``flip_share``. Candidates after the kept one are set aside
unexamined. A kept candidate becomes an ``altered_topic`` item: the topic, both narratives and the flipped
documents."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import groupby
from typing import ClassVar

from ifsynth.flows.recipes.followir.settings import FollowIRParams
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Decided, Env, Outcome, RuleStage
from ifsynth.schemas.followir import RELEVANT, SPOT_CHECK, AlteredTopic, Candidate, JudgedDocument, Label, Role
from ifsynth.schemas.records import ItemRecord, Payload

JUDGE = "rule:flip_share"


@dataclass(frozen=True)
class Rejudged:
    """A candidate alteration with its re-judgments and the role of each document its topic is re-judged on."""

    candidate: ItemRecord
    labels: list[ItemRecord]
    roles: dict[str, Role]


@dataclass(frozen=True, kw_only=True)
class SelectAlteration(RuleStage[Rejudged]):
    """Per topic, the first candidate of ``source`` whose re-judgments in ``labels`` narrow relevance as asked."""

    name: str = "select_alteration"
    source: str = "alter"
    labels: str = "rejudge"
    documents: str = "select"
    reads: ClassVar[type[Payload]] = Candidate

    def inputs(self, ctx: RunContext) -> list[list[Rejudged]]:
        """Every topic's candidates (those short of a re-judgment too), in topic order, each topic's in the order
        written."""
        by_topic: dict[str, list[ItemRecord]] = {}
        for page in ctx.warehouse.items(ctx.run_id, self.source, status=None):
            for item in page:
                if item.status in ("ok", "failed", "parse_error"):  # the last two were short of a re-judgment
                    by_topic.setdefault(item.group_id, []).append(item)
        judged: dict[str, list[ItemRecord]] = {}
        for page in ctx.warehouse.items(ctx.run_id, self.labels):
            for item in page:
                judged.setdefault(item.parent_ids[0], []).append(item)
        roles: dict[str, dict[str, Role]] = {}
        for page in ctx.warehouse.items(ctx.run_id, self.documents):
            for item in page:
                if item.kind == "judged":
                    document = item.read(JudgedDocument)
                    roles.setdefault(item.group_id, {})[document.doc_id] = document.role
        return [
            [
                Rejudged(candidate, judged.get(candidate.item_id, []), roles[group])
                for group in sorted(by_topic)
                for candidate in sorted(by_topic[group], key=lambda item: item.read(Candidate).k)
            ]
        ]

    def decide(self, env: Env, page: list[Rejudged]) -> Iterable[Decided]:
        params = env.params
        assert isinstance(params, FollowIRParams)
        for _, candidates in groupby(page, key=lambda entry: entry.candidate.group_id):
            kept = False
            for entry in candidates:
                if kept:
                    yield entry.candidate.item_id, Outcome("set_aside")
                    continue
                outcome, flipped = _examine(env, entry, params)
                if outcome.decision == "pass":
                    kept = True
                    outcome.items.append(_altered_topic(env, entry.candidate, flipped, entry.roles))
                yield entry.candidate.item_id, outcome


def _examine(env: Env, entry: Rejudged, params: FollowIRParams) -> tuple[Outcome, list[str]]:
    """The candidate's verdict, and the relevant documents it flips."""
    roles = entry.roles
    relevant = sorted(doc for doc, role in roles.items() if role == RELEVANT)
    got = {label.doc_id: label for label in (item.read(Label) for item in entry.labels)}
    flipped = [doc for doc in relevant if doc in got and not got[doc].relevant]
    share = len(flipped) / len(relevant) if relevant else 0.0
    low, high = params.flip_share
    missing = sorted(set(roles) - set(got))
    widened = [doc for doc, role in sorted(roles.items()) if role == SPOT_CHECK and doc in got and got[doc].relevant]
    measured = f"flips {len(flipped)} of {len(relevant)} relevant documents ({share:.0%})"
    threshold: float | None = None
    rule = "flip share"
    if missing:
        reason = f"{len(missing)} of {len(roles)} re-judgments missing (failed or unparsable): {', '.join(missing)}"
        reason, rule = f"{reason}; {measured}", "re-judgments missing"
    elif widened:
        reason = f"widens relevance: originally non-relevant {', '.join(widened)} judged relevant under it; {measured}"
        rule = "widens relevance"
    elif not low <= share <= high:
        reason, threshold = f"{measured}, outside [{low:.0%}, {high:.0%}]", low if share < low else high
    else:
        verdict = env.verdict(entry.candidate.item_id, "pass", judge=JUDGE, reason=measured, score=share, rule=rule)
        return Outcome("pass", verdicts=[verdict], n_out=1), flipped
    item_id = entry.candidate.item_id
    verdict = env.verdict(item_id, "reject", judge=JUDGE, reason=reason, score=share, threshold=threshold, rule=rule)
    return Outcome("reject", verdicts=[verdict], n_out=0), flipped


def _altered_topic(env: Env, candidate: ItemRecord, flipped: list[str], roles: dict[str, Role]) -> ItemRecord:
    p = candidate.read(Candidate)
    payload = AlteredTopic(
        query_id=p.query_id,
        query=p.query,
        title=p.title,
        description=p.description,
        instruction_og=p.narrative,
        instruction_changed=p.instruction,
        change=p.change,
        candidate=p.k,
        grades=p.grades,
        flipped=flipped,
        relevant=sorted(doc for doc, role in roles.items() if role == RELEVANT),
    )
    return env.child(candidate, "altered_topic", payload)
