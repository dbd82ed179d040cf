"""InfoSearch's settings and its six dimensions: their conditions and how each condition's document is made."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from ifsynth.schemas.config import Budget, Config, RecipeParams, paper, unstated


class Dimension(Config):
    """One InfoSearch document attribute: its conditions and how each condition's document is obtained.

    A core query ends with one document per condition. ``seed_condition`` names the condition the seed
    passage already satisfies; every condition in ``rewrites`` is written from it by the LLM. With no
    ``seed_condition`` the seeds hold one positive per condition, in the order of ``conditions`` (the qrels
    order). With no ``conditions`` at all (the keyword dimension) each positive of a query gets a keyword
    condition extracted from it.
    """

    public_name: str = Field(description="the name of the public InfoSearch task")
    conditions: tuple[str, ...] = ()
    seed_condition: str | None = None
    rewrites: dict[str, str] = Field({}, description="condition -> what the rewrite must produce, for the prompt")
    seed_kind: str = Field(description="what a seed passage of this dimension is, for the prompts and the card")
    seeds: str | None = Field(None, description="seed source of this dimension; default: the run's --seeds")
    word_bands: dict[str, tuple[int, int]] = Field({}, description="condition -> inclusive word-count band")
    scripts: dict[str, Literal["cjk", "latin"]] = Field({}, description="condition -> the script its text must use")

    @model_validator(mode="after")
    def _consistent(self) -> Dimension:
        named = set(self.conditions)
        for label, keys in (("rewrites", self.rewrites), ("word_bands", self.word_bands), ("scripts", self.scripts)):
            if set(keys) - named:
                raise ValueError(f"{label} names conditions not in conditions: {sorted(set(keys) - named)}")
        if self.seed_condition is not None and self.seed_condition not in named:
            raise ValueError(f"seed_condition `{self.seed_condition}` is not one of the conditions")
        if self.rewrites and self.seed_condition is None:
            raise ValueError("rewrites need a seed_condition to rewrite from")
        for low, high in self.word_bands.values():
            if not 0 <= low <= high:
                raise ValueError(f"a word band must be 0 <= low <= high, got [{low}, {high}]")
        return self


TRANSLATED_LANGUAGE = {
    "seed_condition": "English",
    "rewrites": {"Chinese": "the same passage written in Simplified Chinese"},
    "seed_kind": "an English passage",
}

DIMENSIONS: dict[str, Dimension] = {
    "audience": Dimension(
        public_name="Audience",
        conditions=("layman", "expert"),
        seed_condition="expert",
        rewrites={"layman": "the same content for a reader with no training in the field: plain words, no jargon"},
        seed_kind="a passage written by and for experts",
    ),
    "keyword": Dimension(
        public_name="Clarity",
        seed_kind="a web passage that answers the query; each query has several",
    ),
    "format": Dimension(
        public_name="Format",
        conditions=("StackOverflow post", "code snippet", "official manual"),
        seed_kind="a short forum post, a code snippet and a manual-style entry answering the same question",
    ),
    "language": Dimension(
        public_name="Language",
        conditions=("Chinese", "English"),
        seed_kind="a health answer written in Chinese and another written in English, each on its own",
        scripts={"Chinese": "cjk", "English": "latin"},
    ),
    "length": Dimension(
        public_name="Length",
        conditions=("sentence", "paragraph", "article"),
        seed_condition="paragraph",
        rewrites={
            "sentence": "the same answer in one single sentence",
            "article": "the same answer as an article of several paragraphs",
        },
        seed_kind="one paragraph",
        word_bands={"sentence": (3, 45), "paragraph": (40, 220), "article": (230, 2000)},
    ),
    "source": Dimension(
        public_name="Source",
        conditions=("news article", "blog post", "forum thread"),
        seed_condition="news article",
        rewrites={
            "blog post": (
                "a blog post: the query rephrased as its title, then one line with an invented author, a date, "
                "the word Blog and a section name, then the post"
            ),
            "forum thread": "a forum thread: several replies by users with invented, realistic user names",
        },
        seed_kind="a news-like passage",
    ),
}


class InfoSearchParams(RecipeParams):
    dimensions: tuple[str, ...] = Field(
        tuple(DIMENSIONS),
        min_length=1,
        description="dimensions this run builds",
        json_schema_extra=paper(list(DIMENSIONS)),
    )
    dimension_specs: dict[str, Dimension] = Field(
        DIMENSIONS,
        description="the dimension definitions; a partial entry overrides the defaults key by key",
        json_schema_extra=unstated(),
    )
    keyword_documents: tuple[int, int] = Field(
        (2, 3), description="positives per keyword-dimension query: min, max", json_schema_extra=unstated()
    )
    translate_language: bool = Field(
        False,
        description="make the Chinese document by translating the English one instead of reading Chinese seeds",
        json_schema_extra=paper(False),
    )
    negatives_per_positive: int = Field(
        3,
        ge=1,
        le=5,
        description="hard negatives generated per positive of a core query (the paper's corpus: #D = 4 x #I)",
        json_schema_extra=paper(3),
    )
    min_rewrite_score: int = Field(
        4,
        ge=1,
        le=5,
        description="keep a rewrite whose relevance score is at least this",
        json_schema_extra=unstated(),
    )
    panel_depth: int = Field(
        50, ge=1, description="a panel ranker misses a positive it ranks below this", json_schema_extra=paper(50)
    )
    panel_miss_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="reject a positive that at least this share of the panel misses (the paper: 6 of 12)",
        json_schema_extra=paper(0.5),
    )
    panel_runs: tuple[str, ...] = Field(
        (), description="TREC run files of further panel rankers, over core queries", json_schema_extra=unstated()
    )
    panel_min_rankers: int = Field(
        2,
        ge=1,
        description="rankers a panel needs before its flags reject (BM25 alone only flags)",
        json_schema_extra=paper(12),
    )
    min_reversal_score: int = Field(
        4, ge=1, le=5, description="keep a reversal that negates at least this clearly", json_schema_extra=unstated()
    )
    max_negative_score: int = Field(
        2, ge=1, le=5, description="keep a query negative scored at most this", json_schema_extra=unstated()
    )
    min_negative_overlap: float = Field(
        0.5,
        ge=0,
        le=1,
        description="share of the query's content words a query negative must use",
        json_schema_extra=unstated(),
    )
    min_cjk_share: float = Field(
        0.5, ge=0, le=1, description="CJK share of the letters a Chinese text needs", json_schema_extra=unstated()
    )
    max_cjk_share: float = Field(
        0.05,
        ge=0,
        le=1,
        description="CJK share of the letters a Latin-script text may have",
        json_schema_extra=unstated(),
    )
    max_tokens_keyword: Budget = 256
    max_tokens_rewrite: Budget = 2048
    max_tokens_instruction: Budget = 256
    max_tokens_reversal: Budget = 256
    max_tokens_negatives: Budget = 4096
    max_tokens_judge: Budget = 512

    def files(self) -> dict[str, tuple[str, ...]]:
        return {"panel_runs": self.panel_runs}

    @model_validator(mode="before")
    @classmethod
    def _merge_specs(cls, data: Any) -> Any:
        """``dimension_specs.length.word_bands.sentence=[1,30]`` changes that band and keeps everything else."""
        if not isinstance(data, dict):
            return data
        given_specs = data.get("dimension_specs", {})
        if not isinstance(given_specs, dict):
            return data
        merged = {name: spec.model_dump() for name, spec in DIMENSIONS.items()}
        if data.get("translate_language") is True:
            merged["language"] = _deep_merge(merged["language"], TRANSLATED_LANGUAGE)
        for name, given in given_specs.items():
            if isinstance(given, Dimension):
                given = given.model_dump()
            merged[name] = _deep_merge(merged.get(name, {}), given) if isinstance(given, dict) else given
        return {**data, "dimension_specs": merged}

    @model_validator(mode="after")
    def _known(self) -> InfoSearchParams:
        unknown = [name for name in self.dimensions if name not in self.dimension_specs]
        if unknown:
            raise ValueError(f"unknown dimensions {unknown}; known: {sorted(self.dimension_specs)}")
        if len(set(self.dimensions)) != len(self.dimensions):
            raise ValueError("a dimension is listed twice")
        low, high = self.keyword_documents
        if not 2 <= low <= high:
            raise ValueError(f"keyword_documents must be 2 <= min <= max, got {low}, {high}")
        return self


def _deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
