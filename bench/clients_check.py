"""Run in the client venv (mteb, datasets, beir, sentence-transformers) by bench/clients.py: loads each export
folder given on stdin and prints one JSON line per check.

stdin is ``{"folders": [{recipe, format, path}], "scores": [{recipe, path, run, ifsynth}], "checkouts": {...}}``:
``scores`` pairs an export folder with a TREC run file and the figures ``ifsynth evaluate`` gave on it, which
the harnesses' own metric code must give again (to 1e-6). ``checkouts`` names the folders of the authors'
mteb forks, which are not installable beside mteb 2 (both are the package ``mteb``): each is imported in a
child process of its own with the checkout first on ``sys.path``."""

from __future__ import annotations

import json
import subprocess
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


TOLERANCE = 1e-6
# InfoSearch's task per ifsynth dimension (the paper's "keyword" dimension is its Clarity-v1)
INFOSEARCH_TASKS = {"audience": "Audience-v1", "keyword": "Clarity-v1", "format": "Format-v1",
                    "language": "Language-v1", "length": "Length-v1", "source": "Source-v1"}  # fmt: skip


def read_run(path: str) -> dict[str, dict[str, float]]:
    """A TREC run as the harnesses take one, in the file's order (a tie keeps it, as the file's ranks do)."""
    run: dict[str, dict[str, float]] = {}
    for line in Path(path).read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        run.setdefault(qid, {})[doc] = float(score)
    return run


def compare(check: str, item: dict[str, str], theirs: dict[str, float], ours: dict[str, float | None]) -> bool:
    """Emit both sides of each figure; True when every one agrees to TOLERANCE."""
    agree = all(ours[name] is not None and abs(theirs[name] - float(ours[name] or 0)) <= TOLERANCE for name in theirs)
    emit(check, item, run=Path(item["run"]).name, harness=theirs, ifsynth={n: ours[n] for n in theirs}, agree=agree)
    return agree


def check_mteb_followir(item: dict[str, Any]) -> bool:
    """mteb 2's own FollowIR task (Core17InstructionRetrieval) pointed at the export's ``mteb/`` folder: it loads
    the corpus, queries, instructions, qrels and pools, and its ``task_specific_scores`` computes p-MRR from the
    folder's ``qrel_diff`` and the run."""
    import mteb

    task = mteb.get_task("Core17InstructionRetrieval")
    task.metadata.dataset["path"] = str(Path(item["path"]) / "mteb")
    task.metadata.dataset["revision"] = None
    task.load_data()
    data = task.dataset["default"]["test"]
    run = read_run(item["run"])
    figures = task.task_specific_scores({}, data["relevant_docs"], run, "test", "default")
    emit("mteb Core17InstructionRetrieval", item, corpus=len(data["corpus"]), queries=len(data["queries"]),
         top_ranked=len(data["top_ranked"]))  # fmt: skip
    return compare("mteb p-MRR", item, {"p-mrr": float(figures["p-MRR"])}, item["ifsynth"])


def check_forks(items: list[dict[str, Any]], kind: str, checkout: str | None) -> int:
    """An authors' fork of mteb scores every item in one child process that imports the fork from its checkout
    (see ``fork_main``); the failures."""
    if checkout is None:
        for item in items:
            emit(f"{kind} loader", item, skipped="no checkout given (see bench/clients.py --help)")
        return 0
    done = subprocess.run([sys.executable, __file__, "--fork", kind, checkout], input=json.dumps(items),
                          capture_output=True, text=True)  # fmt: skip
    answers = {line["index"]: line for line in map(json.loads, done.stdout.splitlines()) if "index" in line}
    failures = 0
    for index, item in enumerate(items):
        answer = answers.get(index, {"failed": done.stderr.strip()[-400:]})
        if "failed" in answer:
            emit(f"{kind} loader", item, failed=answer["failed"])
            failures += 1
            continue
        emit(f"{kind} loader", item, **answer["loaded"])
        failures += not compare(f"{kind} metrics", item, answer["metrics"], item["ifsynth"])
    return failures


