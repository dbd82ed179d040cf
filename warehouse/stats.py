"""What a release looks like, in the figures the papers report: sizes, lengths, instruction diversity, and
for generated releases what each stage kept and what a kept row cost. Pure reads of the release tables.

ROUGE-L follows the ``rouge-score`` package (lowercase, non-alphanumerics to spaces, Porter stemming of tokens
longer than three characters, F1 of the longest common subsequence); the LCS is bit-parallel, so the ~36k
instruction pairs of InstructIR take about a second rather than a minute.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from itertools import combinations
from typing import Any

import Stemmer

from ifsynth.schemas.errors import UnknownRelease, UnknownRun
from ifsynth.schemas.modes import INSTRUCTED_MODES
from ifsynth.warehouse.export import release_for
from ifsynth.warehouse.store import Warehouse

_NON_ALNUM = re.compile(r"[^a-z0-9]+")
_porter = Stemmer.Stemmer("porter")


@lru_cache(maxsize=200_000)
def _stem(token: str) -> str:
    return _porter.stemWord(token) if len(token) > 3 else token


def rouge_tokens(text: str, *, stem: bool = True) -> list[str]:
    tokens = _NON_ALNUM.sub(" ", text.lower()).split()
    return [_stem(t) for t in tokens] if stem else tokens


def positions_mask(tokens: Sequence[str]) -> dict[str, int]:
    """Per token, the bit set of its positions: what the bit-parallel LCS matches against."""
    masks: dict[str, int] = {}
    for i, token in enumerate(tokens):
        masks[token] = masks.get(token, 0) | (1 << i)
    return masks


def lcs_length(a: Sequence[str], b: Sequence[str], a_masks: dict[str, int] | None = None) -> int:
    """Length of the longest common subsequence, bit-parallel over ``a`` (Hyyrö 2004)."""
    if not a or not b:
        return 0
    masks = a_masks if a_masks is not None else positions_mask(a)
    full = (1 << len(a)) - 1
    v = full
    for token in b:
        u = v & masks.get(token, 0)
        v = ((v + u) | (v - u)) & full
    return len(a) - v.bit_count()


def rouge_l_f1(a: Sequence[str], b: Sequence[str], a_masks: dict[str, int] | None = None) -> float:
    lcs = lcs_length(a, b, a_masks)
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(b), lcs / len(a)
    return 2 * precision * recall / (precision + recall)


def rouge_l_within_groups(groups: Iterable[Sequence[str]], *, stem: bool = True) -> float | None:
    """Mean ROUGE-L F1 over every pair of one group's texts, then the mean over groups of two or more."""
    per_group = []
    for texts in groups:
        tokens = [rouge_tokens(t, stem=stem) for t in texts]
        if len(tokens) < 2:
            continue
        masks = [positions_mask(t) for t in tokens]
        pairs = combinations(range(len(tokens)), 2)
        per_group.append(statistics.fmean(rouge_l_f1(tokens[i], tokens[j], masks[i]) for i, j in pairs))
    return statistics.fmean(per_group) if per_group else None


def distinct_n(texts: Iterable[str], n: int) -> float | None:
    """Distinct n-grams over all n-grams of the texts (lowercased, alphanumeric tokens)."""
    seen: set[tuple[str, ...]] = set()
    total = 0
    for text in texts:
        tokens = rouge_tokens(text, stem=False)
        grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
        seen.update(grams)
        total += len(grams)
    return len(seen) / total if total else None


def _words(texts: Sequence[str]) -> dict[str, float | None]:
    lengths = [len(t.split()) for t in texts]
    if not lengths:
        return {"mean": None, "median": None, "n": 0}
    return {"mean": statistics.fmean(lengths), "median": float(statistics.median(lengths)), "n": len(lengths)}


def find_release(warehouse: Warehouse, ref: str | None) -> str:
    """A release by its name, or the release of a run (by id or name; the newest run by default)."""
    try:
        return release_for(warehouse, ref)
    except UnknownRun:
        if ref is None:  # no run at all: say that
            raise
        raise UnknownRelease(ref) from None


