"""Run and recipe configuration: what a user sets with --config, --set and the run flags."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ifsynth.schemas.ifir import DEFAULT_SUBSET, DOMAINS, SCHEMES, Domain, Scheme

StructuredOutput = Literal["json_schema", "json_object", "none"]
Role = Literal["generator", "judge"]


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# A run's or a release's name: it becomes part of file names (evaluate's run files), so no path in it.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class Member(Config):
    """One server of an endpoint pool."""

    base_url: str
    weight: float = Field(1.0, gt=0, description="its share: its concurrency is the endpoint's times this")


class Endpoint(Config):
    """An OpenAI-compatible server, or a pool of interchangeable ones (``members``). The key is read from the
    environment variable named here, never stored."""

    base_url: str
    members: tuple[Member, ...] = Field(
        (), description="servers of the same model to spread requests over; base_url is the first"
    )
    api_key_env: str = "OPENAI_API_KEY"
    structured_output: StructuredOutput = Field(
        "json_schema",
        description="json_schema: OpenAI, vLLM, Ollama; json_object: llama.cpp server; none: schema in prompt",
    )
    concurrency: int = Field(16, ge=1, description="upper bound of requests in flight; cut on 429 bursts")
    timeout: float = Field(120.0, gt=0, description="seconds per attempt")
    max_attempts: int = Field(6, ge=1, description="attempts per request on 429, 5xx, timeouts")
    deadline: float = Field(300.0, gt=0, description="seconds a request may take, all its attempts and waits")
    rpm: int | None = Field(None, ge=1, description="requests per minute at most; x-ratelimit-* headers may lower it")
    tpm: int | None = Field(None, ge=1, description="tokens per minute at most; x-ratelimit-* headers may lower it")
    # The embedded llama.cpp server, used when base_url is the local one.
    local_model: str | None = Field(None, description="a GGUF file to run offline; the bundled SmolLM2-135M if unset")
    local_threads: int | None = Field(None, ge=1, description="CPU threads of the local model; all if unset")
    local_parallel: int = Field(2, ge=1, description="requests the local model decodes at once (continuous batching)")
    local_ctx: int = Field(8192, ge=512, description="context tokens of the local model, shared by its parallel slots")

    @model_validator(mode="before")
    @classmethod
    def _first_member(cls, data: Any) -> Any:
        """A pool's base_url is its first member's (a pool is given by its members alone)."""
        if isinstance(data, dict) and data.get("members") and not data.get("base_url"):
            first = data["members"][0]
            url = first.get("base_url") if isinstance(first, dict) else getattr(first, "base_url", None)
            data = {**data, "base_url": url}  # a member that is no mapping fails as a member, below
        return data

    @model_validator(mode="after")
    def _pool(self) -> Endpoint:
        if self.members and self.base_url != self.members[0].base_url:
            raise ValueError("a pool's base_url is its first member's; give the members alone")
        if self.members and self.local_model is not None:
            raise ValueError("the embedded model is one process; it does not pool")
        return self


class Price(Config):
    """US dollars per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


class Shard(Config):
    """One of ``count`` disjoint parts of a run's seeds, by a stable hash of the seed's id (``holds``)."""

    index: int = Field(ge=1, description="which part, from 1")
    count: int = Field(ge=1, description="how many parts")

    @model_validator(mode="after")
    def _within(self) -> Shard:
        if self.index > self.count:
            raise ValueError(f"shard {self.index} of {self.count} does not exist")
        return self

    def holds(self, seed_id: str) -> bool:
        """Whether this shard answers for the seed: the same seed falls in the same shard in every process."""
        digest = hashlib.sha256(seed_id.encode("utf-8")).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.index - 1

    def __str__(self) -> str:
        return f"shard {self.index} of {self.count}"


