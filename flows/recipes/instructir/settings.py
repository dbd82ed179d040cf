"""InstructIR's settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ifsynth.schemas.config import Band, NoisePool, SeedSelection, paper


class InstructIRParams(SeedSelection):
    """Defaults are what InstructIR's release did; ``deviations`` names where its paper's text says otherwise."""

    instructions_per_query: int = Field(10, ge=1, le=50, json_schema_extra=paper(10))
    query_length_percentiles: tuple[float, float] = Field((25.0, 75.0), json_schema_extra=paper((25.0, 75.0)))
    passage_length_percentiles: tuple[float, float] = (25.0, 75.0)
    passage_band: Band = Field(
        "outside",
        description="keep passages outside the percentile band or inside it",
        json_schema_extra=paper(
            "inside",
            "the released seeds were kept outside the band: none of their 1,743 passages is 255-371 characters "
            "long, 820 are shorter and 923 longer",
        ),
    )
    length_unit: Literal["chars", "words"] = Field("chars", json_schema_extra=paper("chars"))
    q1_min_score: int = Field(
        4,
        ge=1,
        le=5,
        description="keep a rewrite whose relevance score is at least this (the release's code applies none: 1)",
        json_schema_extra=paper(4),
    )
    min_group_size: int = Field(
        6,
        ge=1,
        description="keep a query when at least this many instances survive",
        json_schema_extra=paper(
            7, 'the paper says "more than 6"; the release kept groups of 6 (239 of its 1,267 queries have exactly 6)'
        ),
    )
    noise_pool: NoisePool = Field(
        "positives",
        description="untouched passages added to the corpus: the judged positives of the other seed queries "
        "(the release: all 7,433 MS MARCO dev positives, rewritten ones swapped out) or the whole seed corpus",
        json_schema_extra=paper("positives"),
    )
    max_noise_passages: int | None = Field(None, ge=0, description="at most this many noise passages; none: all")
    temperature: float = Field(
        1.0, ge=0, le=2, description="sampling temperature of generation stages", json_schema_extra=paper(1.0)
    )
    judge_temperature: float = Field(
        0.7, ge=0, le=2, description="sampling temperature of the judges (the release's)", json_schema_extra=paper(0.7)
    )
    max_tokens_instructions: int = Field(2048, ge=16)
    max_tokens_rewrite: int = Field(1024, ge=16)
    max_tokens_judge: int = Field(512, ge=16)
