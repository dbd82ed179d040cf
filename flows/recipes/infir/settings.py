"""InF-IR's settings."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from ifsynth.schemas.config import Band, SeedSelection

Flavour = Literal["general", "code", "math"]


class InfIRParams(SeedSelection):
    """InF-IR training tuples: (I+, Q+, P+) with a poisoned instruction I- and a poisoned query Q-."""

    flavour: Flavour = Field(
        "general", description="general; code: instructions name language and approach; math: the method"
    )
    validate_: bool = Field(True, alias="validate", description="judge every tuple three times; false exports all")
    distractors: int = Field(5, ge=0, le=50, description="random seed passages added to each judgment's candidates")
    query_length_percentiles: tuple[float, float] = (0.0, 100.0)
    passage_length_percentiles: tuple[float, float] = (0.0, 100.0)
    passage_band: Band = "inside"
    length_unit: Literal["chars", "words"] = "words"
    max_tokens_instructions: int = Field(512, ge=16)
    max_tokens_poison: int = Field(1024, ge=16)
    max_tokens_rewrite: int = Field(1024, ge=16)
    max_tokens_judge: int = Field(512, ge=16)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, serialize_by_alias=True)
