"""Run in the client venv (mteb, datasets, beir, sentence-transformers) by bench/clients.py: loads each export
folder given on stdin and prints one JSON line per check.

stdin is ``{"folders": [{recipe, format, path}], "scores": [{recipe, path, run, ifsynth}], "checkouts": {...}}``:
``scores`` pairs an export folder with a TREC run file and the figures ``ifsynth evaluate`` gave on it, which
the harnesses' own metric code must give again (to 1e-6). ``checkouts`` names the folders of the authors'
code (the mteb forks of FollowIR and InfoSearch, which are not installable beside mteb 2, both being the
package ``mteb``; IFIR's and InF-Embed's repositories): each is imported in a child process of its own with the
checkout first on ``sys.path``. ``--rows FOLDER`` instead loads one folder's card configs in this process and
prints whether they give the rows its files hold."""

from __future__ import annotations

import contextlib
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
        with contextlib.redirect_stdout(sys.stderr):  # the Trainer prints its log; stdout is one JSON line a check
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


def as_given(name: str, value: float) -> float:
    """ifsynth's figure as the harness gives it: BEIR's ``EvaluateRetrieval.evaluate`` rounds to 5 decimals."""
    return round(value, 5) if name.startswith("beir ") else value


def compare(check: str, item: dict[str, str], theirs: dict[str, float], ours: dict[str, float | None]) -> bool:
    """Emit both sides of each figure; True when every one agrees to TOLERANCE."""
    agree = all(
        ours.get(name) is not None and abs(theirs[name] - as_given(name, float(ours[name] or 0))) <= TOLERANCE
        for name in theirs
    )
    agree = agree and set(theirs) == set(ours)
    run = Path(item["run"]).name if "run" in item else None
    emit(check, item, run=run, harness=theirs, ifsynth={n: ours.get(n) for n in theirs}, agree=agree)
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
    """An authors' code (a fork of mteb, or IFIR's or InF-Embed's repository) reads and scores every item in one
    child process that imports it from its checkout (see ``fork_main``); the failures."""
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


class Document:
    """langchain's ``Document``, which IFIR's ``dataset.py`` wraps each passage in (langchain is not installed)."""

    def __init__(self, page_content: str, metadata: dict[str, Any]) -> None:
        self.page_content, self.metadata = page_content, metadata


class Replay:
    """A TREC run in the place of the retrievers of IFIR's code: its Elasticsearch stores (``src/eval.py``
    searches by query text: ``texts`` names the run's query of each) and BEIR's search (by query id: ``ids``)."""

    def __init__(self, run: dict[str, dict[str, float]], texts: dict[str, str], ids: dict[str, str]) -> None:
        self.run, self.texts, self.ids = run, texts, ids

    def similarity_search(self, query: str, topk: int) -> list[str]:
        return list(self.run.get(self.texts.get(query, ""), {}))[:topk]  # the bare query: no run query (none)

    def search(self, corpus: Any, queries: dict[str, str], top_k: int, *args: Any, **kwargs: Any) -> dict:
        return {qid: dict(list(self.run.get(self.ids[qid], {}).items())[:top_k]) for qid in queries}