def fork_followir(item: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
    """FollowIR's mteb fork: its task (CoreInstructionRetrieval) reads the folder as it reads
    ``jhu-clsp/core17-instructions``, and its evaluator computes p-MRR over ``create_qrel_diff``."""
    from mteb import MTEB
    from mteb.evaluation.evaluators.InstructionRetrievalEvaluator import InstructionRetrievalEvaluator

    task = MTEB(tasks=["CoreInstructionRetrieval"]).tasks[0]
    description = {**task.description, "hf_hub_name": item["path"]}
    type(task).description = property(lambda _: description)  # the task names its Hub dataset in a property
    task.load_data()
    og, changed = task.og_relevant_docs["test"], task.changed_relevant_docs["test"]
    loaded = {"corpus": len(task.corpus["test"]), "queries": len(task.queries["test"]),
              "top_ranked": len(task.top_ranked["test"])}  # fmt: skip
    run = read_run(item["run"])
    runs = {mode: {q: run.get(f"{q}-{mode}", {}) for q in task.queries["test"]} for mode in ("og", "changed")}
    scores = InstructionRetrievalEvaluator.evaluate_change(
        runs["og"], runs["changed"], task.create_qrel_diff(og, changed)
    )
    return loaded, {"p-mrr": float(scores["rankwise_score"])}


def fork_infosearch(item: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
    """InfoSearch's mteb fork: the dimension's task (e.g. Audience-v1) pointed at the dimension's folder loads it
    in its three modes, and its ``evaluate_change`` computes p-MRR, WISE and SICR from the three runs."""
    from mteb import MTEB
    from mteb.evaluation.evaluators import utils

    folder = Path(item["path"])
    (task,) = MTEB(tasks=[INFOSEARCH_TASKS[folder.name]]).tasks
    task.metadata.dataset["path"] = str(folder)
    task.load_data()
    ori = task.ori_relevant_docs["test"]
    loaded = {"task": task.metadata.name, "corpus": len(task.corpus["test"]), "queries": len(task.queries["test"]),
              "qrels": len(ori)}  # fmt: skip
    run = read_run(item["run"])
    runs = {
        mode: {q: run.get(f"{q}-{mode}", {}) for q in task.queries["test"]} for mode in ("og", "changed", "reversed")
    }
    positive, negative = task.create_qrel_match(ori, task.ins_relevant_docs["test"])
    scores = utils.evaluate_change(runs["og"], runs["changed"], runs["reversed"], positive, negative)
    names = (("p-mrr", "p-MRR"), ("wise", "WISE"), ("sicr", "SICR"))
    return loaded, {name: float(scores[key]) for name, key in names}


def fork_main(kind: str, checkout: str) -> None:
    """The child process: the fork's package goes before the installed mteb."""
    sys.path.insert(0, str(Path(checkout) / ("mteb_infosearch" if kind == "infosearch" else "")))
    score = {"followir": fork_followir, "infosearch": fork_infosearch}[kind]
    for index, item in enumerate(json.load(sys.stdin)):
        try:
            loaded, metrics = score(item)
            answer = {"index": index, "loaded": loaded, "metrics": metrics}
        except Exception as exc:  # reported per item; the others go on
            answer = {"index": index, "failed": f"{type(exc).__name__}: {exc}"[:400]}
        sys.stdout.write(json.dumps(answer) + "\n")


def main() -> None:
    if sys.argv[1:2] == ["--fork"]:
        return fork_main(sys.argv[2], sys.argv[3])
    given = json.load(sys.stdin)
    failures = 0
    for item in given["folders"]:
        checks = [check_configs]
        checks += {"mteb": [check_mteb], "beir": [check_beir], "triplets": [check_training]}.get(item["format"], [])
        for check in checks:
            try:
                check(item)
            except Exception as exc:  # every failure is reported; the other checks go on
                failures += 1
                emit(check.__name__, item, failed=f"{type(exc).__name__}: {exc}"[:400])
    scored = [{**item, "format": item["recipe"]} for item in given.get("scores", [])]
    for item in scored:
        if item["recipe"] == "followir":
            try:
                failures += not check_mteb_followir(item)
            except Exception as exc:
                failures += 1
                emit("mteb Core17InstructionRetrieval", item, failed=f"{type(exc).__name__}: {exc}"[:400])
    for kind in ("followir", "infosearch"):
        items = [item for item in scored if item["recipe"] == kind]
        failures += check_forks(items, kind, given.get("checkouts", {}).get(kind)) if items else 0
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
