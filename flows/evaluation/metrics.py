"""The recipes' metrics as pure functions: rankings in, numbers out, no I/O.

Definitions follow the papers as restated in RECIPES.md. Where a public reference implementation computes
something else, the reference behaviour is available under an explicit ``Reference`` value, never by default:

- ``infosearch-wheel``: the InfoSearch metric code as its published wheel ships it: WISE's reward is linear in
  ``R_ori - R_ins``, its -1 penalty can never fire, and the full reward needs ``R_ori < N`` (strict); SICR as
  the source tree computes it (below); averages are taken per query, then over queries.
- ``infosearch-source``: the InfoSearch source tree: square-root reward, ``R_ori < N``, and SICR counting only
  the last gold document of a query (its counter is reset per document) with a special case for
  ``R_ori = R_ins = 1``; averages per query, then over queries.
- ``ifir``: the IFIR code: nDCG's ideal gain comes from the retrieved list's own relevance labels, and INSTFOL
  normalises by a fixed maximum of 3 with its special cases.

Conventions: ranks are 1-based. A run's ranking orders documents by score, ties broken by document id in
descending order (trec_eval's rule), so every consumer of a run agrees on its ranks. A document absent from a
run has rank ``len(run) + 1`` and a score below every retrieved score.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Literal

Reference = Literal["paper", "infosearch-wheel", "infosearch-source", "ifir"]
REFERENCES: tuple[str, ...] = ("paper", "infosearch-wheel", "infosearch-source", "ifir")
INFOSEARCH_REFERENCES = ("infosearch-wheel", "infosearch-source")
WISE_K = 20
IFIR_MAX_SCORE = 3.0

Scores = Mapping[str, float]  # doc id -> retrieval score, for one query
Qrels = Mapping[str, int]  # doc id -> graded relevance, for one query


def ranking(scores: Scores) -> list[str]:
    """Doc ids best first: score descending, ties by doc id descending (as trec_eval breaks them)."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)]


@dataclass(frozen=True)
class Position:
    """Where one document landed in one run."""

    rank: int
    score: float


def positions(scores: Scores) -> dict[str, Position]:
    return {doc: Position(rank, scores[doc]) for rank, doc in enumerate(ranking(scores), start=1)}


def position(placed: Mapping[str, Position], doc: str) -> Position:
    """A document's rank and score; an absent document ranks just after the last retrieved one."""
    return placed.get(doc) or Position(len(placed) + 1, -math.inf)


# -- classic ranking metrics, per query ------------------------------------------------------------


def dcg(gains: Iterable[float]) -> float:
    return sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, start=1))


def ndcg_at_k(ranked: Sequence[str], qrels: Qrels, k: int, reference: Reference = "paper") -> float:
    """nDCG@k with linear gains (pytrec_eval's). The ideal list is the best k of the judged documents; under
    ``ifir`` it is the retrieved top k's own labels, sorted, so one relevant document at rank 1 scores 1."""
    gains = [max(qrels.get(doc, 0), 0) for doc in ranked[:k]]
    if reference == "ifir":
        ideal = sorted(gains, reverse=True)
    else:
        ideal = sorted((g for g in qrels.values() if g > 0), reverse=True)[:k]
    best = dcg(ideal)
    return dcg(gains) / best if best > 0 else 0.0


def average_precision(ranked: Sequence[str], qrels: Qrels) -> float:
    """Sum of precision at each relevant rank, over the number of relevant documents (retrieved or not)."""
    relevant = sum(1 for g in qrels.values() if g > 0)
    if relevant == 0:
        return 0.0
    hits, total = 0, 0.0
    for rank, doc in enumerate(ranked, start=1):
        if qrels.get(doc, 0) > 0:
            hits += 1
            total += hits / rank
    return total / relevant


def reciprocal_rank_at_k(ranked: Sequence[str], qrels: Qrels, k: int) -> float:
    for rank, doc in enumerate(ranked[:k], start=1):
        if qrels.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def robustness_at_k(per_instance: Mapping[str, float], groups: Mapping[str, str]) -> float:
    """InstructIR's Robustness@k: the worst instance score of each group (all instructions of one core query),
    averaged over groups. ``per_instance`` holds nDCG@k per instance id, ``groups`` maps instance to group."""
    worst: dict[str, float] = {}
    for instance, value in per_instance.items():
        group = groups[instance]
        worst[group] = min(value, worst.get(group, value))
    return fmean(worst.values()) if worst else 0.0


# -- p-MRR (FollowIR) ------------------------------------------------------------------------------


def pmrr_pair(rank_og: int, rank_new: int) -> float:
    """One changed document: positive when it moved down under the new instruction, negative when up."""
    if rank_og > rank_new:
        return (1 / rank_og) / (1 / rank_new) - 1
    return 1 - (1 / rank_new) / (1 / rank_og)


def p_mrr(og: Mapping[str, Scores], new: Mapping[str, Scores], changed: Mapping[str, Sequence[str]]) -> float | None:
    """Mean over queries of the mean ``pmrr_pair`` over that query's changed documents (macro).

    ``og`` and ``new`` are runs (query -> doc -> score) under the original and the altered instruction;
    ``changed`` lists, per query, the documents whose relevance differs between the two. None when no query
    has a changed document."""
    per_query = []
    for query, docs in changed.items():
        if not docs:
            continue
        before, after = positions(og.get(query, {})), positions(new.get(query, {}))
        per_query.append(fmean(pmrr_pair(position(before, d).rank, position(after, d).rank) for d in docs))
    return fmean(per_query) if per_query else None


