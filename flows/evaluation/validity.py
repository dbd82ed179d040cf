"""Does a regenerated release rank retrieval systems as the original does? The test-collection literature's
answer: score the same systems on both and correlate the two system rankings (Kendall's tau, commonly read
against 0.9, and Spearman's rho).

Every system is scored on each release with its recipe's metrics (``scoring.score``). The headline metric
(the recipe's first per-mode metric in the instructed mode, or ``metric``: any per-mode metric, or p-MRR, WISE
or SICR) also gets a bootstrap interval: each release's judged queries are resampled with replacement,
independently (the two releases need not share queries), the systems' figures recomputed from the resampled
queries and the two rankings correlated again. A figure that is not a mean over queries (the paper's WISE and
SICR average over gold documents) is recomputed as such: each query carries its golds' sum and count. Every
other metric the two reports share gets its point correlations ("per-metric agreement").
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from ifsynth.flows.evaluation import scoring
from ifsynth.flows.evaluation.dense import Dense
from ifsynth.flows.evaluation.metrics import Reference
from ifsynth.flows.evaluation.retrieval import Bm25, Retriever, Run, read_run, restrict
from ifsynth.flows.evaluation.scoring import Share
from ifsynth.schemas.errors import ConfigError
from ifsynth.schemas.modes import RecipeMetrics
from ifsynth.warehouse.stats import find_release, instructed_mode
from ifsynth.warehouse.store import Warehouse

SAMPLES, SEED, LEVEL = 1000, 0, 0.95
SYSTEMS_HELP = "bm25, bm25:k1=K,b=B (and/or bare: without instructions), embed:MODEL, run:NAME=ORIGINAL.trec,REGEN.trec"


@dataclass(frozen=True)
class System:
    """One system: a retriever run on each release, or a run file per release."""

    label: str
    retriever: Retriever | None = None
    runs: tuple[Path, Path] | None = None
    instructions: bool = True


def parse_system(spec: str, dense: Callable[[str], Dense]) -> System:
    """A ``--system`` value as a System; ``dense(model)`` makes an embedding model's retriever."""
    kind, _, rest = spec.partition(":")
    if kind == "bm25":
        settings: dict[str, float] = {}
        bare = False
        for part in filter(None, rest.split(",")):
            name, _, value = part.partition("=")
            if part == "bare":
                bare = True
            elif name in ("k1", "b") and _number(value) is not None:
                settings[name] = float(value)
            else:
                raise ConfigError(f"--system `{spec}`: a BM25 variant takes k1=K, b=B and bare")
        return System(spec, Bm25(**settings), instructions=not bare)
    if kind == "embed" and rest:
        return System(spec, dense(rest))
    if kind == "run" and "=" in rest:
        name, _, files = rest.partition("=")
        paths = [Path(f) for f in files.split(",")]
        if name and len(paths) == 2:
            return System(name, runs=(paths[0], paths[1]))
    raise ConfigError(f"--system `{spec}` is not one of {SYSTEMS_HELP}")


def validity(
    warehouse: Warehouse,
    original: str,
    regenerated: str,
    systems: Sequence[System],
    metrics_of: Callable[[str], RecipeMetrics],
    *,
    metric: str | None = None,
    references: Sequence[Reference] = (),
    depth: int = 1000,
    samples: int = SAMPLES,
    seed: int = SEED,
) -> dict[str, Any]:
    """Every system on both releases, the rank correlations of the two system rankings, and their intervals."""
    if len(systems) < 2:
        raise ConfigError("validity compares the ranking of at least two systems: give --system twice or more")
    if len({s.label for s in systems}) < len(systems):
        raise ConfigError("each --system must be named once (a run file system's NAME too)")
    views = [scoring.load(warehouse, find_release(warehouse, name)) for name in (original, regenerated)]
    if views[0].recipe != views[1].recipe:
        raise ConfigError(
            f"`{views[0].name}` is a {views[0].recipe} release and `{views[1].name}` a {views[1].recipe} one; "
            "validity compares releases of one recipe"
        )
    spec = metrics_of(views[0].recipe)
    reports: list[list[dict[str, Any]]] = [[], []]
    values: list[list[dict[str, Share]]] = [[], []]
    chosen = None
    for side, view in enumerate(views):
        mode = instructed_mode(view.modes)
        for system in systems:
            run = _run(warehouse, view, system, side, depth)
            reports[side].append(scoring.score(view, run, spec, references))
            per_mode = scoring.query_values(view, run, spec, mode, references)
            per_metric = {name: {q: Share(v, 1) for q, v in found.items()} for name, found in per_mode.items()}
            per_metric |= scoring.cross_mode_values(view, run, references)
            chosen = metric or next(iter(per_metric), None)
            if chosen not in per_metric:
                raise ConfigError(f"--metric must be one of {', '.join(per_metric)} (what this release can give)")
            values[side].append(per_metric[chosen])
    assert chosen is not None
    labels = [s.label for s in systems]
    scores = [[_mean(v) for v in values[side]] for side in (0, 1)]
    report: dict[str, Any] = {
        "original": views[0].name,
        "regenerated": views[1].name,
        "recipe": views[0].recipe,
        "metric": chosen,
        "modes": [instructed_mode(view.modes) for view in views],
        "queries": [len(values[side][0]) for side in (0, 1)],
        "systems": [
            {"system": label, "original": a, "regenerated": b, "original_rank": ra, "regenerated_rank": rb}
            for label, a, b, ra, rb in zip(labels, *scores, *map(_ranks, scores), strict=True)
        ],
        **correlations(scores[0], scores[1]),
        "bootstrap": bootstrap(values[0], values[1], samples, seed),
        "per_metric": _per_metric(reports),
    }
    embedded = [asdict(s.retriever.counts) | {"system": s.label} for s in systems if isinstance(s.retriever, Dense)]
    if embedded:
        report["embeddings"] = embedded
    return report


