"""What `ifsynth evaluate` does, as one call: check the options, retrieve (BM25 or an embedding model, writing
its TREC run) or read the user's run, score it with the release's recipe metrics and, on request, INSTFOL with
an LLM judge."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ifsynth.flows.evaluation import scoring
from ifsynth.flows.evaluation.dense import Dense, prompt_format
from ifsynth.flows.evaluation.instfol import Judge, instfol
from ifsynth.flows.evaluation.metrics import REFERENCES, Reference
from ifsynth.flows.evaluation.retrieval import Bm25, Retriever, Run, read_run, restrict, write_run
from ifsynth.flows.llm.embed import BATCH
from ifsynth.flows.llm.limits import Budget
from ifsynth.flows.llm.local_model import LOCAL_BASE_URL, model_name, weights
from ifsynth.flows.llm.route import DEFAULT_KEY_ENV, OPENAI_BASE_URL, OPENAI_DEFAULT_MODEL, api_key
from ifsynth.schemas.errors import ConfigError
from ifsynth.schemas.modes import RecipeMetrics
from ifsynth.warehouse.stats import find_release
from ifsynth.warehouse.store import Warehouse


class EvaluateOptions(BaseModel):
    """The options of one evaluation; a combination that cannot work is refused before anything runs."""

    model_config = ConfigDict(frozen=True)

    retriever: str | None = None  # bm25, or embed:MODEL
    run_file: Path | None = None
    out_file: Path | None = None
    depth: int = 1000
    rerank: bool | None = None
    references: tuple[Reference, ...] = ()
    instfol: bool = False
    query_run: Path | None = None
    base_url: str | None = None
    local_model: str | None = None
    judge_model: str | None = None
    structured_output: Literal["json_schema", "json_object", "none"] = "json_schema"
    embed_base_url: str | None = None
    embed_format: str = "instruct"
    embed_key_env: str = DEFAULT_KEY_ENV
    embed_batch: int = Field(BATCH, ge=1)
    max_calls: int | None = Field(None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _explain(cls, data: dict[str, Any]) -> dict[str, Any]:
        retriever = data.get("retriever")
        if (retriever is None) == (data.get("run_file") is None):
            raise ConfigError("give exactly one of --retriever bm25 and --run FILE (or --retriever embed:MODEL)")
        if retriever not in (None, "bm25") and not (retriever.startswith("embed:") and retriever[6:]):
            raise ConfigError("--retriever must be bm25 or embed:MODEL (or score any model's output with --run FILE)")
        if data.get("embed_base_url") and not (retriever or "").startswith("embed:"):
            raise ConfigError("--embed-base-url is for --retriever embed:MODEL")
        if (retriever or "").startswith("embed:"):
            if not data.get("embed_base_url") and api_key(data.get("embed_key_env") or DEFAULT_KEY_ENV) is None:
                raise ConfigError("--retriever embed:MODEL needs --embed-base-url URL, or OPENAI_API_KEY for OpenAI's")
            prompt_format(data.get("embed_format") or "instruct")
        for name in data.get("references") or ():
            if name not in REFERENCES or name == "paper":
                raise ConfigError(f"--reference must be one of {', '.join(REFERENCES[1:])}")
        if data.get("instfol") and data.get("run_file") is not None and data.get("query_run") is None:
            raise ConfigError("--instfol with --run also needs --query-run FILE (your run over the bare queries)")
        judges = [data.get("base_url"), data.get("local_model")]
        if data.get("instfol") and judges == [None, None] and api_key(DEFAULT_KEY_ENV) is None:
            raise ConfigError(
                "--instfol needs a judge: --base-url (and --judge-model), --local-model FILE.gguf, or OPENAI_API_KEY"
            )
        if None not in judges:
            raise ConfigError("give one INSTFOL judge: --base-url or --local-model, not both")
        return data

    @property
    def system_kind(self) -> str:
        """bm25, embed or run: embedding writes the warehouse (its cache)."""
        return "run" if self.retriever is None else self.retriever.partition(":")[0]

    def system(self, warehouse: Warehouse, release: str) -> Retriever:
        """The retriever ``--retriever`` names."""
        if self.retriever is None or not self.retriever.startswith("embed:"):
            return Bm25()
        return Dense(
            model=self.retriever.removeprefix("embed:"),
            base_url=self.embed_base_url or OPENAI_BASE_URL,
            warehouse=warehouse,
            run_id=f"evaluate:{release}",
            prompt=prompt_format(self.embed_format),
            api_key_env=self.embed_key_env,
            batch=self.embed_batch,
            budget=Budget(max_calls=self.max_calls) if self.max_calls is not None else None,
        )

    @property
    def reference(self) -> Reference:
        """The one variant INSTFOL knows besides the paper's."""
        return "ifir" if "ifir" in self.references else "paper"


def evaluate(
    warehouse: Warehouse,
    release: str | None,
    options: EvaluateOptions,
    metrics: Callable[[str], RecipeMetrics],
    *,
    notify: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The release's metrics (``metrics`` of its recipe, as the recipe declares them) over the run (and
    INSTFOL); ``notify`` hears where a BM25 run was written.

    A release with a candidate pool (FollowIR's ``top_ranked``) is a reranking benchmark, so by default each
    query ranks its pool only, as p-MRR was defined; ``rerank=False`` retrieves from the full corpus."""
    name = find_release(warehouse, release)
    view = scoring.load(warehouse, name)
    rerank = bool(view.pools) if options.rerank is None else options.rerank
    if rerank and not view.pools:
        raise ConfigError(
            f"release `{name}` has no top_ranked pool to rerank; import a FollowIR folder that has one "
            "(top_ranked.jsonl), or leave out --rerank"
        )

    def given(path: Path) -> Run:
        """A run from a file, cut to the pools when reranking (BM25 ranks only the pools already)."""
        run = read_run(path)
        return restrict(run, view.pools) if rerank else run

    run: Run
    system = options.system(warehouse, name)
    if options.run_file is not None:
        run, source = given(options.run_file), str(options.run_file)
    else:
        run = scoring.system_run(warehouse, view, system, options.depth, rerank=rerank)
        label = options.retriever or "bm25"
        default = Path("runs") / f"{name}.{label.replace(':', '-').replace('/', '_')}{'-rerank' if rerank else ''}.trec"
        written = write_run(options.out_file or default, run, tag=f"ifsynth-{label}")
        source = str(written)
        notify(f"{'BM25' if label == 'bm25' else label} run written to {written}")
    report = {
        **scoring.score(view, run, metrics(view.recipe), options.references),
        "run": source,
        "setting": "rerank top_ranked" if rerank else "full corpus",
    }
    if options.instfol:
        if options.local_model is not None:
            path = str(weights(options.local_model))
            judge = Judge(LOCAL_BASE_URL, model_name(path), options.structured_output, local_model=path)
        else:
            judge = Judge(
                options.base_url or OPENAI_BASE_URL,
                options.judge_model or OPENAI_DEFAULT_MODEL,
                options.structured_output,
            )
        bare = (
            given(options.query_run)
            if options.query_run
            else scoring.system_run(warehouse, view, system, options.depth, instructions=False, rerank=rerank)
        )
        judged = instfol(warehouse, view, run, bare, judge, reference=options.reference)
        for mode, figures in judged.pop("modes", {}).items():  # an IFIR release's per-level INSTFOL
            report["modes"][mode].update(figures)
        report.update(judged)
    if isinstance(system, Dense) and options.run_file is None:
        report["embeddings"] = asdict(system.counts)
        notify(system.accounting())
    return report
