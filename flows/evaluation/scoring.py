"""Score a release: retrieve (BM25 built in, or a user's TREC run) and compute the metrics its recipe reports
over the modes it has. Generated and imported releases go through the same code.

The retriever sees ``instruction + " " + query`` in every mode, so a mode whose instruction is empty (an
original mode) is the bare query. A multi-mode release names its run-file queries ``<query id>-<mode>``;
a single-mode release uses the query ids as they are. An IFIR release's modes are its instruction levels, and
each level is also scored per expert domain.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ifsynth.flows.evaluation import metrics
from ifsynth.flows.evaluation.metrics import Reference, Triple
from ifsynth.flows.evaluation.retrieval import Bm25, Retriever, Run, joined
from ifsynth.schemas.errors import ConfigError
from ifsynth.schemas.ifir import SCHEMES, Scheme
from ifsynth.schemas.modes import CHANGED, OG, REVERSED, RecipeMetrics
from ifsynth.warehouse.stats import instructed_mode, release_meta
from ifsynth.warehouse.store import Warehouse

CROSS_MODE = ("robustness@", "p-mrr", "wise", "sicr", "instfol@")


class Share(NamedTuple):
    """One query's part of a figure: the figure is the sum of its queries' ``total`` over that of ``weight``."""

    total: float
    weight: int


@dataclass
class ReleaseView:
    """A release held for scoring: queries and qrels per mode, the corpus on demand."""

    name: str
    recipe: str
    missing: list[str]
    queries: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # mode -> qid -> row
    qrels: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # mode -> qid -> doc -> score
    pools: dict[str, set[str]] = field(default_factory=dict)  # run-file qid -> candidates (a reranking release)

    @property
    def modes(self) -> list[str]:
        return sorted(self.queries)

    @property
    def levelled(self) -> bool:
        """An IFIR release: its modes are instruction levels and its queries belong to expert domains."""
        return self.recipe == "ifir"

    def scheme(self, mode: str, query_id: str) -> Scheme:
        """An IFIR query's subset scheme, from the subset its release row names."""
        subset = self.queries[mode][query_id]["subset"]
        if subset not in SCHEMES:
            raise ConfigError(f"IFIR query `{query_id}` names no subset of {', '.join(SCHEMES)} (it names {subset})")
        return SCHEMES[subset]

    def run_qid(self, mode: str, query_id: str) -> str:
        return query_id if len(self.queries) == 1 else f"{query_id}-{mode}"

    def texts(self, instructions: bool = True, wording: Callable[[str, str], str] = joined) -> dict[str, str]:
        """What the retriever is given, per run-file query id (``wording`` of the instruction and the query);
        the bare queries for a query-only run."""
        return {
            self.run_qid(mode, qid): wording(row["instruction"] if instructions else "", row["query"])
            for mode, rows in self.queries.items()
            for qid, row in rows.items()
        }

    def dimensions(self) -> dict[str, str | None]:
        """The InfoSearch dimension of each run-file query id (None outside InfoSearch)."""
        return {
            self.run_qid(mode, qid): row["dimension"]
            for mode, rows in self.queries.items()
            for qid, row in rows.items()
        }


def load(warehouse: Warehouse, release: str) -> ReleaseView:
    meta = release_meta(warehouse, release)
    view = ReleaseView(release, meta["recipe"], list(json.loads(meta["card"]).get("missing", [])))
    for row in warehouse.release_queries(release):
        view.queries.setdefault(row["mode"], {})[row["query_id"]] = row
    for row in warehouse.release_qrels(release):
        view.qrels.setdefault(row["mode"], {}).setdefault(row["query_id"], {})[row["doc_id"]] = row["score"]
    for row in warehouse.release_top_ranked(release):
        view.pools.setdefault(view.run_qid(row["mode"], row["query_id"]), set()).add(row["doc_id"])
    return view


def corpus(warehouse: Warehouse, view: ReleaseView, dimension: str | None = None) -> list[tuple[str, str]]:
    """The passages to index: one dimension's own and those of no dimension, or, without one, all."""
    rows = warehouse.release_passages(view.name, dimension=dimension)
    if not rows:
        lacking = f" (its import lacked {', '.join(view.missing)})" if view.missing else ""
        raise ConfigError(
            f"release `{view.name}` has no corpus{lacking}, so BM25 cannot run; "
            "score a run made over the full corpus with --run FILE"
        )
    return [(r["doc_id"], f"{r['title']} {r['text']}".strip()) for r in rows]


def bm25_run(
    warehouse: Warehouse, view: ReleaseView, depth: int = 1000, instructions: bool = True, rerank: bool = False
) -> Run:
    """``system_run`` of BM25 with its default parameters."""
    return system_run(warehouse, view, Bm25(), depth, instructions, rerank)


