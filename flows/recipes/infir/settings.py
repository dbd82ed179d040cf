"""InF-IR's settings."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from ifsynth.schemas.config import Band, Budget, SeedSelection, paper, unstated

Flavour = Literal["general", "code", "math"]


class InfIRParams(SeedSelection):
    """InF-IR training tuples: (I+, Q+, P+) with a poisoned instruction I- and a poisoned query Q-."""

    flavour: Flavour = Field(
        "general",
        description="general; code: instructions name language and approach; math: the method",
        json_schema_extra=paper("general"),
    )
    validate_: bool = Field(
        True,
        alias="validate",
        description="judge every tuple three times; false exports all",
        json_schema_extra=paper(True),
    )
    distractors: int = Field(
        5,
        ge=0,
        le=50,
        description="random seed passages added to each judgment's candidates (the paper gives no number)",
        json_schema_extra=unstated(),
    )
    # no length selection: the paper draws its (query, passage) pairs from MS MARCO as they are
    query_length_percentiles: tuple[float, float] = Field((0.0, 100.0), json_schema_extra=paper((0.0, 100.0)))
    passage_length_percentiles: tuple[float, float] = Field((0.0, 100.0), json_schema_extra=paper((0.0, 100.0)))
    passage_band: Band = Field("inside", json_schema_extra=paper("inside"))
    length_unit: Literal["chars", "words"] = Field("words", json_schema_extra=unstated())
    max_tokens_instructions: Budget = 512
    max_tokens_poison: Budget = 1024
    max_tokens_rewrite: Budget = 1024
    max_tokens_judge: Budget = 512

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, serialize_by_alias=True)
