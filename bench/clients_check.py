"""Run in the client venv (mteb, datasets, beir, sentence-transformers) by bench/clients.py: loads each export
folder given on stdin (JSON list of {recipe, format, path}) and prints one JSON line per check."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from datasets import load_dataset


def emit(check: str, item: dict[str, str], **figures: Any) -> None:
    print(json.dumps({"check": check, "recipe": item["recipe"], "format": item["format"], **figures}), flush=True)


def card_configs(folder: Path) -> list[dict[str, Any]]:
    front = (folder / "README.md").read_text().split("---")[1]
    return yaml.safe_load(front).get("configs") or []


def check_configs(item: dict[str, str]) -> None:
    folder = Path(item["path"])
    for config in card_configs(folder):
        loaded = load_dataset(str(folder), config["config_name"])
        rows = {split: len(data) for split, data in loaded.items()}
        emit("load_dataset", item, config=config["config_name"], rows=rows)
    default = load_dataset(str(folder))
    emit("load_dataset(folder)", item, splits=sorted(default))
    covered = {f["path"] for c in card_configs(folder) for f in c["data_files"]}
    for path in sorted(folder.rglob("*.tsv")):  # the card names them apart: datasets reads a folder in one format
        name = path.relative_to(folder).as_posix()
        if name not in covered:
            emit(
                "load_dataset(csv)",
                item,
                file=name,
                rows=len(load_dataset("csv", data_files=str(path), sep="\t", split="train")),
            )


def check_mteb(item: dict[str, str]) -> None:
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalDatasetLoader

    folder = Path(item["path"])
    names = [c["config_name"] for c in card_configs(folder)]
    modes = sorted({name.split("-")[0] for name in names if name.endswith("-qrels")}) or [None]
    for mode in modes:
        data = RetrievalDatasetLoader(hf_repo=str(folder), revision=None, config=mode).load()
        queries = data["queries"]
        emit("mteb", item, mode=mode, corpus=len(data["corpus"]), queries=len(queries),
             qrels=len(data["relevant_docs"]), instructions="instruction" in queries.column_names)  # fmt: skip


def check_beir(item: dict[str, str]) -> None:
    from beir.datasets.data_loader import GenericDataLoader

    folder = Path(item["path"])
    folders = [folder] if (folder / "corpus.jsonl").exists() else sorted(p for p in folder.iterdir() if p.is_dir())
    for one in folders:
        corpus, queries, qrels = GenericDataLoader(data_folder=str(one)).load(split="test")
        emit("beir", item, folder=one.name, corpus=len(corpus), queries=len(queries), qrels=len(qrels))


def check_training(item: dict[str, str]) -> None:
    """A few steps of MultipleNegativesRankingLoss on the triplets, with a small model made here (no download)."""
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers import SentenceTransformerTrainingArguments as Arguments
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    from sentence_transformers.models import StaticEmbedding
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    triplets = load_dataset(str(item["path"]), split="train")
    texts = [str(value) for row in triplets for value in row.values()]
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]"]))
    embedding = StaticEmbedding(tokenizer, embedding_dim=32)
    model = SentenceTransformer(modules=[embedding])
    before = model.encode(texts[:4])
    with tempfile.TemporaryDirectory() as out:
        args = Arguments(output_dir=out, max_steps=5, per_device_train_batch_size=4,
                         report_to="none", save_strategy="no", logging_steps=1)  # fmt: skip
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=triplets,
                                             loss=MultipleNegativesRankingLoss(model))  # fmt: skip
        result = trainer.train()
    moved = float(abs(model.encode(texts[:4]) - before).max())
    emit("train", item, rows=len(triplets), columns=triplets.column_names, steps=result.global_step,
         loss=round(result.training_loss, 4), embedding_change=round(moved, 4))  # fmt: skip


def main() -> None:
    failures = 0
    for item in json.load(sys.stdin):
        checks = [check_configs]
        checks += {"mteb": [check_mteb], "beir": [check_beir], "triplets": [check_training]}.get(item["format"], [])
        for check in checks:
            try:
                check(item)
            except Exception as exc:  # every failure is reported; the other checks go on
                failures += 1
                emit(check.__name__, item, failed=f"{type(exc).__name__}: {exc}"[:400])
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
