"""The retrieval modes a release's queries come in, named once for generation, export, import and scoring.

A single-mode release (InstructIR, a plain BEIR import) has one; InfoSearch and FollowIR pair each core query
with its original instruction (``og``), the changed one and, for InfoSearch, the reversed one; InF-IR's
three modes are stated with its tuple in ``schemas/infir.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ifsynth.schemas.infir import MODES as INFIR_MODES

INSTRUCTED = "instructed"  # InstructIR: the query under one user's instruction
ORIGINAL = "original"  # a BEIR import without instructions: the bare query
OG, CHANGED, REVERSED = "og", "changed", "reversed"
INFOSEARCH_MODES: tuple[str, ...] = (OG, CHANGED, REVERSED)
FOLLOWIR_MODES: tuple[str, ...] = (OG, CHANGED)
TRAIN = "train"  # a training set's rows: a query with its narrative and labelled documents

# The mode whose instructions stand for a release's instructions, in order of preference: a release of
# several modes measures the instructions that carry its conditions.
INSTRUCTED_MODES: tuple[str, ...] = (INSTRUCTED, CHANGED, next(iter(INFIR_MODES)))


@dataclass(frozen=True)
class RecipeMetrics:
    """What a recipe's paper reports, per mode and across modes: ``evaluate`` scores its releases so."""

    ndcg: tuple[int, ...] = (10,)
    mrr: tuple[int, ...] = (10,)
    map: bool = True
    robustness: int | None = 10