# -- WISE and SICR (InfoSearch) --------------------------------------------------------------------


@dataclass(frozen=True)
class Triple:
    """One gold document of one instructed query, placed in the original, instructed and reversed runs.
    ``positives`` is N, the number of positives of the core query in the original mode."""

    query: str
    doc: str
    ori: Position
    ins: Position
    rev: Position
    positives: int


def wise_reward(r_ori: int, r_ins: int, n: int, k: int = WISE_K, reference: Reference = "paper") -> float:
    wheel = reference == "infosearch-wheel"
    top = r_ori < n if reference in INFOSEARCH_REFERENCES else r_ori <= n
    if top and r_ins == 1:
        return 1.0
    if r_ori <= k:
        moved = (r_ori - r_ins) if wheel else math.sqrt(r_ori - r_ins)
        return (1 - moved / k) / math.sqrt(r_ins)
    return 0.01


def wise_penalty(r_ori: int, r_ins: int, r_rev: int, reference: Reference = "paper") -> float:
    # The wheel tests `ins < ori < rev` here, which the caller has already ruled out: its -1 never fires.
    worst = (r_ins < r_ori < r_rev) if reference == "infosearch-wheel" else (r_rev < r_ori < r_ins)
    if worst:
        return -1.0
    if r_ori <= r_ins:
        return (r_ori - r_ins) / r_ins
    return (r_rev - r_ori) / r_ori  # here r_rev <= r_ori


def wise_value(triple: Triple, k: int = WISE_K, reference: Reference = "paper") -> float:
    r_ori, r_ins, r_rev = triple.ori.rank, triple.ins.rank, triple.rev.rank
    if r_ins <= r_ori < r_rev:
        return wise_reward(r_ori, r_ins, triple.positives, k, reference)
    return wise_penalty(r_ori, r_ins, r_rev, reference)


def sicr_value(triple: Triple, reference: Reference = "paper") -> bool:
    """The paper's strict criterion: better rank and score when instructed, worse when reversed."""
    ori, ins, rev = triple.ori, triple.ins, triple.rev
    strict = ins.rank < ori.rank and ins.score > ori.score and ori.rank < rev.rank and ori.score > rev.score
    if reference in INFOSEARCH_REFERENCES and ori.rank == 1:
        return ins.rank == 1 and rev.rank > 1 and ins.score >= ori.score > rev.score
    return strict


def wise(triples: Sequence[Triple], k: int = WISE_K, reference: Reference = "paper") -> float | None:
    """Mean WISE over instances (the paper); per query then over queries under an InfoSearch reference."""
    return _average(triples, [wise_value(t, k, reference) for t in triples], reference)


def sicr(triples: Sequence[Triple], reference: Reference = "paper") -> float | None:
    """Fraction of instances meeting the strict criterion. Under an InfoSearch reference, a query's value is
    that of its last gold document divided by its number of golds (the reference resets its counter per
    document), averaged over queries."""
    if reference not in INFOSEARCH_REFERENCES:
        return fmean(float(sicr_value(t)) for t in triples) if triples else None
    by_query: dict[str, list[Triple]] = {}
    for t in triples:
        by_query.setdefault(t.query, []).append(t)
    values = [float(sicr_value(golds[-1], reference)) / len(golds) for golds in by_query.values()]
    return fmean(values) if values else None


def _average(triples: Sequence[Triple], values: Sequence[float], reference: Reference) -> float | None:
    if not values:
        return None
    if reference not in INFOSEARCH_REFERENCES:
        return fmean(values)
    by_query: dict[str, list[float]] = {}
    for t, v in zip(triples, values, strict=True):
        by_query.setdefault(t.query, []).append(v)
    return fmean(fmean(v) for v in by_query.values())


# -- INSTFOL (IFIR) --------------------------------------------------------------------------------


def weighted_score(top_logprobs: Iterable[tuple[str, float]], maximum: int, floor: float = 0.0) -> float | None:
    """The probability-weighted mean of the score tokens among a position's top log-probabilities: tokens
    that are integers in 0..maximum with probability >= ``floor``, renormalised. None when there is none.
    The paper sets no floor; IFIR's code drops tokens under 0.01."""
    weights: dict[int, float] = {}
    for token, logprob in top_logprobs:
        text = token.strip()
        if not text.isdigit() or int(text) > maximum:
            continue
        p = math.exp(logprob)
        if p >= floor:
            weights[int(text)] = weights.get(int(text), 0.0) + p
    total = sum(weights.values())
    return sum(s * p for s, p in weights.items()) / total if total > 0 else None


def instfol_query(s_query: float, s_instructed: float, maximum: float, reference: Reference = "paper") -> float:
    """(S_inst - S_q) / (max - S_q): the share of the possible gain that the instruction brought.

    The paper leaves S_q = max undefined (a zero denominator). ifsynth's choice: no gain is possible there, so
    the figure is the loss scaled by the maximum, (S_inst - max) / max, which is 0 when the instruction keeps
    every passage at the maximum and -1 when it brings only 0s; the range stays [-1, 1]. Under ``ifir`` the maximum
    is fixed at 3 whatever the scale, equal means give 0, and S_q = 3 gives the raw difference."""
    if reference == "ifir":
        if s_instructed == s_query:
            return 0.0
        if s_query == IFIR_MAX_SCORE:
            return s_instructed - s_query
        return (s_instructed - s_query) / (IFIR_MAX_SCORE - s_query)
    if s_query >= maximum:
        return (s_instructed - s_query) / maximum
    return (s_instructed - s_query) / (maximum - s_query)


def mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return fmean(values) if values else None
