"""FollowIR's settings."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from ifsynth.schemas.config import Budget, RecipeParams, paper, unstated

FollowIRMode = Literal["eval", "train"]


class FollowIRParams(RecipeParams):
    """FollowIR: an evaluation set (altered narratives, re-judged documents, a rerank pool) or, with
    ``mode = train``, training rows (synthetic documents labelled against a narrative)."""

    mode: FollowIRMode = Field(
        "eval",
        description="eval: altered narratives and a rerank pool; train: training rows",
        json_schema_extra=unstated(),
    )
    query_field: Literal["title", "description"] | None = Field(
        None,
        description="the topic field that is the query; none: the description for eval (the paper's Table 1 shows "
        "one), the title for train (its document prompt searches the title)",
        json_schema_extra=paper(None),
    )
    min_relevant: int = Field(
        2,
        ge=1,
        description="eval: a topic needs at least this many judged-relevant documents",
        json_schema_extra=unstated(),
    )
    alterations: int = Field(
        3,
        ge=1,
        le=10,
        description="eval: candidate alterations per topic, tried in order",
        json_schema_extra=paper(1),
    )
    flip_share: tuple[float, float] = Field(
        (0.3, 0.7),
        description="eval: keep an alteration when the share of relevant documents it flips lies in this band",
        json_schema_extra=paper((0.5, 0.5)),
    )
    spot_checks: int = Field(
        5,
        ge=0,
        description="eval: judged non-relevant documents re-judged per candidate; one judged relevant fails it",
        json_schema_extra=paper(0),
    )
    window_words: int | None = Field(
        400,
        ge=10,
        description="judge long documents in windows of this many words, relevant when any window is (MaxP); "
        "none: whole",
        json_schema_extra=paper(None),
    )
    window_stride: int = Field(
        200, ge=1, description="words between the starts of two windows", json_schema_extra=paper(200)
    )
    pool_depth: int = Field(
        1000,
        ge=1,
        description="eval: top non-relevant documents per ranker in the rerank pool",
        json_schema_extra=paper(1000),
    )
    pool_runs: tuple[str, ...] = Field(
        (),
        description="eval: TREC run files of further pool rankers (`--pool-run`), query ids = topic ids",
        json_schema_extra=unstated(),
    )
    ablations: bool = Field(
        True,
        description="write each narrative as a short command and as keywords (the release's short_query, keywords)",
        json_schema_extra=paper(True),
    )
    documents_per_label: int = Field(
        2,
        ge=1,
        le=5,
        description="train: relevant and non-relevant documents written per pair",
        json_schema_extra=paper(2),
    )
    pair_needs: Literal["one", "both"] = Field(
        "one",
        description="train: a pair keeps the agreeing documents it has (one: at least one, as the release; both: "
        "only a pair with a relevant and a non-relevant one)",
        json_schema_extra=paper("one"),
    )
    max_tokens_alter: Budget = 2048
    max_tokens_judge: Budget = 512
    max_tokens_ablation: Budget = 256
    max_tokens_documents: Budget = 4096

    @property
    def query_from(self) -> Literal["title", "description"]:
        return self.query_field or ("description" if self.mode == "eval" else "title")

    @model_validator(mode="after")
    def _check(self) -> FollowIRParams:
        low, high = self.flip_share
        if not 0 < low <= high < 1:
            raise ValueError(
                f"flip_share must be 0 < low <= high < 1 (a flip of none or all proves nothing), got {low}, {high}"
            )
        if self.window_words is not None and self.window_stride > self.window_words:
            raise ValueError("window_stride must not exceed window_words (windows would skip words)")
        return self

    @field_validator("pool_runs")
    @classmethod
    def _absolute(cls, paths: tuple[str, ...]) -> tuple[str, ...]:
        """Stored as absolute paths, so a run continued from another directory still finds its run files."""
        return tuple(str(Path(path).expanduser().absolute()) for path in paths)

    def files(self) -> dict[str, tuple[str, ...]]:
        return {"pool_runs": self.pool_runs}
