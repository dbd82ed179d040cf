"""The offline demo's sizing: small enough for a 135M model on two CPU cores in a few minutes."""

from __future__ import annotations

from ifsynth.flows.llm.local_model import LOCAL_BASE_URL, LOCAL_MODEL
from ifsynth.flows.run.config import resolve
from ifsynth.schemas.config import RunConfig

DEMO_SETTINGS: dict[str, object] = {
    "seeds": "demo",
    "limit": 10,
    "instructions_per_query": 3,
    "min_group_size": 1,
    "q1_min_score": 3,
    "judge_temperature": 1.0,  # greedy, the 135M judge names the first candidate almost always
    "max_noise_passages": 200,
    "max_tokens_instructions": 160,
    "max_tokens_rewrite": 160,
    "max_tokens_judge": 128,
}


def demo_config(local_model: str | None = None) -> RunConfig:
    sets = [f"{key}={value}" for key, value in DEMO_SETTINGS.items() if key not in ("seeds", "limit")]
    # Always the embedded model, even where OPENAI_API_KEY is set: the demo promises no key and no network.
    return resolve(
        "instructir",
        seeds="demo",
        limit=DEMO_SETTINGS["limit"],
        sets=sets,
        base_url=LOCAL_BASE_URL,
        local_model=local_model,
        model=None if local_model else LOCAL_MODEL,
    )
