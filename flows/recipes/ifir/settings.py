"""IFIR's settings."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from ifsynth.schemas.config import Budget, RecipeParams, paper, unstated
from ifsynth.schemas.ifir import DEFAULT_SUBSET, DOMAINS, SCHEMES, Domain, Scheme


class IFIRParams(RecipeParams):
    """IFIR: per expert domain, seed queries with three instruction levels written bottom-up, each level's
    relevant passages re-checked so that they nest."""

    domains: tuple[Domain, ...] = Field(
        DOMAINS, min_length=1, description="domains this run builds", json_schema_extra=paper(list(DOMAINS))
    )
    subsets: dict[Domain, str] = Field(
        DEFAULT_SUBSET,
        description="the IFIR subset (level scheme) each domain uses: fiqa, scifact_open, aila, pm",
        json_schema_extra=unstated(),
    )
    sources: dict[str, str] = Field(
        {}, description="subset -> its seed source; default: the run's --seeds", json_schema_extra=unstated()
    )
    min_relevant: int = Field(
        1,
        ge=1,
        description="a seed query needs at least this many relevant passages (the paper sets no minimum)",
        json_schema_extra=paper(1),
    )
    window_words: int | None = Field(
        None,
        ge=10,
        description="none: the re-check reads a passage whole, as IFIR's judge code does; a number: windows of that "
        "many words, the best one counting (MaxP)",
        json_schema_extra=paper(None),
    )
    window_stride: int = Field(
        384,
        ge=1,
        description="with window_words: words between the starts of two windows",
        json_schema_extra=unstated(),
    )
    max_tokens_level: Budget = 512
    max_tokens_judge: Budget = 512

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
        if self.window_words is not None and self.window_stride > self.window_words:
            raise ValueError("window_stride must not exceed window_words (windows would skip words)")
        return self

    @property
    def chosen(self) -> dict[str, Scheme]:
        """The subsets this run builds, by name."""
        return {self.subsets[d]: SCHEMES[self.subsets[d]] for d in self.domains}
