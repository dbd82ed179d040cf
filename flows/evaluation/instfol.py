"""INSTFOL@K (IFIR): does adding the instruction bring passages that an LLM judge finds fit the instruction?

The top K of a query-only run (C_q) and of the instructed run (C_inst) are graded 0..maximum by the judge
through the gateway (cached, recorded like every call). A passage's grade is the probability-weighted mean of
the score tokens, read from the answer's token log-probabilities. The judge runs as the paper's text says
(temperature 0, top_p 0.7, top 5 log-probabilities, every score token counted); ``reference="ifir"`` runs it
as IFIR's code does (top 10, score tokens under probability 0.01 dropped).

An IFIR release is judged level by level: each level's instruction on that level's scale (IFIR's prompts: 0-1,
0-2 and 0-3, law 0-3 throughout), so one passage under two levels is two judgements. A passage is judged whole,
as IFIR's judge code does: the paper's 512-token windows are for its embedding retrievers (appendix B).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ifsynth.flows.evaluation import metrics
from ifsynth.flows.evaluation.retrieval import Run
from ifsynth.flows.evaluation.scoring import ReleaseView
from ifsynth.flows.llm.gateway import Gateway
from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.llm.route import public_url
from ifsynth.prompts.registry import Prompts
from ifsynth.schemas.answers import InstructionFit, instruction_fit
from ifsynth.schemas.config import Endpoint, RunConfig, StructuredOutput
from ifsynth.schemas.errors import ConfigError
from ifsynth.schemas.ifir import LEVEL_MODES, level_of
from ifsynth.warehouse.stats import instructed_mode
from ifsynth.warehouse.store import Warehouse

TEMPLATE = "evaluate/instfol"
STAGE = "instfol"
K = 20
MAXIMUM = 3


@dataclass(frozen=True)
class JudgeSettings:
    """How the judge is sampled and its log-probabilities read."""

    top_p: float
    top_logprobs: int
    floor: float  # score tokens under this probability are dropped before renormalising


JUDGE_SETTINGS: dict[metrics.Reference, JudgeSettings] = {
    "paper": JudgeSettings(top_p=0.7, top_logprobs=5, floor=0.0),
    "ifir": JudgeSettings(top_p=0.7, top_logprobs=10, floor=0.01),
}


@dataclass(frozen=True)
class Judge:
    """The endpoint and model that grade passages; the key is read from ``api_key_env``, never stored."""

    base_url: str
    model: str
    structured_output: StructuredOutput = "json_schema"
    api_key_env: str = "OPENAI_API_KEY"
    local_model: str | None = None  # a GGUF file, with base_url the embedded server's

    def config(self, release: str, recipe: str) -> RunConfig:
        endpoint = Endpoint(
            base_url=self.base_url,
            api_key_env=self.api_key_env,
            structured_output=self.structured_output,
            local_model=self.local_model,
        )
        return RunConfig(recipe=recipe, seeds=f"release:{release}", model=self.model, endpoint=endpoint)


def token_grade(reply: Reply[InstructionFit], maximum: int, floor: float = 0.0) -> float | None:
    """The weighted grade at the first answer token that spells the chosen grade; None without log-probs."""
    if reply.status != "ok" or reply.value is None or not reply.logprobs:
        return None
    chosen = str(reply.value.score)
    for token in reply.logprobs:
        if token["token"].strip() == chosen:
            top = token["top_logprobs"] or [token]
            return metrics.weighted_score(((t["token"], t["logprob"]) for t in top), maximum, floor)
    return None


@dataclass(frozen=True)
class Scale:
    """What one query's passages are graded on: 0..maximum, and for IFIR the level and domain its rubric names."""

    maximum: int
    level: int | None = None
    domain: str | None = None


@dataclass(frozen=True)
class Candidates:
    """One instructed query of one mode: its scale and the two top-K lists the judge grades."""

    mode: str
    query_id: str
    scale: Scale
    c_q: list[str]
    c_inst: list[str]

    def key(self, doc: str) -> tuple[str, str, str]:
        return self.mode, self.query_id, doc