class RunConfig(Config):
    """Everything that decides what a run produces (plus how hard it may push the endpoint)."""

    recipe: str
    seeds: str
    limit: int | None = Field(None, ge=1)
    name: str | None = Field(
        None, pattern=NAME_PATTERN, description="letters, digits, '.', '_' and '-': it names files and folders"
    )
    model: str
    judge_model: str | None = None
    endpoint: Endpoint
    judge_endpoint: Endpoint | None = None
    prompts_dir: str | None = None
    prices: dict[str, Price] = {}
    params: dict[str, Any] = {}
    max_calls: int | None = Field(None, ge=1, description="requests this invocation may send (cache hits free)")
    max_cost: float | None = Field(None, gt=0, description="US dollars this invocation may spend, from `prices`")
    batch: bool = Field(False, description="send uncached requests through the OpenAI Batch API, stage by stage")
    batch_poll_seconds: float = Field(30.0, gt=0, description="seconds between polls of a pending batch")
    max_failure_share: float = Field(
        0.05, ge=0, le=1, description="a run whose failed requests exceed this share of its asks ends failed"
    )
    humans_from: str | None = Field(None, description="the run whose human verdicts override its judges' (release)")
    cache_only: bool = Field(False, description="answer from the cache only; an uncached ask fails unsent (release)")
    shard: Shard | None = Field(None, description="the part of the seeds this run answers for (--shards)")

    @model_validator(mode="after")
    def _batch_alone(self) -> RunConfig:
        if self.batch and any(e is not None and e.members for e in (self.endpoint, self.judge_endpoint)):
            raise ValueError("--batch sends through one endpoint's Batch API; it does not go with a pool")
        return self

    def endpoint_for(self, role: Role) -> Endpoint:
        return self.judge_endpoint or self.endpoint if role == "judge" else self.endpoint

    def model_for(self, role: Role) -> str:
        return self.judge_model or self.model if role == "judge" else self.model


def paper(value: Any, why: str = "") -> dict[str, Any]:
    """What a setting's paper did (``json_schema_extra`` of its field), and why the default differs when it does:
    the card's fidelity section lists every setting whose value is not the paper's."""
    return {"paper": value, "why": why}


def deviations(params: BaseModel) -> list[dict[str, Any]]:
    """The settings of ``params`` whose value differs from what the recipe's paper did, each with the reason the
    default differs, or "set for this run" where the user chose the difference."""
    values = params.model_dump(mode="json", by_alias=True)
    out = []
    for name, field in type(params).model_fields.items():
        extra = field.json_schema_extra
        if not isinstance(extra, dict) or "paper" not in extra:
            continue
        setting = field.alias or name
        value, expected = values[setting], _json(extra["paper"])
        if value != expected:
            why = extra["why"] if value == _json(field.default) else "set for this run"
            out.append({"setting": setting, "paper": expected, "value": value, "why": why})
    return out


def _json(value: Any) -> Any:
    """A default as it reads once dumped to JSON (tuples become lists)."""
    return list(map(_json, value)) if isinstance(value, list | tuple) else value


class RecipeParams(Config):
    """Parameters shared by every recipe."""

    seed: int = Field(0, description="seed of every sample and shuffle; also sent to the endpoint")
    temperature: float = Field(1.0, ge=0, le=2, description="sampling temperature of generation stages")
    judge_temperature: float = Field(0.0, ge=0, le=2, description="sampling temperature of judge stages")


Band = Literal["inside", "outside"]
NoisePool = Literal["positives", "corpus"]


class InstructIRParams(RecipeParams):
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

    @model_validator(mode="after")
    def _bands(self) -> InstructIRParams:
        for name in ("query_length_percentiles", "passage_length_percentiles"):
            low, high = getattr(self, name)
            if not 0 <= low <= high <= 100:
                raise ValueError(f"{name} must be two percentiles with 0 <= low <= high <= 100, got {low}, {high}")
        return self


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
    dimensions: tuple[str, ...] = Field(tuple(DIMENSIONS), min_length=1, description="dimensions this run builds")
    dimension_specs: dict[str, Dimension] = Field(
        DIMENSIONS, description="the dimension definitions; a partial entry overrides the defaults key by key"
    )
    keyword_documents: tuple[int, int] = Field((2, 3), description="positives per keyword-dimension query: min, max")
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
    min_rewrite_score: int = Field(4, ge=1, le=5, description="keep a rewrite whose relevance score is at least this")
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
    panel_runs: tuple[str, ...] = Field((), description="TREC run files of further panel rankers, over core queries")
    panel_min_rankers: int = Field(
        2,
        ge=1,
        description="rankers a panel needs before its flags reject (BM25 alone only flags)",
        json_schema_extra=paper(12, "the paper's twelve retrievers are not here: BM25 plus the runs you pass"),
    )
    min_reversal_score: int = Field(4, ge=1, le=5, description="keep a reversal that negates at least this clearly")
    max_negative_score: int = Field(2, ge=1, le=5, description="keep a query negative scored at most this")
    min_negative_overlap: float = Field(
        0.5, ge=0, le=1, description="share of the query's content words a query negative must use"
    )
    min_cjk_share: float = Field(0.5, ge=0, le=1, description="CJK share of the letters a Chinese text needs")
    max_cjk_share: float = Field(0.05, ge=0, le=1, description="CJK share of the letters a Latin-script text may have")
    max_tokens_keyword: int = Field(256, ge=16)
    max_tokens_rewrite: int = Field(2048, ge=16)
    max_tokens_instruction: int = Field(256, ge=16)
    max_tokens_reversal: int = Field(256, ge=16)
    max_tokens_negatives: int = Field(4096, ge=16)
    max_tokens_judge: int = Field(512, ge=16)

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
        missing = [path for path in self.panel_runs if not Path(path).expanduser().is_file()]
        if missing:
            raise ValueError(f"panel_runs: no file {', '.join(missing)}")
        low, high = self.keyword_documents
        if not 2 <= low <= high:
            raise ValueError(f"keyword_documents must be 2 <= min <= max, got {low}, {high}")
        return self


