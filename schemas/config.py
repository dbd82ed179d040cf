"""Run and recipe configuration: what a user sets with --config, --set and the run flags."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

StructuredOutput = Literal["json_schema", "json_object", "none"]
Role = Literal["generator", "judge"]


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Endpoint(Config):
    """An OpenAI-compatible server. The key is read from the environment variable named here, never stored."""

    base_url: str
    api_key_env: str = "OPENAI_API_KEY"
    structured_output: StructuredOutput = Field(
        "json_schema",
        description="json_schema: OpenAI, vLLM, Ollama; json_object: llama.cpp server; none: schema in prompt",
    )
    concurrency: int = Field(16, ge=1, description="upper bound of requests in flight; cut on 429 bursts")
    timeout: float = Field(120.0, gt=0, description="seconds per attempt")
    max_attempts: int = Field(6, ge=1, description="attempts per request on 429, 5xx, timeouts")


class Price(Config):
    """US dollars per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


class RunConfig(Config):
    """Everything that decides what a run produces (plus how hard it may push the endpoint)."""

    recipe: str
    seeds: str
    limit: int | None = Field(None, ge=1)
    name: str | None = None
    model: str
    judge_model: str | None = None
    endpoint: Endpoint
    judge_endpoint: Endpoint | None = None
    prompts_dir: str | None = None
    prices: dict[str, Price] = {}
    params: dict[str, Any] = {}

    def endpoint_for(self, role: Role) -> Endpoint:
        return self.judge_endpoint or self.endpoint if role == "judge" else self.endpoint

    def model_for(self, role: Role) -> str:
        return self.judge_model or self.model if role == "judge" else self.model


class RecipeParams(Config):
    """Parameters shared by every recipe."""

    seed: int = Field(0, description="seed of every sample and shuffle; also sent to the endpoint")
    temperature: float = Field(1.0, ge=0, le=2, description="sampling temperature of generation stages")
    judge_temperature: float = Field(0.0, ge=0, le=2, description="sampling temperature of judge stages")


class InstructIRParams(RecipeParams):
    instructions_per_query: int = Field(10, ge=1, le=50)
    query_length_percentiles: tuple[float, float] = (25.0, 75.0)
    passage_length_percentiles: tuple[float, float] = (25.0, 75.0)
    length_unit: Literal["chars", "words"] = "chars"
    q1_min_score: int = Field(4, ge=1, le=5, description="keep a rewrite whose relevance score is at least this")
    min_group_size: int = Field(7, ge=1, description="keep a query when at least this many instances survive")
    max_noise_passages: int = Field(6000, ge=0)
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
