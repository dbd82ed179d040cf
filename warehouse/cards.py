"""A release's dataset card, built with ``huggingface_hub``'s DatasetCard so the Hub, ``datasets`` and mteb
read its metadata: license, languages, task, size category, tags, the tool's version and the run id, and the
``configs:`` that let ``datasets.load_dataset(folder, name)`` load each exported file on its own.

The body (counts, models, fidelity, yields, parameters) is the card the warehouse stores at assembly. An
endpoint URL may name a private host, so the card shows only its kind unless asked for the URL."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import yaml

# the embedded model's fixed address (flows/llm/local_model.py), which the warehouse may not import
_LOCAL_HOSTS = ("local.ifsynth", "localhost", "::1")
_DATA_SUFFIXES = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".tsv": "csv"}
_SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"))


@dataclass(frozen=True)
class CardFacts:
    """What a recipe's cards say beyond the stored card: its languages, the license of the seed collection its
    paper used (the Hub asks for ``license_name`` and ``license_link`` when ``license`` is ``other``), and notes."""

    languages: tuple[str, ...] = ("en",)
    license_name: str = "seed-collection"
    license_link: str = "README.md"
    notes: tuple[str, ...] = ()


def tool_version() -> str:
    try:
        return version("ifsynth")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


def host_kind(url: str) -> str:
    """What the card says of an endpoint by default: OpenAI's API, this machine, or another server."""
    host = urlsplit(url).hostname or ""
    if host.endswith("openai.com"):
        return host
    if host in _LOCAL_HOSTS or host.startswith("127."):
        return "local"
    return "private endpoint"


def size_category(n: int) -> str:
    return next((label for bound, label in _SIZES if n < bound), "n>1M")


