"""IFIR's settings."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from ifsynth.schemas.config import RecipeParams
from ifsynth.schemas.ifir import DEFAULT_SUBSET, DOMAINS, SCHEMES, Domain, Scheme


class IFIRParams(RecipeParams):
    """IFIR: per expert domain, seed queries with three instruction levels written bottom-up, each level's
    relevant passages re-checked so that they nest."""

    domains: tuple[Domain, ...] = Field(DOMAINS, min_length=1, description="domains this run builds")
    subsets: dict[Domain, str] = Field(
        DEFAULT_SUBSET, description="the IFIR subset (level scheme) each domain uses: fiqa, scifact_open, aila, pm"
    )
    sources: dict[str, str] = Field({}, description="subset -> its seed source; default: the run's --seeds")
    min_relevant: int = Field(2, ge=1, description="a seed query needs at least this many relevant passages")
    window_words: int = Field(512, ge=10, description="judge passages in windows of this many words (IFIR: 512 tokens)")
    window_stride: int = Field(384, ge=1, description="words between the starts of two windows (128 overlap)")
    max_tokens_level: int = Field(512, ge=16)
    max_tokens_judge: int = Field(512, ge=16)

    @field_validator("subsets", mode="before")
    @classmethod
    def _merge_subsets(cls, value: Any) -> Any:
        """``subsets.science=scifact_open`` changes that domain's subset and keeps the others."""
        return {**DEFAULT_SUBSET, **value} if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _check(self) -> IFIRParams:
        unknown = sorted({self.subsets[d] for d in self.domains} - set(SCHEMES))
        if unknown:
            raise ValueError(f"unknown IFIR subset {', '.join(map(repr, unknown))}; known: {', '.join(SCHEMES)}")
        wrong = [d for d in self.domains if SCHEMES[self.subsets[d]].domain != d]
        if wrong:
            raise ValueError(f"subsets: {', '.join(f'{d} -> {self.subsets[d]}' for d in wrong)} is another domain's")
        if self.window_stride > self.window_words:
            raise ValueError("window_stride must not exceed window_words (windows would skip words)")
        return self

    @property
    def chosen(self) -> dict[str, Scheme]:
        """The subsets this run builds, by name."""
        return {self.subsets[d]: SCHEMES[self.subsets[d]] for d in self.domains}