def system_run(
    warehouse: Warehouse,
    view: ReleaseView,
    system: Retriever,
    depth: int = 1000,
    instructions: bool = True,
    rerank: bool = False,
) -> Run:
    """``system`` over the release's corpus, or over each query's pool when ``rerank``. An InfoSearch release
    is searched one dimension at a time, over that dimension's passages, as its public benchmark is."""
    texts, dimensions = view.texts(instructions, system.query_text), view.dimensions()
    run: Run = {}
    for dimension in sorted(set(dimensions.values()), key=lambda d: d or ""):
        part = {qid: text for qid, text in texts.items() if dimensions[qid] == dimension}
        run.update(system.rank(corpus(warehouse, view, dimension), part, depth, view.pools if rerank else None))
    return run


def score(view: ReleaseView, run: Run, spec: RecipeMetrics, references: Sequence[Reference] = ()) -> dict[str, Any]:
    """Every metric the release's recipe calls for (``spec``, from its declaration), over the modes it has."""
    ndcg_ref: Reference = "ifir" if "ifir" in references else "paper"
    info_ref: Reference = next((r for r in references if r in metrics.INFOSEARCH_REFERENCES), "paper")
    known = view.texts()
    report: dict[str, Any] = {
        "release": view.name,
        "recipe": view.recipe,
        "references": list(references) or ["paper"],
        "queries_without_results": sum(1 for qid in known if not run.get(qid)),
        "unknown_queries_in_run": sum(1 for qid in run if qid not in known),
        "modes": {},
    }
    per_mode_ndcg: dict[str, dict[str, float]] = {}
    for mode in view.modes:
        ranked, qrels = _ranked(view, run, mode)
        judged = list(ranked)
        report["modes"][mode] = _figures(spec, ranked, qrels, ndcg_ref)
        if spec.robustness:
            per_mode_ndcg[mode] = {
                qid: metrics.ndcg_at_k(ranked[qid], qrels[qid], spec.robustness, ndcg_ref) for qid in judged
            }
        if view.levelled:
            domains = {qid: view.scheme(mode, qid).domain for qid in judged}
            report.setdefault("by_domain", {})[mode] = {
                domain: _figures(spec, {q: r for q, r in ranked.items() if domains[q] == domain}, qrels, ndcg_ref)
                for domain in sorted(set(domains.values()))
            }

    if spec.robustness and view.modes:
        mode = instructed_mode(view.modes)
        groups = {qid: row["group_id"] for qid, row in view.queries[mode].items()}
        report[f"robustness@{spec.robustness}"] = metrics.robustness_at_k(per_mode_ndcg[mode], groups)
        report["robustness_mode"] = mode
    if OG not in view.queries or CHANGED not in view.queries:
        return report
    og, new, changed = _changed_runs(view, run)
    triples = _triples(view, run) if REVERSED in view.queries else None
    report.update(_instruction_following(og, new, changed, triples, info_ref))
    if triples is not None:
        report["gold_instances"] = len(triples)
    dimension = {qid: row["dimension"] for qid, row in view.queries[CHANGED].items()}
    if any(dimension.values()):
        report["by_dimension"] = {
            dim: _instruction_following(
                og,
                new,
                {q: docs for q, docs in changed.items() if dimension[q] == dim},
                None if triples is None else [t for t in triples if dimension[t.query] == dim],
                info_ref,
            )
            for dim in sorted({d for d in dimension.values() if d})
        }
    return report


def _figures(
    spec: RecipeMetrics, ranked: dict[str, list[str]], qrels: dict[str, dict[str, int]], reference: Reference
) -> dict[str, Any]:
    """The recipe's per-query metrics averaged over the queries of ``ranked`` (each one with a positive)."""
    values = _per_query(spec, ranked, qrels, reference)
    return {"queries": len(ranked)} | {name: metrics.mean(found.values()) for name, found in values.items()}


def _per_query(
    spec: RecipeMetrics, ranked: dict[str, list[str]], qrels: dict[str, dict[str, int]], reference: Reference
) -> dict[str, dict[str, float]]:
    """Each per-mode metric of the recipe, per query of ``ranked``, in the order a report lists them."""
    values: dict[str, dict[str, float]] = {}
    for k in spec.ndcg:
        values[f"ndcg@{k}"] = {q: metrics.ndcg_at_k(r, qrels[q], k, reference) for q, r in ranked.items()}
    if spec.map:
        values["map"] = {q: metrics.average_precision(r, qrels[q]) for q, r in ranked.items()}
    for k in spec.mrr:
        values[f"mrr@{k}"] = {q: metrics.reciprocal_rank_at_k(r, qrels[q], k) for q, r in ranked.items()}
    return values


def query_values(
    view: ReleaseView, run: Run, spec: RecipeMetrics, mode: str, references: Sequence[Reference] = ()
) -> dict[str, dict[str, float]]:
    """The per-mode metrics of one mode, per judged query (those ``score`` averages): what a bootstrap over
    queries resamples."""
    ranked, qrels = _ranked(view, run, mode)
    return _per_query(spec, ranked, qrels, "ifir" if "ifir" in references else "paper")