def configs_for(files: Sequence[str], *, training: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """One config per data file, named for its path (``og/qrels/test.tsv`` -> ``og-qrels-test``): a folder
    holding a corpus, queries and qrels side by side is several tables, which ``datasets`` would otherwise
    merge into one split. A table written twice (``train.jsonl`` and ``train.parquet``) is one config, of the
    first file. The split is ``train`` for training data, else ``test``; the first config is the default.

    ``datasets`` reads a whole folder with the one builder its first config's files call for, so the files
    of another format (a BEIR folder's TSV qrels beside its JSONL) get no config: they are returned apart,
    for the card to say how to load them."""
    configs: dict[str, dict[str, Any]] = {}
    apart: list[str] = []
    builder = next(
        (_DATA_SUFFIXES[PurePosixPath(f).suffix] for f in files if PurePosixPath(f).suffix in _DATA_SUFFIXES), None
    )
    for file in files:
        path = PurePosixPath(file)
        if path.suffix not in _DATA_SUFFIXES:
            continue
        if _DATA_SUFFIXES[path.suffix] != builder:
            apart.append(file)
            continue
        stem = path.stem.removeprefix(f"{path.parent.name}-")  # IFIR's aila/aila-corpus.jsonl: aila-corpus
        name = "-".join((*path.parent.parts, stem))
        split = "train" if training or path.stem.startswith("train") else "test"
        configs.setdefault(name, {"config_name": name, "data_files": [{"split": split, "path": file}]})
    listed = list(configs.values())
    if listed:
        listed[0]["default"] = True
    return listed, apart


def mteb_configs(modes: Sequence[str]) -> list[dict[str, Any]]:
    """mteb's retrieval loader reads ``corpus``, ``queries``, ``instruction`` and ``default`` (the qrels); with
    several modes (its subsets) ``<mode>-corpus`` ... and ``<mode>-qrels``."""
    tables = ("corpus", "queries", "instruction", "default")
    if len(modes) <= 1:
        return [
            {"config_name": name, "data_files": [{"split": "test", "path": f"{name}/test-*.parquet"}]}
            for name in tables
        ]
    configs: list[dict[str, Any]] = [
        {
            "config_name": f"{mode}-{'qrels' if name == 'default' else name}",
            "data_files": [{"split": "test", "path": f"{mode}/{name}/test-*.parquet"}],
        }
        for mode in modes
        for name in tables
    ]
    configs[0]["default"] = True  # so that load_dataset(folder) alone loads something
    return configs


def render(
    card: dict[str, Any],
    *,
    facts: CardFacts,
    configs: list[dict[str, Any]],
    apart: Sequence[str] = (),
    run_id: str | None,
    queries: int,
    content: str = "",
    endpoints: bool = False,
) -> str:
    """The README.md of an export: Hub metadata, then the stored card as Markdown. ``content`` (a digest of the
    data files) goes into each config's ``description``: ``datasets`` keys its cache of a local folder by the
    folder's name and the configs, not the files, so without it a same-named folder or a re-export loads the
    previous release's rows."""
    from huggingface_hub import DatasetCard, DatasetCardData  # only exports render one (0.14 s of CPU)

    recipe = card.get("recipe", "unknown")
    data = DatasetCardData(
        license="other",
        license_name=facts.license_name,
        license_link=facts.license_link,
        language=list(facts.languages),
        task_categories=["text-retrieval"],
        task_ids=["document-retrieval"],
        size_categories=[size_category(queries)],
        tags=["ifsynth", recipe, "instruction-following", "synthetic"],
        pretty_name=f"{recipe} release made with ifsynth",
        configs=[{**config, "description": content} for config in configs] if content and configs else configs or None,
        ifsynth={"version": tool_version(), "run_id": run_id},
    )
    if apart:
        loads = "; ".join(f"`{file}`: `{_how(file)}`" for file in apart)
        note = f"Files of another format than the configs', for `datasets`: {loads}."
        card = {**card, "notes": [*card.get("notes", []), note]}
    return str(DatasetCard(f"---\n{data.to_yaml()}\n---\n\n{markdown(card, endpoints=endpoints)}"))


def _how(file: str) -> str:
    builder = _DATA_SUFFIXES[PurePosixPath(file).suffix]
    return f"load_dataset('{builder}', data_files='{file}'" + (", sep='\\t')" if builder == "csv" else ")")


def markdown(card: dict[str, Any], *, endpoints: bool = False) -> str:
    """The card's body: counts, models, template hashes, per-stage yields, parameters and notes."""
    recipe = card.get("recipe", "unknown")
    lines = [f"# {recipe} release, made with ifsynth", ""]
    if card.get("seeds"):
        lines += [f"Seeds: `{card['seeds']}`" + (f" (limit {card['limit']})" if card.get("limit") else ""), ""]
    lines += [
        "License: `other`: the passages and queries derive from the seed collection, whose license applies "
        "(`license_link`; the collection the recipe's paper used, or yours if the run read your own seeds).",
        "",
    ]
    lines += ["## Counts", "", "| what | count |", "|---|---:|"]
    lines += [f"| {name} | {value} |" for name, value in card.get("counts", {}).items()]
    if card.get("reviewed"):
        reviewed = card["reviewed"]
        lines += [
            "",
            f"People reviewed run {reviewed['from_run']}: {reviewed['human_verdicts']} human verdicts, "
            f"{reviewed['overruled']} of which overruled a judge and count instead of it.",
        ]
    if card.get("models"):
        lines += ["", "## Models", "", "| role | model | endpoint | structured output |", "|---|---|---|---|"]
        for role, model in card["models"].items():
            endpoint = card.get("endpoints", {}).get(role, {})
            urls = endpoint.get("members") or [endpoint.get("base_url", "")]
            where = ", ".join(urls if endpoints or not urls[0] else sorted({host_kind(url) for url in urls}))
            where = f"pool: {where}" if endpoint.get("members") else where
            lines.append(f"| {role} | {model} | {where} | {endpoint.get('structured_output', '')} |")
    lines += _fidelity(card.get("fidelity"))
    if card.get("stages"):
        lines += [
            "",
            "## Yield per stage",
            "",
            "| stage | in | out | rejected | parse error | failed |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for s in card["stages"]:
            lines.append(
                f"| {s['stage']} | {s['n_in']} | {s['n_out']} | {s['rejected']} | {s['parse_error']} | {s['failed']} |"
            )
    if card.get("params"):
        lines += ["", "## Parameters", "", "```yaml", yaml.safe_dump(card["params"], sort_keys=True).rstrip(), "```"]
    if card.get("notes"):
        lines += ["", "## Notes", "", *card["notes"]]
    return "\n".join(lines) + "\n"


def _fidelity(fidelity: dict[str, Any] | None) -> list[str]:
    """How far the release is from its paper: the recipe's differences and settings, and the templates."""
    if not fidelity:
        return []
    lines = ["", "## Fidelity", "", f"Paper: {fidelity['paper']}.", "", *fidelity_table(fidelity["differs"])]
    lines += ["", "| template | sha256 (16) |", "|---|---|"]
    lines += [f"| {name} | `{digest}` |" for name, digest in fidelity["templates"].items()]
    return lines


def fidelity_table(rows: Sequence[dict[str, str]]) -> list[str]:
    """The rows of a recipe's fidelity list as one Markdown table: the card's, the README's and `ifsynth recipes
    NAME`'s. A card stored before the list existed has rows of settings alone (``setting``, ``value``)."""
    if not rows:
        return ["Nothing differs from what the authors did."]
    lines = ["| what | the authors | ifsynth | why |", "|---|---|---|---|"]
    for row in rows:
        cells = (
            row.get("what", row.get("setting", "")),
            row["paper"],
            row.get("release", row.get("value")),
            row["why"],
        )
        lines.append("| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |")
    return lines
