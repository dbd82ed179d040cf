"""Dense retrieval: passages and instructed queries embedded by any OpenAI-compatible ``/embeddings`` endpoint
(TEI, vLLM, Ollama, OpenAI) through the gateway, ranked by cosine similarity.

Instruction-tuned embedders expect the instruction in a wording of their own; ``PROMPT_FORMATS`` holds the two
built in (E5-Mistral's and GTE's ``Instruct: ...\\nQuery: ...``, and the plain concatenation BM25 is given), and
any other is a ``str.format`` pattern over ``{instruction}`` and ``{query}``. Passages are embedded as they
are (title and text).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ifsynth.flows.evaluation.retrieval import DECIMALS, Pools, Run
from ifsynth.flows.llm.embed import BATCH, EmbedCounts, Embedder
from ifsynth.flows.llm.gateway import Gateway
from ifsynth.flows.llm.limits import Budget
from ifsynth.flows.llm.route import DEFAULT_KEY_ENV, public_url
from ifsynth.schemas.config import Endpoint, RunConfig
from ifsynth.schemas.errors import ConfigError
from ifsynth.warehouse.store import Warehouse

PROMPT_FORMATS = {"instruct": "Instruct: {instruction}\nQuery: {query}", "plain": "{instruction} {query}"}
STAGE = "embed"
QUERY_CHUNK = 256  # queries scored against the corpus at a time: bounds the similarity matrix in memory


def prompt_format(name: str) -> str:
    """A built-in format by name, or the pattern itself; refused unless it places the query."""
    pattern = PROMPT_FORMATS.get(name, name)
    try:
        pattern.format(instruction="", query="")
    except (KeyError, IndexError, ValueError):
        pattern = ""
    if "{query}" not in pattern:
        raise ConfigError(
            f"--embed-format must be {' or '.join(PROMPT_FORMATS)}, or a pattern with {{query}} "
            f"(and {{instruction}}); got `{name}`"
        )
    return pattern


@dataclass
class Dense:
    """One embedding model at one endpoint, as a ``Retriever``; ``counts`` add up over every ``rank``."""

    model: str
    base_url: str
    warehouse: Warehouse
    run_id: str  # what llm_calls files the requests under (``evaluate:<release>``)
    prompt: str = PROMPT_FORMATS["instruct"]
    api_key_env: str = DEFAULT_KEY_ENV
    batch: int = BATCH
    budget: Budget | None = None
    counts: EmbedCounts = field(default_factory=EmbedCounts)

    def query_text(self, instruction: str, query: str) -> str:
        """The format's wording; with no instruction the bare query, as every mode without one is scored."""
        return self.prompt.format(instruction=instruction, query=query) if instruction else query

    def rank(self, docs: Sequence[tuple[str, str]], queries: Mapping[str, str], depth: int, pools: Pools | None) -> Run:
        """Top ``depth`` passages per query by cosine similarity, or each query's pool, all scored."""
        qids = list(queries)
        passages, asked = asyncio.run(self._embed([text for _, text in docs], [queries[q] for q in qids]))
        ids = [doc_id for doc_id, _ in docs]
        if pools is not None:
            index = {doc_id: i for i, doc_id in enumerate(ids)}
            return {
                qid: {doc: _round(passages[index[doc]] @ asked[row]) for doc in pools.get(qid, ()) if doc in index}
                for row, qid in enumerate(qids)
            }
        k = min(depth, len(ids))
        run: Run = {}
        for start in range(0, len(qids), QUERY_CHUNK):
            scores = asked[start : start + QUERY_CHUNK] @ passages.T
            top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
            for qid, row, found in zip(qids[start : start + QUERY_CHUNK], scores, top, strict=True):
                run[qid] = {ids[i]: _round(row[i]) for i in found}
        return run

    def accounting(self) -> str:
        return self.counts.line(self.model, public_url(self.base_url))

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of ``texts`` (cached ones read, the others embedded and stored), one row each."""
        return asyncio.run(self._vectors(list(texts)))

    async def _embed(self, passages: list[str], queries: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Unit vectors of the passages and of the queries, in one pass through the gateway."""
        unit = await self._vectors([*passages, *queries])
        return unit[: len(passages)], unit[len(passages) :]

    async def _vectors(self, texts: list[str]) -> np.ndarray:
        endpoint = Endpoint(base_url=self.base_url, api_key_env=self.api_key_env)
        config = RunConfig(recipe="evaluate", seeds="release", model=self.model, endpoint=endpoint)
        async with Gateway(config, self.warehouse, self.run_id, budget=self.budget) as gateway:
            embedder = Embedder(gateway, self.model, STAGE, batch=self.batch, counts=self.counts)
            vectors = await embedder.vectors(texts)
        self.warehouse.flush()
        return _unit(np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1))


def _unit(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (a zero row stays zero: it matches nothing)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


def _round(score: float) -> float:
    return round(float(score), DECIMALS)
