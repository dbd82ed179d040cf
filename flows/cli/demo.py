"""The offline demo's sizing: small enough for a 135M model on two CPU cores in a few minutes."""

from __future__ import annotations

from pathlib import Path

from ifsynth.flows.llm.local_model import LOCAL_BASE_URL, LOCAL_MODEL
from ifsynth.flows.run.config import resolve
from ifsynth.flows.run.exports import export
from ifsynth.schemas.config import RunConfig
from ifsynth.warehouse.export import release_for, withdraw
from ifsynth.warehouse.store import Warehouse

# Shorter wording than the recipe's templates, fixed words before the variable ones: on CPU, reading the prompt
# costs more than writing the answer, and the embedded server reuses the prefix it has already read.
DEMO_PROMPTS = Path(__file__).parent / "demo_prompts"

DEMO_SETTINGS: dict[str, object] = {
    "seeds": "demo",
    "limit": 6,  # every stage of the funnel has inputs, and two candidates per query for the specificity judge
    "instructions_per_query": 2,
    "min_group_size": 1,
    "q1_min_score": 3,
    "temperature": 0.6,  # at 1.0 the 135M model drifts into other languages and strings of numbers
    "judge_temperature": 1.0,  # greedy, the 135M judge names the first candidate almost always
    "max_noise_passages": 200,
    # budgets the answers fit: the embedded model's JSON schema bounds each text field to its share of them
    "max_tokens_instructions": 192,
    "max_tokens_rewrite": 288,
    "max_tokens_judge": 64,
}


def demo_config(local_model: str | None = None) -> RunConfig:
    sets = [f"{key}={value}" for key, value in DEMO_SETTINGS.items() if key not in ("seeds", "limit")]
    # Always the embedded model, even where OPENAI_API_KEY is set: the demo promises no key and no network.
    return resolve(
        "instructir",
        seeds="demo",
        prompts_dir=str(DEMO_PROMPTS),
        limit=DEMO_SETTINGS["limit"],
        sets=sets,
        base_url=LOCAL_BASE_URL,
        local_model=local_model,
        model=None if local_model else LOCAL_MODEL,
    )


def export_demo(warehouse: Warehouse, run_id: str, out: Path) -> list[Path] | None:
    """The demo run's release in BEIR files under ``out``; None when it kept no query, with the export of an
    earlier demo in ``out`` removed, so the folder never holds another run's. A small model's judges are close
    to chance, so an empty release is one outcome of the demo, not its failure."""
    release = release_for(warehouse, run_id)
    if not warehouse.ordered_queries(release):
        withdraw(out, release)
        return None
    return export(warehouse, release, "beir", out, overwrite=True).files