def cross_mode_values(view: ReleaseView, run: Run, references: Sequence[Reference] = ()) -> dict[str, dict[str, Share]]:
    """p-MRR, and WISE and SICR where there is a reversed mode, per query as a ``Share``: the release's figure
    is the shares' total over their weight, so a bootstrap recomputes it from resampled queries. p-MRR, and
    WISE and SICR under an InfoSearch reference, are means of per-query values (a weight of 1 each); the
    paper's WISE and SICR are means over gold documents (a query weighs as many as its golds)."""
    if OG not in view.queries or CHANGED not in view.queries:
        return {}
    og, new, changed = _changed_runs(view, run)
    values = {
        "p-mrr": {q: Share(v, 1) for q, docs in changed.items() if (v := metrics.p_mrr(og, new, {q: docs})) is not None}
    }
    if REVERSED not in view.queries:
        return values
    reference: Reference = next((r for r in references if r in metrics.INFOSEARCH_REFERENCES), "paper")
    per_gold = reference not in metrics.INFOSEARCH_REFERENCES  # the paper's: a mean over gold documents
    by_query: dict[str, list[Triple]] = {}
    for triple in _triples(view, run):
        by_query.setdefault(triple.query, []).append(triple)
    values["wise"], values["sicr"] = {}, {}
    for query, golds in by_query.items():  # each non-empty, so each figure is a number
        weight = len(golds) if per_gold else 1
        values["wise"][query] = Share((metrics.wise(golds, metrics.WISE_K, reference) or 0.0) * weight, weight)
        values["sicr"][query] = Share((metrics.sicr(golds, reference) or 0.0) * weight, weight)
    return values


def _ranked(view: ReleaseView, run: Run, mode: str) -> tuple[dict[str, list[str]], dict[str, dict[str, int]]]:
    """The run's ranking of each query of ``mode`` with a positive (the queries scored), and the mode's qrels."""
    rows, qrels = view.queries[mode], view.qrels.get(mode, {})
    judged = [qid for qid in rows if any(s > 0 for s in qrels.get(qid, {}).values())]
    return {qid: metrics.ranking(run.get(view.run_qid(mode, qid), {})) for qid in judged}, qrels


def _instruction_following(
    og: Run, new: Run, changed: dict[str, list[str]], triples: list[Triple] | None, reference: Reference
) -> dict[str, float | None]:
    """p-MRR between the original and the altered instruction; WISE and SICR when there is a reversed mode."""
    figures = {"p-mrr": metrics.p_mrr(og, new, changed)}
    if triples is not None:
        figures["wise"] = metrics.wise(triples, metrics.WISE_K, reference)
        figures["sicr"] = metrics.sicr(triples, reference)
    return figures


def _mode_run(view: ReleaseView, run: Run, mode: str) -> dict[str, dict[str, float]]:
    return {qid: run.get(view.run_qid(mode, qid), {}) for qid in view.queries[mode]}


def _changed_runs(view: ReleaseView, run: Run) -> tuple[Run, Run, dict[str, list[str]]]:
    """p-MRR's documents: those whose relevance dropped from the original to the altered instruction."""
    og, new = view.qrels.get(OG, {}), view.qrels.get(CHANGED, {})
    changed = {
        qid: sorted(doc for doc, s in og.get(qid, {}).items() if s > 0 and new.get(qid, {}).get(doc, 0) < s)
        for qid in view.queries[CHANGED]
        if qid in view.queries[OG]
    }
    return _mode_run(view, run, OG), _mode_run(view, run, CHANGED), changed


def _triples(view: ReleaseView, run: Run) -> list[Triple]:
    """One per gold document of each instructed query, placed in the three runs; N = the query's positives in
    the original mode."""
    runs = {mode: _mode_run(view, run, mode) for mode in (OG, CHANGED, REVERSED)}
    out = []
    for qid in sorted(view.queries[CHANGED]):
        if qid not in view.queries[OG] or qid not in view.queries[REVERSED]:
            continue
        golds = sorted(d for d, s in view.qrels.get(CHANGED, {}).get(qid, {}).items() if s > 0)
        n = sum(1 for s in view.qrels.get(OG, {}).get(qid, {}).values() if s > 0)
        placed = {mode: metrics.positions(runs[mode][qid]) for mode in runs}
        for doc in golds:
            ori, ins, rev = (metrics.position(placed[m], doc) for m in (OG, CHANGED, REVERSED))
            out.append(Triple(qid, doc, ori, ins, rev, n))
    return out


def headline(report: dict[str, Any]) -> list[tuple[str, float | None]]:
    """The figures a table shows: per-mode metrics, then the cross-mode ones, then per dimension or domain."""
    rows: list[tuple[str, float | None]] = []
    for mode, figures in report["modes"].items():
        rows += [(f"{name} ({mode})", value) for name, value in figures.items() if name != "queries"]
    rows += [(name, value) for name, value in report.items() if name.startswith(CROSS_MODE)]
    for dim, figures in report.get("by_dimension", {}).items():
        rows += [(f"{name} ({dim})", value) for name, value in figures.items()]
    for mode, domains in report.get("by_domain", {}).items():
        for domain, figures in domains.items():
            rows += [(f"{name} ({mode}, {domain})", value) for name, value in figures.items() if name != "queries"]
    return rows