def release_meta(warehouse: Warehouse, release: str) -> dict[str, Any]:
    row = warehouse.release_row(release)
    if row is None:
        raise UnknownRelease(release)
    return row


def instructed_mode(modes: Sequence[str]) -> str:
    return next((m for m in INSTRUCTED_MODES if m in modes), sorted(modes)[0])


def stats(warehouse: Warehouse, release: str) -> dict[str, Any]:
    meta = release_meta(warehouse, release)
    modes = warehouse.release_modes(release)
    mode = instructed_mode(modes) if modes else None
    rows = sorted(
        (r for r in warehouse.release_queries(release) if r["mode"] == mode),
        key=lambda r: (r["group_id"], r["query_id"]),
    )
    counts = warehouse.release_sizes(release)
    positives = warehouse.mean_positives(release, mode)
    passages = [r["text"] for r in warehouse.release_passages(release)]
    groups: dict[str, list[str]] = {}
    for r in rows:
        if r["instruction"]:
            groups.setdefault(r["group_id"], []).append(r["instruction"])
    instructions = [i for texts in groups.values() for i in texts]
    report: dict[str, Any] = {
        "release": release,
        "recipe": meta["recipe"],
        "source": meta["source"],
        "modes": modes,
        "measured_mode": mode,
        "queries": counts["queries"],
        "instances": counts["instances"],
        "instructions_per_query": counts["instances"] / counts["queries"] if counts["queries"] else None,
        "corpus": counts["corpus"],
        "positives_per_instance": positives,
        "words": {
            "instruction": _words(instructions),
            "query": _words([r["query"] for r in rows]),
            "passage": _words(passages),
        },
        "rouge_l_within_group": rouge_l_within_groups(groups.values()),
        "distinct_1": distinct_n(instructions, 1),
        "distinct_2": distinct_n(instructions, 2),
    }
    missing = _missing(meta)
    if missing:
        report["missing"] = missing
    if meta["run_id"]:
        report["generation"] = _generation(warehouse, meta["run_id"], counts["instances"])
    return report


def _missing(meta: dict[str, Any]) -> list[str]:
    return list(json.loads(meta["card"]).get("missing", []))


def _generation(warehouse: Warehouse, run_id: str, kept: int) -> dict[str, Any]:
    """Per-stage yield and what one kept instance cost in tokens (and dollars, when prices were configured)."""
    stages = warehouse.stage_rows(run_id)
    calls = warehouse.call_totals(run_id, answered=True)
    return {
        "run": run_id,
        "yield": {s["stage"]: (s["n_out"] / s["n_in"] if s["n_in"] else None) for s in stages},
        "tokens": {"prompt": calls["prompt_tokens"], "completion": calls["completion_tokens"]},
        "tokens_per_kept": _per(calls["prompt_tokens"] + calls["completion_tokens"], kept),
        "cost_usd": calls["cost"],
        "cost_per_kept_usd": _per(calls["cost"], kept),
    }


def _per(total: float | None, kept: int) -> float | None:
    return total / kept if kept and total is not None else None


def diff(warehouse: Warehouse, a: str, b: str) -> dict[str, Any]:
    """Two releases' figures side by side, with how many core queries and passages they share (by text)."""
    left, right = stats(warehouse, a), stats(warehouse, b)
    shared = {}
    texts: dict[str, Callable[[str], set[str]]] = {
        "core_queries": lambda release: {r["query"] for r in warehouse.release_queries(release)},
        "passages": lambda release: {r["text"] for r in warehouse.release_passages(release)},
    }
    for what, of in texts.items():
        x, y = of(a), of(b)
        shared[what] = {
            "a": len(x),
            "b": len(y),
            "both": len(x & y),
            "jaccard": len(x & y) / len(x | y) if x | y else None,
        }
    return {"a": left, "b": right, "overlap": shared}
