"""INSTFOL@K (IFIR): does adding the instruction bring passages that an LLM judge finds fit the instruction?

The top K of a query-only run (C_q) and of the instructed run (C_inst) are graded 0..maximum by the judge
through the gateway (cached, recorded like every call). A passage's grade is the probability-weighted mean of
the score tokens, read from the answer's token log-probabilities. The judge runs as the paper's text says
(temperature 0, top_p 0.7, top 5 log-probabilities, every score token counted); ``reference="ifir"`` runs it
as IFIR's code does (top 10, score tokens under probability 0.01 dropped).
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
from ifsynth.schemas.answers import instruction_fit
from ifsynth.schemas.config import Endpoint, RunConfig
from ifsynth.schemas.errors import ConfigError
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
    structured_output: str = "json_schema"
    api_key_env: str = "OPENAI_API_KEY"

    def config(self, release: str, recipe: str) -> RunConfig:
        endpoint = Endpoint(
            base_url=self.base_url,
            api_key_env=self.api_key_env,
            structured_output=self.structured_output,  # type: ignore[arg-type]
        )
        return RunConfig(recipe=recipe, seeds=f"release:{release}", model=self.model, endpoint=endpoint)


def token_grade(reply: Reply, maximum: int, floor: float = 0.0) -> float | None:
    """The weighted grade at the first answer token that spells the chosen grade; None without log-probs."""
    if reply.status != "ok" or reply.value is None or not reply.logprobs:
        return None
    chosen = str(reply.value.score)  # type: ignore[attr-defined]
    for token in reply.logprobs:
        if token["token"].strip() == chosen:
            top = token["top_logprobs"] or [token]
            return metrics.weighted_score(((t["token"], t["logprob"]) for t in top), maximum, floor)
    return None


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
    settings = JUDGE_SETTINGS[reference]
    mode = instructed_mode(view.modes)
    rows = view.queries[mode]
    lists: dict[str, tuple[list[str], list[str]]] = {}
    for qid, row in rows.items():
        if not row["instruction"]:
            continue
        run_qid = view.run_qid(mode, qid)
        lists[qid] = (
            metrics.ranking(query_run.get(run_qid, {}))[:k],
            metrics.ranking(run.get(run_qid, {}))[:k],
        )
    pairs = sorted({(qid, doc) for qid, (c_q, c_inst) in lists.items() for doc in (*c_q, *c_inst)})
    texts = _passages(warehouse, view.name, {doc for _, doc in pairs})
    prompts = Prompts()
    asks = [
        Ask(
            prompt=prompts.render(
                TEMPLATE,
                query=rows[qid]["query"],
                instruction=rows[qid]["instruction"],
                passage=texts.get(doc, ""),
                maximum=maximum,
            ),
            schema=instruction_fit(maximum),
            role="judge",
            temperature=0.0,
            max_tokens=16,
            logprobs=settings.top_logprobs,
            top_p=settings.top_p,
        )
        for qid, doc in pairs
    ]
    replies = asyncio.run(_ask(judge.config(view.name, view.recipe), warehouse, f"evaluate:{view.name}", asks))
    grades = {pair: token_grade(reply, maximum, settings.floor) for pair, reply in zip(pairs, replies, strict=True)}
    if pairs and all(g is None for g in grades.values()):
        failed = next((r.error for r in replies if r.error), None)
        why = f" ({failed})" if failed else "; INSTFOL needs an endpoint that returns them (OpenAI, vLLM)"
        raise ConfigError(f"the judge at {public_url(judge.base_url)} gave no usable token log-probabilities{why}")
    per_query = []
    for qid, (c_q, c_inst) in lists.items():
        s_q = metrics.mean(g for d in c_q if (g := grades[(qid, d)]) is not None)
        s_inst = metrics.mean(g for d in c_inst if (g := grades[(qid, d)]) is not None)
        if s_q is not None and s_inst is not None:
            per_query.append(metrics.instfol_query(s_q, s_inst, maximum, reference))
    return {
        f"instfol@{k}": metrics.mean(per_query),
        "instfol_detail": {
            "mode": mode,
            "queries": len(per_query),
            "judgements": len(pairs),
            "without_logprobs": sum(1 for g in grades.values() if g is None),
            "judge_model": judge.model,
            "maximum": maximum,
            "top_p": settings.top_p,
            "top_logprobs": settings.top_logprobs,
            "probability_floor": settings.floor,
        },
    }


async def _ask(config: RunConfig, warehouse: Warehouse, run_id: str, asks: list[Ask]) -> list[Reply]:
    async with Gateway(config, warehouse, run_id) as gateway:
        replies = await gateway.ask_many(STAGE, asks)
    warehouse.flush()
    return replies


def _passages(warehouse: Warehouse, release: str, docs: set[str]) -> dict[str, str]:
    rows = warehouse.release_passages(release, doc_ids=docs)
    return {r["doc_id"]: f"{r['title']} {r['text']}".strip() for r in rows}
