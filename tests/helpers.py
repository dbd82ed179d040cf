"""What tests share beyond fixtures: a gateway config and asks for the fake, a clock that moves only when
the code under test waits, a responder that reads the InstructIR prompts like a model that follows them, and
direct access to the warehouse's tables.

The tool itself never reads its tables directly (every statement it runs is a named ``Warehouse`` method);
tests look at rows a command wrote, or set up rows no command writes, through the warehouse's connection."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import random
import re
import signal
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run import registry
from ifsynth.flows.run.stage import Env
from ifsynth.prompts.registry import Prompts, Rendered
from ifsynth.schemas.answers import Answer, RelevanceJudgement
from ifsynth.schemas.config import Endpoint, RunConfig
from ifsynth.schemas.records import CallRecord, ItemRecord
from ifsynth.warehouse.store import Warehouse
from tests.fake_openai import FakeOpenAI

GOOD = {"explanation": "it answers", "score": 5}
BUILTIN = ("instructir", "infosearch", "infir", "followir", "ifir")  # the recipes ifsynth itself registers


def config(fake: FakeOpenAI, **endpoint: Any) -> RunConfig:
    """A run config whose one endpoint is the fake, with fast retries."""
    settings = {"base_url": fake.base_url, "max_attempts": 4, "timeout": 5.0, **endpoint}
    return RunConfig(recipe="instructir", seeds="demo", model="m", endpoint=Endpoint(**settings))


class FakeClock:
    """Time that moves only when the code under test sleeps (or a test moves it): backoff, rests and rate
    limits take no time, and ``slept`` holds every wait that was asked for."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)  # a sleep still lets the other tasks run


def ask(text: str = "judge this") -> Ask:
    prompt = Rendered("test/judge", "abc123", ({"role": "user", "content": text},))
    return Ask(prompt, RelevanceJudgement, "generator", 0.0, 64)


def field(text: str, label: str) -> str:
    """The value of a ``Label: value`` line of a prompt."""
    match = re.search(rf"^{label}: (.*)$", text, re.MULTILINE)
    assert match, f"no `{label}:` line in the prompt"
    return match.group(1)


def sensible(body: dict[str, Any]) -> dict[str, Any]:
    """Answers InstructIR's requests by schema name, reading the prompt like a model that follows it; the
    rewrite for reader 3 of a query is judged off-topic."""
    name = body["response_format"]["json_schema"]["name"]
    prompt = body["messages"][-1]["content"]
    if name.startswith("Instructions"):
        k = int(name.removeprefix("Instructions"))
        query = field(prompt, "Query")
        return {"instructions": [f"I am reader {i} asking about {query}." for i in range(1, k + 1)]}
    if name == "Rewrite":
        searcher = field(prompt, "About the searcher")
        return {"plan": "tailor it", "revised_passage": f"For {searcher} here is the answer."}
    if name == "RelevanceJudgement":
        bad = "I am reader 3 " in field(prompt, "Passage")
        return {"explanation": "off" if bad else "answers it", "score": 2 if bad else 5}
    if name.startswith("Pick"):
        wanted = field(prompt, "About the searcher")
        for label, text in re.findall(r"^\[(\d+)\] (.*)$", prompt, re.MULTILINE):
            if wanted in text:
                return {"explanation": "matches the reader", "best": label}
    raise AssertionError(f"unexpected request {name}")


