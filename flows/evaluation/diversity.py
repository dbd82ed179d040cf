"""APS and INGF, the two diversity figures InF-IR reports for its training set (its paper's section 4.2), over
a seeded sample of at most 10,000 positive tuples, per field (instruction, query, passage).

- APS, average pairwise sample similarity: the mean cosine similarity over every pair of the sample's
  embeddings (lower: fewer near-duplicates). The paper embeds with E5-Mistral; ifsynth uses any
  OpenAI-compatible embedding endpoint when given one, else TF-IDF vectors, and names which in the report.
  The mean over all n(n-1)/2 pairs is computed exactly from the sum of the unit vectors, without the n x n
  matrix: sum_{i != j} v_i . v_j = |sum v_i|^2 - sum |v_i|^2.
- INGF, inter-sample n-gram frequency (cited from Mishra et al.'s DQI, whose paper gives no formula for this
  use): each word 1-, 2- and 3-gram counts 1 / (the number of samples it occurs in), summed and divided by the
  sample size. A sample whose n-grams no other sample shares adds all of its distinct n-grams; a template
  repeated across samples adds almost nothing (higher: more varied text).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ifsynth.flows.evaluation.dense import Dense
from ifsynth.flows.llm.route import DEFAULT_KEY_ENV, OPENAI_BASE_URL, api_key
from ifsynth.schemas.errors import ConfigError
from ifsynth.warehouse.store import Warehouse

SAMPLE = 10_000
SEED = 0
FIELDS = ("instruction", "query", "passage")
NGRAMS = (1, 2, 3)
_WORD = re.compile(r"\w+")


class Embedder(Protocol):
    @property
    def name(self) -> str:
        """What the figure was computed with, for the report."""

    def __call__(self, texts: Sequence[str]) -> Any:
        """One row per text (a dense array or a sparse matrix)."""


@dataclass(frozen=True)
class TfidfEmbedder:
    """Offline and deterministic: word TF-IDF fitted on the texts measured, rows L2-normalised."""

    name: str = "tfidf (scikit-learn TfidfVectorizer, word unigrams, sublinear tf, fitted on the sample)"

    def __call__(self, texts: Sequence[str]) -> Any:
        from sklearn.feature_extraction.text import TfidfVectorizer

        if not any(_WORD.search(t) for t in texts):
            return np.zeros((len(texts), 1))
        return TfidfVectorizer(sublinear_tf=True).fit_transform(texts)


@dataclass(frozen=True)
class CachedEmbedder:
    """An OpenAI-compatible ``/embeddings`` endpoint through the gateway, as ``evaluate --retriever embed:``
    embeds: each text's vector is cached in the warehouse, so measuring again sends no request."""

    dense: Dense

    @property
    def name(self) -> str:
        return f"{self.dense.model} at {self.dense.base_url}"

    def __call__(self, texts: Sequence[str]) -> Any:
        return self.dense.vectors(texts)


def embedder(model: str | None, base_url: str | None, warehouse: Warehouse, release: str) -> Embedder:
    """The embedder the options name: TF-IDF without a model, else the model at ``base_url`` (or OpenAI's),
    whose requests are filed under ``stats:<release>``."""
    if base_url and not model:
        raise ConfigError("--embed-base-url needs --embed-model, the model to embed with")
    if not model:
        return TfidfEmbedder()
    if base_url is None and api_key(DEFAULT_KEY_ENV) is None:
        raise ConfigError("--embed-model needs --embed-base-url, or OPENAI_API_KEY for OpenAI's endpoint")
    return CachedEmbedder(Dense(model, base_url or OPENAI_BASE_URL, warehouse, run_id=f"stats:{release}"))


def aps(vectors: Any) -> float | None:
    """Mean cosine similarity over all pairs of rows; None under two rows. A zero row counts as similarity 0."""
    n = vectors.shape[0]
    if n < 2:
        return None
    if hasattr(vectors, "toarray"):  # sparse rows come L2-normalised (or empty) from the vectorizer
        total = np.asarray(vectors.sum(axis=0)).ravel()
        squares = float(vectors.multiply(vectors).sum())
    else:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        unit = np.divide(vectors, norms, out=np.zeros_like(vectors, dtype=np.float64), where=norms > 0)
        total, squares = unit.sum(axis=0), float((unit * unit).sum())
    return (float(total @ total) - squares) / (n * (n - 1))


def ingf(texts: Sequence[str], sizes: Sequence[int] = NGRAMS) -> float | None:
    """Sum over word n-grams of 1 / (samples holding it), per sample; None for no text."""
    if not texts:
        return None
    holders: Counter[tuple[str, ...]] = Counter()
    for text in texts:
        words = _WORD.findall(text.lower())
        holders.update({tuple(words[i : i + n]) for n in sizes for i in range(len(words) - n + 1)})
    return sum(1 / count for count in holders.values()) / len(texts)


def diversity(
    warehouse: Warehouse, release: str, embedder: Embedder, *, sample: int = SAMPLE, seed: int = SEED
) -> dict[str, Any]:
    """APS and INGF of an InF-IR release's positive tuples (instruction, query, positive passage)."""
    rows = warehouse.release_positive_pairs(release, "positive")
    drawn = random.Random(seed).sample(rows, min(sample, len(rows)))
    texts = {field: [row[field] for row in drawn] for field in FIELDS}
    return {
        "sample": len(drawn),
        "of": len(rows),
        "seed": seed,
        "embedding": embedder.name,
        "aps": {field: aps(embedder(texts[field])) if len(drawn) > 1 else None for field in FIELDS},
        "ingf": {field: ingf(texts[field]) for field in FIELDS},
        "ingf_ngrams": list(NGRAMS),
    }