def instfol(
    warehouse: Warehouse,
    view: ReleaseView,
    run: Run,
    query_run: Run,
    judge: Judge,
    *,
    k: int = K,
    maximum: int = MAXIMUM,
    reference: metrics.Reference = "paper",
) -> dict[str, Any]:
    """INSTFOL@k over the instructed mode, or over each level of an IFIR release (``maximum`` is then per
    subset and level). The overall figure is the mean over every judged query of every mode; an IFIR release
    also gets one per level, under ``modes``, for the evaluation report's mode blocks."""
    settings = JUDGE_SETTINGS[reference]
    modes = [m for m in LEVEL_MODES if m in view.queries] if view.levelled else [instructed_mode(view.modes)]
    candidates = [
        Candidates(
            mode,
            qid,
            _scale(view, mode, qid, maximum),
            metrics.ranking(query_run.get(view.run_qid(mode, qid), {}))[:k],
            metrics.ranking(run.get(view.run_qid(mode, qid), {}))[:k],
        )
        for mode in modes
        for qid, row in sorted(view.queries[mode].items())
        if row["instruction"]
    ]
    texts = _passages(warehouse, view.name, {doc for c in candidates for doc in (*c.c_q, *c.c_inst)})
    jobs = [(c, doc, texts.get(doc, "")) for c in candidates for doc in sorted({*c.c_q, *c.c_inst})]
    prompts = Prompts()
    asks = [
        Ask(
            prompt=prompts.render(
                TEMPLATE,
                query=view.queries[c.mode][c.query_id]["query"],
                instruction=view.queries[c.mode][c.query_id]["instruction"],
                passage=piece,
                maximum=c.scale.maximum,
                level=c.scale.level,
                domain=c.scale.domain,
            ),
            schema=instruction_fit(c.scale.maximum),
            role="judge",
            temperature=0.0,
            max_tokens=16,
            logprobs=settings.top_logprobs,
            top_p=settings.top_p,
        )
        for c, _, piece in jobs
    ]
    replies = asyncio.run(_ask(judge.config(view.name, view.recipe), warehouse, f"evaluate:{view.name}", asks))
    grades = {
        c.key(doc): token_grade(reply, c.scale.maximum, settings.floor)
        for (c, doc, _), reply in zip(jobs, replies, strict=True)
    }
    if grades and all(g is None for g in grades.values()):
        failed = next((r.error for r in replies if r.error), None)
        why = f" ({failed})" if failed else "; INSTFOL needs an endpoint that returns them (OpenAI, vLLM)"
        raise ConfigError(f"the judge at {public_url(judge.base_url)} gave no usable token log-probabilities{why}")
    per_query: dict[str, dict[str, float]] = {mode: {} for mode in modes}
    for c in candidates:
        s_q = metrics.mean(g for d in c.c_q if (g := grades[c.key(d)]) is not None)
        s_inst = metrics.mean(g for d in c.c_inst if (g := grades[c.key(d)]) is not None)
        if s_q is not None and s_inst is not None:
            per_query[c.mode][c.query_id] = metrics.instfol_query(s_q, s_inst, c.scale.maximum, reference)
    name = f"instfol@{k}"
    detail: dict[str, Any] = {
        "queries": sum(map(len, per_query.values())),
        "judgements": len(grades),
        "without_logprobs": sum(1 for g in grades.values() if g is None),
        "judge_model": judge.model,
        "top_p": settings.top_p,
        "top_logprobs": settings.top_logprobs,
        "probability_floor": settings.floor,
        "per_query": per_query,
    }
    report: dict[str, Any] = {name: metrics.mean(v for values in per_query.values() for v in values.values())}
    if view.levelled:
        scales: dict[str, dict[str | None, int]] = {}
        for c in candidates:
            scales.setdefault(c.mode, {})[c.scale.domain] = c.scale.maximum
        detail |= {"maximum": scales, "judge_calls": len(jobs)}
        report["modes"] = {mode: {name: metrics.mean(values.values())} for mode, values in per_query.items()}
    else:
        detail |= {"mode": modes[0], "maximum": maximum}
    return report | {"instfol_detail": detail}


def _scale(view: ReleaseView, mode: str, query_id: str, maximum: int) -> Scale:
    """IFIR's scale of the query's subset at the mode's level; ``maximum`` for any other recipe."""
    if not view.levelled:
        return Scale(maximum)
    level, scheme = level_of(mode), view.scheme(mode, query_id)
    return Scale(scheme.judge_maximum[level - 1], level, scheme.domain)


async def _ask(
    config: RunConfig, warehouse: Warehouse, run_id: str, asks: list[Ask[InstructionFit]]
) -> list[Reply[InstructionFit]]:
    async with Gateway(config, warehouse, run_id) as gateway:
        replies = await gateway.ask_many(STAGE, asks)
    warehouse.flush()
    return replies


def _passages(warehouse: Warehouse, release: str, docs: set[str]) -> dict[str, str]:
    rows = warehouse.release_passages(release, doc_ids=docs)
    return {r["doc_id"]: f"{r['title']} {r['text']}".strip() for r in rows}
