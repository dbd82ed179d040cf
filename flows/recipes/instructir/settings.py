"""InstructIR's settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ifsynth.schemas.config import Band, Budget, NoisePool, SeedSelection, Selection, paper, unstated


class InstructIRParams(SeedSelection):
    """Defaults are what InstructIR's release did; ``fidelity.py`` lists where its paper's text says otherwise."""

    instructions_per_query: int = Field(10, ge=1, le=50, json_schema_extra=paper(10))
    query_length_percentiles: tuple[float, float] = Field((25.0, 75.0), json_schema_extra=paper((25.0, 75.0)))
    passage_length_percentiles: tuple[float, float] = Field((25.0, 75.0), json_schema_extra=paper((25.0, 75.0)))
    passage_band: Band = Field(
        "outside",
        description="keep passages outside the percentile band or inside it",
        json_schema_extra=paper("inside"),
    )
    length_unit: Literal["chars", "words"] = Field("chars", json_schema_extra=paper("chars"))
    select: Selection = Field(
        "bands",
        description="bands: length bands computed from the seeds; already_selected: the seeds are a finished "
        "selection (the release's filtered_version), only the one-positive rule and one_query_per_passage apply",
        json_schema_extra=paper("bands"),
    )
    one_query_per_passage: bool = Field(
        True,
        description="of eligible queries whose one positive is the same passage, seed only the one the sample "
        "would draw first: its ids, <pid>_<k>, name one rewrite of a passage per k (the release has no passage "
        "under two queries)",
        json_schema_extra=unstated(),
    )
    q1_min_score: int = Field(
        4,
        ge=1,
        le=5,
        description="keep a rewrite whose relevance score is at least this (the release's code applies none: 1)",
        json_schema_extra=paper(4),
    )
    min_group_size: int = Field(
        6, ge=1, description="keep a query when at least this many instances survive", json_schema_extra=paper(7)
    )
    noise_pool: NoisePool = Field(
        "positives",
        description="untouched passages added to the corpus: the judged positives of the other seed queries "
        "(the release: all 7,433 MS MARCO dev positives, rewritten ones swapped out) or the whole seed corpus",
        json_schema_extra=paper("positives"),
    )
    max_noise_passages: int | None = Field(
        None, ge=0, description="at most this many noise passages; none: all", json_schema_extra=paper(None)
    )
    temperature: float = Field(
        1.0,
        ge=0,
        le=2,
        description="sampling temperature of generation stages (the release's; the paper states none)",
        json_schema_extra=unstated(),
    )
    judge_temperature: float = Field(
        0.7,
        ge=0,
        le=2,
        description="sampling temperature of the judges (the release's; the paper states none)",
        json_schema_extra=unstated(),
    )
    max_tokens_instructions: Budget = 2048
    max_tokens_rewrite: Budget = 1024
    max_tokens_judge: Budget = 512
