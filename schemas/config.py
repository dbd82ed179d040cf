"""Run and recipe configuration: what a user sets with --config, --set and the run flags."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.fields import FieldInfo

StructuredOutput = Literal["json_schema", "json_object", "none"]
Role = Literal["generator", "judge"]


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# A run's or a release's name: it becomes part of file names (evaluate's run files), so no path in it.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


def _http_url(url: str) -> str:
    """An endpoint is reached over HTTP: a URL without that scheme or a host is a typo, said before the run
    looks at the endpoint (and before it would send a key there); not echoed, as it may hold a password."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must start with http:// or https:// and name a host, such as http://localhost:8000/v1")
    return url


BaseUrl = Annotated[str, AfterValidator(_http_url)]


class Member(Config):
    """One server of an endpoint pool."""

    base_url: BaseUrl
    weight: float = Field(1.0, gt=0, description="its share: its concurrency is the endpoint's times this")


class Endpoint(Config):
    """An OpenAI-compatible server, or a pool of interchangeable ones (``members``). The key is read from the
    environment variable named here, never stored."""

    base_url: BaseUrl
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
    stage_by_stage: bool = Field(
        False,
        description="each LLM stage waits for the one before it to finish, instead of taking each seed's items "
        "as soon as they are decided (the output is the same; debugging, or comparing the two)",
    )
    max_failure_share: float = Field(
        0.05, ge=0, le=1, description="a run whose failed requests exceed this share of its asks ends failed"
    )
    humans_from: str | None = Field(None, description="the run whose human verdicts override its judges' (release)")
    cache_only: bool = Field(False, description="answer from the cache only; an uncached ask fails unsent (release)")
    shard: Shard | None = Field(None, description="the part of the seeds this run answers for (--shards)")

    @field_validator("model", "judge_model")
    @classmethod
    def _named(cls, model: str | None) -> str | None:
        if model is not None and not model.strip():
            raise ValueError("a model's name cannot be empty")
        return model

    @model_validator(mode="after")
    def _batch_alone(self) -> RunConfig:
        if self.batch and any(e is not None and e.members for e in (self.endpoint, self.judge_endpoint)):
            raise ValueError("--batch sends through one endpoint's Batch API; it does not go with a pool")
        return self

    def endpoint_for(self, role: Role) -> Endpoint:
        return self.judge_endpoint or self.endpoint if role == "judge" else self.endpoint

    def model_for(self, role: Role) -> str:
        return self.judge_model or self.model if role == "judge" else self.model


def paper(value: Any) -> dict[str, Any]:
    """What the authors did with a setting (``json_schema_extra``): the paper's value, or its release's where the
    two disagree. A default that differs is on the recipe's fidelity list, with its reason."""
    return {"paper": value}


def unstated() -> dict[str, Any]:
    """A setting the authors give no value for (an answer budget, a sample seed): no value of it departs from them."""
    return {"paper_states": False}


# An LLM answer's token budget: no paper states one.
Budget = Annotated[int, Field(ge=16, json_schema_extra=unstated())]


class Difference(Config):
    """One way a recipe departs by default from what its authors did (their paper, or their release where the two
    disagree). ``setting`` names the setting that takes the authors' way: the fidelity rows then show its values;
    a difference no setting undoes says in ``paper`` and ``here`` what each does."""

    what: str
    why: str
    setting: str | None = None
    paper: str = ""
    here: str = ""


def declared(field: FieldInfo) -> dict[str, Any] | None:
    """What a setting declares of the authors' value: ``paper()``, ``unstated()``, or nothing (None)."""
    extra = field.json_schema_extra
    return extra if isinstance(extra, dict) and ("paper" in extra or "paper_states" in extra) else None


def fidelity(params: BaseModel, differences: Sequence[Difference]) -> list[dict[str, str]]:
    """The rows of a release's (or, with default ``params``, a recipe's) fidelity table: every listed difference
    the settings keep, then every stated setting this run set away from the authors' value on its own."""
    values = params.model_dump(mode="json", by_alias=True)
    fields = {field.alias or name: field for name, field in type(params).model_fields.items()}
    rows, listed = [], {d.setting for d in differences}
    for d in differences:
        if d.setting is None:
            rows.append({"what": d.what, "paper": d.paper, "release": d.here, "why": d.why})
            continue
        expected = _json((declared(fields[d.setting]) or {}).get("paper"))
        if values[d.setting] != expected:
            why = d.why if values[d.setting] == _json(fields[d.setting].default) else "set for this run"
            rows.append({"what": d.what, **_values(d.setting, expected, values[d.setting]), "why": why})
    for setting, field in fields.items():
        extra = declared(field)
        if setting in listed or extra is None or "paper" not in extra:
            continue
        expected = _json(extra["paper"])
        if values[setting] != expected:
            rows.append(
                {"what": f"`{setting}`", **_values(setting, expected, values[setting]), "why": "set for this run"}
            )
    return rows


def _values(setting: str, paper: Any, value: Any) -> dict[str, str]:
    def shown(v: Any) -> str:
        return f"`{setting}={v if isinstance(v, str) else json.dumps(v)}`"

    return {"paper": shown(paper), "release": shown(value)}


def _json(value: Any) -> Any:
    """A default as it reads once dumped to JSON (tuples become lists)."""
    return list(map(_json, value)) if isinstance(value, list | tuple) else value


class RecipeParams(Config):
    """Parameters shared by every recipe."""

    seed: int = Field(
        0, description="seed of every sample and shuffle; also sent to the endpoint", json_schema_extra=unstated()
    )
    temperature: float = Field(
        1.0, ge=0, le=2, description="sampling temperature of generation stages", json_schema_extra=unstated()
    )
    judge_temperature: float = Field(
        0.0, ge=0, le=2, description="sampling temperature of judge stages", json_schema_extra=unstated()
    )

    def files(self) -> dict[str, tuple[str, ...]]:
        """The files these settings name, by setting. They are checked to exist before a run, not by a validator:
        a config is also read where those files are not (a report, a review, a merge)."""
        return {}


Band = Literal["inside", "outside"]
NoisePool = Literal["positives", "corpus"]
Selection = Literal["bands", "already_selected"]  # what the shared assemble adds to a corpus as untouched passages


class SeedSelection(RecipeParams):
    """The settings of the shared seed selection: query and passage length percentile bands over the seeds."""

    query_length_percentiles: tuple[float, float] = Field((25.0, 75.0), json_schema_extra=unstated())
    passage_length_percentiles: tuple[float, float] = Field((25.0, 75.0), json_schema_extra=unstated())
    passage_band: Band = Field("inside", json_schema_extra=unstated())
    length_unit: Literal["chars", "words"] = Field("chars", json_schema_extra=unstated())
    select: Selection = Field(
        "bands",
        description="bands: keep the seeds inside length bands computed from them; already_selected: the seeds are "
        "a finished selection (InstructIR's released filtered_version), so only the one-positive rule (and one query "
        "per passage, when set) applies",
        json_schema_extra=unstated(),
    )
    one_query_per_passage: bool = Field(
        False,
        description="of eligible queries whose one positive is the same passage, seed only the one the sample "
        "would draw first; the others are rejected",
        json_schema_extra=unstated(),
    )

    @model_validator(mode="after")
    def _bands(self) -> Self:
        for name in ("query_length_percentiles", "passage_length_percentiles"):
            low, high = getattr(self, name)
            if not 0 <= low <= high <= 100:
                raise ValueError(f"{name} must be two percentiles with 0 <= low <= high <= 100, got {low}, {high}")
        return self