def correlations(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> dict[str, float | None]:
    """Kendall's tau-b and Spearman's rho of two score lists (None where undefined: a constant list)."""
    with warnings.catch_warnings():  # a constant list: undefined, said as None below
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        tau = stats.kendalltau(x, y).statistic
        rho = stats.spearmanr(x, y).statistic
    return {"kendall_tau": _finite(tau), "spearman_rho": _finite(rho)}


def bootstrap(
    original: Sequence[dict[str, Share]], regenerated: Sequence[dict[str, Share]], samples: int, seed: int
) -> dict[str, Any]:
    """Percentile intervals of tau and rho over ``samples`` resamplings of the queries (with replacement,
    seeded); per-query shares are ``[system][query id]``. Releases with the same queries are resampled in
    pairs (the same draw for both), others each on its own."""
    rng = np.random.default_rng(seed)
    queries = [sorted(side[0]) for side in (original, regenerated)]
    paired = queries[0] == queries[1]
    draws = [rng.integers(0, len(q), size=(samples, len(q))) if q else None for q in queries]
    if paired:
        draws[1] = draws[0]
    means = [
        _means(side, q, drawn, samples) for side, q, drawn in zip((original, regenerated), queries, draws, strict=True)
    ]
    found: dict[str, list[float]] = {"kendall_tau": [], "spearman_rho": []}
    for b in range(samples):
        for name, value in correlations(means[0][:, b], means[1][:, b]).items():
            if value is not None:
                found[name].append(value)
    tail = (1 - LEVEL) / 2 * 100
    return {
        "samples": samples,
        "seed": seed,
        "level": LEVEL,
        "paired": paired,
        **{
            name: [float(np.percentile(got, tail)), float(np.percentile(got, 100 - tail))] if got else None
            for name, got in found.items()
        },
    }


def _means(
    values: Sequence[dict[str, Share]], queries: list[str], drawn: np.ndarray | None, samples: int
) -> np.ndarray:
    """``[system, sample]``: each system's figure over the same resampled queries (their totals over their counts)."""
    if drawn is None:
        return np.zeros((len(values), samples))
    totals, counts = (
        np.array([[per_query[q][part] for q in queries] for per_query in values], dtype=np.float64) for part in (0, 1)
    )
    # a system at a time: [sample, query] each
    return np.stack(
        [total[drawn].sum(axis=1) / count[drawn].sum(axis=1) for total, count in zip(totals, counts, strict=True)]
    )


def _per_metric(reports: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Tau and rho per metric both releases report for every system."""
    tables = [[dict(scoring.headline(r)) for r in side] for side in reports]
    shared = [name for name in tables[0][0] if all(name in t for side in tables for t in side)]
    rows = []
    for name in shared:
        x, y = ([v for t in side if (v := t[name]) is not None] for side in tables)
        if len(x) == len(y) == len(tables[0]):  # not where a release cannot give it (p-MRR, nothing changed)
            rows.append({"metric": name, **correlations(x, y)})
    return rows


def _run(warehouse: Warehouse, view: scoring.ReleaseView, system: System, side: int, depth: int) -> Run:
    """The system's run on one release: reranking its pool when it has one, as ``evaluate`` does."""
    rerank = bool(view.pools)
    if system.runs is not None:
        run = read_run(system.runs[side])
        return restrict(run, view.pools) if rerank else run
    assert system.retriever is not None
    return scoring.system_run(warehouse, view, system.retriever, depth, system.instructions, rerank)


def _ranks(scores: Sequence[float]) -> list[int]:
    """1 for the best; ties share the better rank."""
    return [1 + sum(other > score for other in scores) for score in scores]


def _mean(values: dict[str, Share]) -> float:
    count = sum(share.weight for share in values.values())
    return sum(share.total for share in values.values()) / count if count else 0.0


def _finite(value: Any) -> float | None:
    number = float(value)
    return None if np.isnan(number) else number


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