def fork_ifir(item: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
    """IFIR's code on the export: ``src/utils/dataset.py`` reads each subset's ``test_data.json`` and corpus,
    ``src/eval.py``'s ``evaluation`` computes nDCG and MRR per level with its Evaluator (its Elasticsearch
    searches replay the run), and ``beir/eval_lexical.py``'s ``load_data``, ``split_queries`` and ``eval`` give
    BEIR's nDCG@20 per level (only its ``load_model``, an Elasticsearch index, is not called). Both read
    ``datasets/<subset>/`` under the working directory, as the scripts are run."""
    import os
    import types

    folder, run = Path(item["path"]), read_run(item["run"])
    work = Path(tempfile.mkdtemp())
    (work / "datasets").symlink_to(folder)
    os.chdir(work)
    documents = types.ModuleType("langchain_core.documents")
    documents.Document = Document  # type: ignore[attr-defined]
    sys.modules.setdefault("langchain_core", types.ModuleType("langchain_core"))
    sys.modules["langchain_core.documents"] = documents
    constant = types.ModuleType("utils.constant")  # the Elasticsearch stores, which eval.py imports from here
    constant.get_es = lambda model, dataset, domain, device: REPLAYS[dataset]  # type: ignore[attr-defined]
    constant.dense_search = lambda dense_db, query, topk: dense_db.similarity_search(query, topk)  # type: ignore[attr-defined]
    constant.get_hybrid_es = constant.hybrid_search = None  # type: ignore[attr-defined]
    sys.modules["utils.constant"] = constant
    # the Elasticsearch client, which eval_lexical.py and BEIR's BM25Search import and only load_model uses
    search, helpers = types.ModuleType("elasticsearch"), types.ModuleType("elasticsearch.helpers")
    search.__path__ = []
    search.Elasticsearch = helpers.streaming_bulk = None  # type: ignore[attr-defined]
    sys.modules |= {"elasticsearch": search, "elasticsearch.helpers": helpers}
    from utils.dataset import load_corpus, load_query  # type: ignore[import-not-found]

    evaluation = _module("ifir_eval", CHECKOUTS["ifir"] / "src" / "eval.py").evaluation
    lexical = _module("ifir_eval_lexical", CHECKOUTS["ifir"] / "beir" / "eval_lexical.py")
    from beir.datasets.data_loader import GenericDataLoader

    loaded: dict[str, Any] = {}
    metrics: dict[str, float] = {}
    for subset in sorted(p.name for p in folder.iterdir() if p.is_dir()):
        rows = load_query(subset)
        prefix = f"{subset}-"  # a release's ids: the subset's files name queries and passages by their seed ids
        own = {qid: {doc.removeprefix(prefix): score for doc, score in docs.items()}
               for qid, docs in run.items() if qid.startswith(prefix)}  # fmt: skip
        texts = {f"{row['text']} {i['instruction']}": f"{subset}-{row['_id']}-level{i['level']}"
                 for row in rows for i in row["instructions"]}  # fmt: skip
        REPLAYS[subset] = Replay(own, texts, {})
        evaluator = evaluation(model="replay", dataset=subset)
        levels = sorted({i["level"] for row in rows for i in row["instructions"]})
        for level in levels:  # only the levels present: eval.py's get_level divides by zero on an empty one
            got = evaluator.get_level(level)
            metrics[f"eval.py {subset} level{level} ndcg@20"] = float(got["nDCG"])
            metrics[f"eval.py {subset} level{level} mrr@20"] = float(got["MRR"])
        try:
            lexical.load_data(subset)
            beir_load = "ok"
        except ValueError as exc:  # it names no corpus file, so BEIR's default corpus.jsonl is looked for
            beir_load = str(exc)
        corpus, queries, qrels = GenericDataLoader(
            data_folder=f"datasets/{subset}", corpus_file=f"{subset}-corpus.jsonl",
            query_file=f"{subset}-query.jsonl", qrels_file=f"datasets/{subset}/{subset}-qrel.tsv",
        ).load_custom()  # fmt: skip
        by_level, _ = lexical.split_queries(queries)
        ids = {qid: f"{subset}-{qid[: qid.rfind('_')]}-level{qid[qid.rfind('_') + 1 :]}" for qid in queries}
        for level, asked in sorted(by_level.items()):
            if level != "0":  # level 0, the bare query, is no mode of an ifsynth release
                _, figures = lexical.eval(Replay(own, {}, ids), asked, corpus, qrels)
                metrics[f"beir {subset} level{level} ndcg@20"] = float(figures["ndcg"]["NDCG@20"])
        passages = sum(len(batch) for batch in load_corpus(subset))
        loaded[subset] = {"queries": len(rows), "passages": passages, "levels": levels,
                          "beir queries": len(queries), "beir load_data": beir_load}  # fmt: skip
    return loaded, metrics


INF_EMBED_BRANCHES = {  # InF-Embed's training file -> the split its loader takes and the column it reads as P+
    "aarontrinh02/ms_marco_synthetic_data": ("train", "document"),
    "aarontrinh02/instruction_following_synthetic": ("metamath", "document_positive"),
}


def fork_inf_embed(item: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
    """InF-Embed's ``MSMarcoDataLoader`` on the export's Hub folder, on both its branches: its ``load_dataset``
    of a Hub name is pointed at the folder, with the split that branch takes, and its transform's texts (what
    it tokenizes) are compared with the (instruction+query, passage) pairs the tuples in ``infir.jsonl`` make."""
    import os
    from collections import Counter
    from types import SimpleNamespace

    import datasets

    os.chdir(tempfile.mkdtemp())  # its logger_config writes ./data/log.txt on import
    from dataloaders import basic_dataloader  # type: ignore[import-not-found]

    rows = [json.loads(line) for line in Path(item["tuples"]).read_text().splitlines()]
    loaded: dict[str, Any] = {"tuples": len(rows)}
    metrics: dict[str, float] = {}
    for train_file, (split, column) in INF_EMBED_BRANCHES.items():
        files = {split: "infir/train-*.parquet"}
        basic_dataloader.load_dataset = lambda name, files=files: datasets.load_dataset(item["path"], data_files=files)
        for reverse in (False, True):
            tokenizer = Recorder()
            args = SimpleNamespace(train_file=train_file, data_reverse=reverse, do_train=True, do_eval=False,
                                   max_train_samples=None, q_max_len=512, p_max_len=512)  # fmt: skip
            loader = basic_dataloader.MSMarcoDataLoader(args, tokenizer)
            loader.trainer = SimpleNamespace(state=SimpleNamespace(epoch=0))
            batch = loader.train_dataset[: len(loader.train_dataset)]
            produced = Counter(zip(*tokenizer.texts, strict=True))
            expected = Counter(pair for row in rows for pair in _inf_embed_pairs(row, reverse))
            name = inf_embed_branch(train_file, reverse)
            loaded[name.split(":")[0]] = {
                "rows": len(loader.train_dataset),
                "pairs": len(batch["iq_input_ids"]),
                "reads": column,
            }
            metrics[name] = float(sum(((produced - expected) + (expected - produced)).values()))
    return loaded, metrics


def inf_embed_branch(train_file: str, reverse: bool) -> str:
    """A branch's figure: how many pairs its loader made that the tuples do not (or missed), 0 when it agrees."""
    return f"{train_file.split('/')[1]}{' data_reverse' if reverse else ''}: pairs unlike the tuples'"


class Recorder:
    """A tokenizer that keeps the texts it is given (InF-Embed's transform tokenizes the queries, then the passages)."""

    def __init__(self) -> None:
        self.texts: list[list[str]] = []

    def __call__(self, texts: list[str], **_: Any) -> dict[str, list[list[int]]]:
        self.texts.append(list(texts))
        return {"input_ids": [[0] for _ in texts]}


def _inf_embed_pairs(row: dict[str, str], reverse: bool) -> list[tuple[str, str]]:
    """The three (instruction+query, passage) pairs a tuple stands for (RECIPES.md's InF-IR), worded as
    InF-Embed words them: ``query instruction``, or ``Instruct: ...\nQuery: ...`` reversed."""

    def text(query: str, instruction: str) -> str:
        return f"Instruct: {instruction}\nQuery: {query}" if reverse else f"{query} {instruction}".strip()

    return [
        (text(row["query_positive"], row["instruction_positive"]), row["document_positive"]),
        (text(row["query_positive"], row["instruction_negative"]), row["hard_negative_document_1"]),
        (text(row["query_negative"], row["instruction_positive"]), row["hard_negative_document_2"]),
    ]


def _module(name: str, path: Path) -> Any:
    """A script of a checkout imported as a module (its folder is no package, or its name is taken)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REPLAYS: dict[str, Replay] = {}  # IFIR subset -> the run its stand-in store replays
CHECKOUTS: dict[str, Path] = {}
FORK_PATHS = {"followir": "", "infosearch": "mteb_infosearch", "ifir": "src", "inf-embed": ""}  # what goes on sys.path


def fork_main(kind: str, checkout: str) -> None:
    """The child process: the checkout's package goes before the installed ones (a fork before mteb)."""
    CHECKOUTS[kind] = Path(checkout)
    sys.path.insert(0, str(Path(checkout) / FORK_PATHS[kind]))
    score = {"followir": fork_followir, "infosearch": fork_infosearch, "ifir": fork_ifir, "inf-embed": fork_inf_embed}[
        kind
    ]
    for index, item in enumerate(json.load(sys.stdin)):
        try:
            with contextlib.redirect_stdout(sys.stderr):  # the authors' scripts print; stdout carries the answers
                loaded, metrics = score(item)
            answer = {"index": index, "loaded": loaded, "metrics": metrics}
        except Exception as exc:  # reported per item; the others go on
            answer = {"index": index, "failed": f"{type(exc).__name__}: {exc}"[:400]}
        sys.stdout.write(json.dumps(answer) + "\n")


def inf_embed_items(folders: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The InF-IR Hub folder, with the tuples file (``--format infir``) its loader's pairs are compared with;
    the figures to give: no pair unlike the tuples' on any branch."""
    paths = {item["format"]: item["path"] for item in folders if item["recipe"] == "infir"}
    if "hf" not in paths or "infir" not in paths:
        return []
    expected = {inf_embed_branch(name, reverse): 0.0 for name in INF_EMBED_BRANCHES for reverse in (False, True)}
    tuples = str(Path(paths["infir"]) / "infir.jsonl")
    return [{"recipe": "infir", "format": "hf", "path": paths["hf"], "tuples": tuples, "ifsynth": expected}]


def rows_main(folder: Path) -> None:
    """Each card config of the folder loaded with ``load_dataset``'s defaults against the rows its files hold
    (read as JSON lines, no cache): one JSON line, ``agree`` when every config gives its files' rows."""
    counts, agree = {}, True
    for config in card_configs(folder):
        loaded = load_dataset(str(folder), config["config_name"])
        for part in config["data_files"]:
            lines = (folder / part["path"]).read_text().splitlines()
            held = sorted(json.dumps(_present(json.loads(line)), sort_keys=True) for line in lines)
            got = sorted(json.dumps(_present(row), sort_keys=True) for row in loaded[part["split"]])
            counts[config["config_name"]] = len(got)
            agree = agree and got == held
    print(json.dumps({"rows": counts, "agree": agree}))


def _present(value: Any) -> Any:
    """A row without its null fields: ``datasets`` fills a field some rows lack with None."""
    if isinstance(value, dict):
        return {k: _present(v) for k, v in value.items() if v is not None}
    return [_present(v) for v in value] if isinstance(value, list) else value


def main() -> None:
    if sys.argv[1:2] == ["--fork"]:
        return fork_main(sys.argv[2], sys.argv[3])
    if sys.argv[1:2] == ["--rows"]:
        return rows_main(Path(sys.argv[2]))
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
    checkouts = given.get("checkouts", {})
    for kind in ("followir", "infosearch", "ifir"):
        items = [item for item in scored if item["recipe"] == kind]
        failures += check_forks(items, kind, checkouts.get(kind)) if items else 0
    items = inf_embed_items(given["folders"])
    failures += check_forks(items, "inf-embed", checkouts.get("inf-embed")) if items else 0
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