def query(warehouse: Warehouse, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    """A test's own read of the warehouse (``Warehouse.query``: one SELECT)."""
    return warehouse.query(sql, params)


def kept_blocks(warehouse: Warehouse) -> int:
    """The bytes of table blocks DuckDB holds in its buffer pool."""
    sql = "SELECT sum(memory_usage_bytes) AS b FROM duckdb_memory() WHERE tag = 'BASE_TABLE'"
    return int(query(warehouse, sql)[0]["b"])


def random_key(i: int) -> str:
    """A request key as random as a real one (a SHA-256 in hex): row groups' ranges of keys skip nothing."""
    return hashlib.sha256(str(i).encode()).hexdigest()


def answered_at(i: int, at: datetime, response: str | None = None) -> CallRecord:
    """A call answered at ``at`` under ``random_key(i)``, its answer 300 characters unless given."""
    return CallRecord(
        call_id=f"{i}-{at}", key=random_key(i), run_id="run-1", stage="judge", template="t", template_hash="h",
        base_url="http://x/v1", model="m", request={"n": i}, response=response or f"{i:06d}" * 50, created_at=at,
    )  # fmt: skip


def env(recipe: str = "instructir", stage: str = "stage", **params: Any) -> Env:
    """What a stage's halves read in a run of ``recipe`` with those settings: no warehouse, no endpoint, so
    ``build``, ``handle`` and ``decide`` are tested as the plain functions they are."""
    declared = registry.recipe(recipe)
    settings = declared.settings.model_validate(params)
    return Env(f"{recipe}-run", recipe, stage, settings, Prompts(package=declared.prompts))


def at(env: Env, stage: str) -> Env:
    """The same run's ``Env`` for another stage (the stage its records are stamped with)."""
    return dataclasses.replace(env, stage=stage)


def ok(value: Answer, key: str = "key-1") -> Reply:
    return Reply(status="ok", value=value, keys=[key], raw=value.model_dump_json())


def unusable(error: str = "invalid JSON at `score`", key: str = "key-bad") -> Reply:
    return Reply(status="parse_error", keys=[key], error=error, raw="{")


def item(stage: str, kind: str, group: str = "q1", ord: int = 0, **payload: Any) -> ItemRecord:
    """An input item of a stage, as an earlier stage would have written it."""
    return ItemRecord(
        run_id="instructir-run", item_id=f"{stage}-{kind}-{group}-{ord}", stage=stage, kind=kind, group_id=group,
        payload=payload, ord=ord,
    )  # fmt: skip


def export_files(root: Path) -> dict[str, bytes]:
    """Every file of an export folder, its card's run id blanked: two runs of one release differ only there."""
    found = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    for name, data in found.items():
        if name.endswith("README.md"):
            found[name] = re.sub(rb"\n  run_id: \S+\n", b"\n  run_id: -\n", data)
    return found


def small_instructir(warehouse: str | Path, base_url: str, *, limit: int = 4, name: str | None = None,
                     min_group_size: int = 3) -> str:  # fmt: skip
    """A small InstructIR run over InstructIR's released seeds against a fake at ``base_url``; its run id."""
    from ifsynth.flows.run.config import resolve
    from ifsynth.flows.run.runner import execute
    from tests.conftest import INSTRUCTIR_SEEDS

    sets = ["instructions_per_query=4", f"min_group_size={min_group_size}", "max_noise_passages=40"]
    config = resolve("instructir", seeds=f"beir:{INSTRUCTIR_SEEDS}", limit=limit, base_url=base_url, model="m",
                     name=name, sets=sets)  # fmt: skip
    return execute(config, warehouse).run_id


WORDS = (
    "river", "stone", "light", "paper", "garden", "window", "silver", "market", "forest", "bridge", "candle",
    "harbor", "meadow", "pencil", "rocket", "shadow", "thunder", "valley", "winter", "engine", "glacier",
)  # fmt: skip


def synthetic_beir(root: Path, queries: int, *, noise: int = 2) -> Path:
    """A deterministic BEIR folder: ``queries`` queries with one positive each, plus noise passages."""
    rng = random.Random(queries)
    root.mkdir(parents=True, exist_ok=True)

    def text(low: int, high: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))

    with (root / "corpus.jsonl").open("w") as corpus, (root / "queries.jsonl").open("w") as qs:
        for i in range(queries):
            corpus.write(json.dumps({"_id": f"d{i}", "title": "", "text": text(40, 80)}) + "\n")
            qs.write(json.dumps({"_id": f"q{i}", "text": f"what about {text(3, 6)}"}) + "\n")
        for i in range(queries * noise):
            corpus.write(json.dumps({"_id": f"n{i}", "title": "", "text": text(40, 80)}) + "\n")
    (root / "qrels").mkdir(exist_ok=True)
    rows = "".join(f"q{i}\td{i}\t1\n" for i in range(queries))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)
    return root


def synthetic_followir(root: Path, topics: int) -> Path:
    """A deterministic FollowIR folder: ``topics`` topics of two positives each in the original mode, the
    second dropped by the altered instruction, over four passages per topic plus their noise."""
    rng = random.Random(topics)

    def text(low: int, high: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))

    synthetic_beir(root, topics * 2, noise=1)
    with (root / "queries.jsonl").open("w") as qs:
        for t in range(topics):
            qs.write(json.dumps({"_id": f"t{t}", "text": text(3, 5), "instruction_og": text(6, 9),
                                 "instruction_changed": text(6, 9)}) + "\n")  # fmt: skip
    for mode, kept in (("og", 1), ("changed", 0)):
        (root / f"qrels_{mode}").mkdir(exist_ok=True)
        rows = "".join(f"t{t}\td{2 * t}\t1\nt{t}\td{2 * t + 1}\t{kept}\n" for t in range(topics))
        (root / f"qrels_{mode}" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)
    return root


def as_from_a_shell() -> None:
    """A child started as a shell starts it, with Ctrl-C deliverable: a signal mask or an ignored SIGINT of the
    test's process would otherwise be inherited across exec (a pytest-xdist worker that ran flows in process;
    `make test &`, whose background job ignores SIGINT)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    signal.signal(signal.SIGINT, signal.SIG_DFL)