def _deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


Flavour = Literal["general", "code", "math"]


class InfIRParams(RecipeParams):
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

    @model_validator(mode="after")
    def _bands(self) -> InfIRParams:
        return InstructIRParams._bands(self)  # type: ignore[arg-type]  # the same check


FollowIRMode = Literal["eval", "train"]


class FollowIRParams(RecipeParams):
    """FollowIR: an evaluation set (altered narratives, re-judged documents, a rerank pool) or, with
    ``mode = train``, training rows (synthetic documents labelled against a narrative)."""

    mode: FollowIRMode = Field("eval", description="eval: altered narratives and a rerank pool; train: training rows")
    query_field: Literal["title", "description"] | None = Field(
        None,
        description="the topic field that is the query; none: the description for eval (the paper's Table 1 shows "
        "one), the title for train (its document prompt searches the title)",
    )
    min_relevant: int = Field(2, ge=1, description="eval: a topic needs at least this many judged-relevant documents")
    alterations: int = Field(
        3,
        ge=1,
        le=10,
        description="eval: candidate alterations per topic, tried in order",
        json_schema_extra=paper(1, "expert annotators wrote one alteration per topic; an LLM gets several tries"),
    )
    flip_share: tuple[float, float] = Field(
        (0.3, 0.7),
        description="eval: keep an alteration when the share of relevant documents it flips lies in this band",
        json_schema_extra=paper((0.5, 0.5), "the annotators aimed at half; a band lets an LLM's tries land"),
    )
    spot_checks: int = Field(
        5, ge=0, description="eval: judged non-relevant documents re-judged per candidate; one judged relevant fails it"
    )
    window_words: int = Field(400, ge=10, description="judge long documents in windows of this many words (MaxP)")
    window_stride: int = Field(200, ge=1, description="words between the starts of two windows")
    pool_depth: int = Field(
        1000,
        ge=1,
        description="eval: top non-relevant documents per ranker in the rerank pool",
        json_schema_extra=paper(1000),
    )
    pool_runs: tuple[str, ...] = Field(
        (), description="eval: TREC run files of further pool rankers (`--pool-run`), query ids = topic ids"
    )
    ablations: bool = Field(
        True,
        description="write each narrative as a short command and as keywords (the release's short_query, keywords)",
    )
    documents_per_label: int = Field(
        2,
        ge=1,
        le=5,
        description="train: relevant and non-relevant documents written per pair",
        json_schema_extra=paper(2),
    )
    temperature: float = Field(1.0, ge=0, le=2, description="sampling temperature of generation stages")
    judge_temperature: float = Field(0.0, ge=0, le=2, description="sampling temperature of the judges")
    max_tokens_alter: int = Field(2048, ge=16)
    max_tokens_judge: int = Field(512, ge=16)
    max_tokens_ablation: int = Field(256, ge=16)
    max_tokens_documents: int = Field(4096, ge=16)

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
        if self.window_stride > self.window_words:
            raise ValueError("window_stride must not exceed window_words (windows would skip words)")
        missing = [path for path in self.pool_runs if not Path(path).is_file()]
        if missing:
            raise ValueError(f"pool_runs: no file {', '.join(missing)}")
        return self

    @field_validator("pool_runs")
    @classmethod
    def _absolute(cls, paths: tuple[str, ...]) -> tuple[str, ...]:
        """Stored as absolute paths, so a run continued from another directory still finds its run files."""
        return tuple(str(Path(path).expanduser().resolve()) for path in paths)


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
