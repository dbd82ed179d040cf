"""Retrieval runs: BM25 via bm25s, and TREC run files in and out (``qid Q0 docid rank score tag``); a
``Retriever`` is what ranks a release's passages (BM25 here, dense retrieval in ``dense``).

A run is ``{qid: {doc_id: score}}``. Scores are rounded to the six decimals a run file keeps, so a run scored
in memory and the same run read back from its file rank every document identically.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ifsynth.flows.evaluation.metrics import ranking
from ifsynth.schemas.errors import ConfigError

Run = dict[str, dict[str, float]]
DECIMALS = 6
Pools = Mapping[str, Collection[str]]


class Retriever(Protocol):
    """A system that ranks passages: how it words a query with its instruction, and how it ranks."""

    def query_text(self, instruction: str, query: str) -> str: ...

    def rank(self, docs: Sequence[tuple[str, str]], queries: Mapping[str, str], depth: int, pools: Pools | None) -> Run:
        """Top ``depth`` per query, or with ``pools`` each query's own candidates, all of them scored."""
        ...


def joined(instruction: str, query: str) -> str:
    """The instruction and the query as one text: the bare query when the instruction is empty."""
    return f"{instruction} {query}".strip()


@dataclass(frozen=True)
class Bm25:
    """BM25 with its two parameters; Lucene's defaults unless a variant sets them."""

    k1: float = 1.5
    b: float = 0.75

    def query_text(self, instruction: str, query: str) -> str:
        return joined(instruction, query)

    def rank(self, docs: Sequence[tuple[str, str]], queries: Mapping[str, str], depth: int, pools: Pools | None) -> Run:
        return bm25(docs, queries, depth, pools, k1=self.k1, b=self.b)


def bm25(
    docs: Sequence[tuple[str, str]],
    queries: Mapping[str, str],
    depth: int = 1000,
    pools: Pools | None = None,
    *,
    k1: float = 1.5,
    b: float = 0.75,
) -> Run:
    """Top ``depth`` documents per query by BM25 (Lucene variant, k1 1.5, b 0.75 unless given), English stop words and
    Snowball stemming; documents with a zero score are not retrieved. With ``pools`` each query reranks its
    own candidates instead: every pooled document of the corpus gets its score (zero included, as a reranker
    orders its whole pool), with the corpus's statistics, and a query without a pool gets nothing."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    ids = [doc_id for doc_id, _ in docs]
    retriever = bm25s.BM25(k1=k1, b=b)
    retriever.index(
        bm25s.tokenize([text for _, text in docs], stopwords="en", stemmer=stemmer, show_progress=False),
        show_progress=False,
    )
    qids = list(queries)
    tokens = bm25s.tokenize(
        [queries[q] for q in qids], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
    )
    if pools is not None:
        return _rerank(retriever, ids, dict(zip(qids, tokens, strict=True)), pools)
    k = min(depth, len(ids))
    run: Run = {}
    for start in range(0, len(qids), 1000):
        found, scores = retriever.retrieve(tokens[start : start + 1000], k=k, show_progress=False)
        for qid, row, row_scores in zip(qids[start : start + 1000], found, scores, strict=True):
            run[qid] = {ids[i]: round(float(s), DECIMALS) for i, s in zip(row, row_scores, strict=True) if s > 0}
    return run


def _rerank(retriever: Any, ids: list[str], tokens: Mapping[str, list[str]], pools: Pools) -> Run:
    index = {doc_id: i for i, doc_id in enumerate(ids)}
    run: Run = {}
    for qid, words in tokens.items():
        pooled = [doc for doc in pools.get(qid, ()) if doc in index]
        known = [word for word in words if word in retriever.vocab_dict]
        scores = retriever.get_scores(known) if known else None
        run[qid] = {doc: round(float(scores[index[doc]]) if scores is not None else 0.0, DECIMALS) for doc in pooled}
    return run


def restrict(run: Run, pools: Pools) -> Run:
    """A run reduced to each query's pool: what a reranker given that pool could have returned."""
    return {qid: {doc: s for doc, s in scores.items() if doc in pools.get(qid, ())} for qid, scores in run.items()}


def write_run(path: str | Path, run: Run, tag: str) -> Path:
    """A TREC run file, queries in their given order, documents best first with ranks from 1."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for qid, scores in run.items():
            for rank, doc in enumerate(ranking(scores), start=1):
                handle.write(f"{qid} Q0 {doc} {rank} {scores[doc]:.{DECIMALS}f} {tag}\n")
    return path


def read_run(path: str | Path) -> Run:
    """Read a TREC run; the score column decides the order (trec_eval's rule), the rank column is not used."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no run file `{path}`; give a TREC run (qid Q0 docid rank score tag)")
    run: Run = {}
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ConfigError(f"`{path.name}` line {number} is not UTF-8 text; a TREC run is a text file") from None
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 6:
                raise ConfigError(
                    f"`{path.name}` line {number} has {len(fields)} fields; "
                    "a TREC run line is qid Q0 docid rank score tag"
                )
            try:
                score = float(fields[4])
            except ValueError:
                raise ConfigError(f"`{path.name}` line {number}: score `{fields[4]}` is not a number") from None
            run.setdefault(fields[0], {})[fields[2]] = score
    return run
