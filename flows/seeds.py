"""Seed sources: the built-in demo set, a local BEIR folder, or any ir_datasets id.

A source yields (query, positives) pairs and, for noise, the passages of its corpus. Both iterate lazily
and can be iterated again, so selection can take two passes without holding a whole collection.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from ifsynth.schemas.errors import SeedError
from ifsynth.schemas.seeds import SeedPair, SeedPassage, SeedQuery


class SeedSource(Protocol):
    spec: str

    def pairs(self) -> Iterator[SeedPair]: ...

    def passages(self) -> Iterator[SeedPassage]: ...


def open_source(spec: str) -> SeedSource:
    """``demo``, ``beir:DIR`` or ``irds:ID``."""
    kind, _, rest = spec.partition(":")
    if spec == "demo":
        return BeirFolder(Path(str(resources.files("ifsynth.flows").joinpath("demo_seeds"))), spec="demo")
    if kind == "beir" and rest:
        return BeirFolder(Path(rest).expanduser(), spec=spec)
    if kind == "irds" and rest:
        return IrDatasets(rest, spec=spec)
    raise SeedError(f"unknown seed source `{spec}`; use demo, beir:DIR or irds:ID")


def _jsonl(path: Path, spec: str) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                row["_id"]
            except (ValueError, KeyError, TypeError):
                raise SeedError(f"seeds `{spec}`: {path.name} line {number} is not a JSON object with an _id") from None
            yield row


class BeirFolder:
    """corpus.jsonl, queries.jsonl and qrels/test.tsv (with a header row), as BEIR lays them out."""

    def __init__(self, root: Path, *, spec: str, split: str = "test") -> None:
        self.spec, self.root = spec, root
        self.corpus, self.queries = root / "corpus.jsonl", root / "queries.jsonl"
        self.qrels = root / "qrels" / f"{split}.tsv"
        for path in (self.corpus, self.queries, self.qrels):
            if not path.is_file():
                raise SeedError(f"seeds `{spec}`: missing {path.relative_to(root)} in {root}")

    def _positives(self) -> dict[str, list[str]]:
        positives: dict[str, list[str]] = defaultdict(list)
        with self.qrels.open(encoding="utf-8") as lines:
            next(lines, None)  # header
            for number, line in enumerate(lines, 2):
                fields = line.rstrip("\n").split("\t")
                if len(fields) < 3:
                    if line.strip():
                        raise SeedError(f"seeds `{self.spec}`: qrels line {number} needs query-id, corpus-id, score")
                    continue
                try:
                    score = float(fields[2])
                except ValueError:
                    raise SeedError(f"seeds `{self.spec}`: qrels line {number} has a non-numeric score") from None
                if score > 0:
                    positives[fields[0]].append(fields[1])
        return positives

    def pairs(self) -> Iterator[SeedPair]:
        positives = self._positives()
        wanted = {doc for docs in positives.values() for doc in docs}
        docs = {p.doc_id: p for p in self.passages() if p.doc_id in wanted}
        for row in _jsonl(self.queries, self.spec):
            qid = str(row["_id"])
            found = tuple(docs[d] for d in positives.get(qid, ()) if d in docs)
            if found:
                yield SeedPair(query=SeedQuery(query_id=qid, text=str(row.get("text", ""))), positives=found)

    def passages(self) -> Iterator[SeedPassage]:
        for row in _jsonl(self.corpus, self.spec):
            yield SeedPassage(doc_id=str(row["_id"]), title=str(row.get("title") or ""), text=str(row.get("text", "")))


class IrDatasets:
    """Any ir_datasets id; data that is not available locally becomes one SeedError line."""

    def __init__(self, dataset_id: str, *, spec: str) -> None:
        self.spec, self.dataset_id = spec, dataset_id
        with self._guard():
            import ir_datasets

            self.dataset = ir_datasets.load(dataset_id)
            if not (self.dataset.has_queries() and self.dataset.has_qrels() and self.dataset.has_docs()):
                raise SeedError(f"seeds `{spec}`: the dataset needs queries, qrels and docs")

    @contextmanager
    def _guard(self) -> Iterator[None]:
        logging.disable(logging.CRITICAL)  # its download retries log at INFO and WARNING on several loggers
        try:
            yield
        except SeedError:
            raise
        except KeyError:
            raise SeedError(f"seeds `{self.spec}`: ir_datasets has no dataset `{self.dataset_id}`") from None
        except Exception as exc:  # ir_datasets raises many kinds when data cannot be fetched
            reason = " ".join(str(exc).split())[:120] or type(exc).__name__
            raise SeedError(
                f"seeds `{self.spec}`: the data is not available on this machine ({type(exc).__name__}: {reason}); "
                "download it with ir_datasets where the network allows, or use --seeds beir:DIR"
            ) from None
        finally:
            logging.disable(logging.NOTSET)

    @staticmethod
    def _passage(doc: Any) -> SeedPassage:
        return SeedPassage(doc_id=doc.doc_id, title=getattr(doc, "title", "") or "", text=doc.default_text())

    def pairs(self) -> Iterator[SeedPair]:
        with self._guard():
            positives: dict[str, list[str]] = defaultdict(list)
            for qrel in self.dataset.qrels_iter():
                if qrel.relevance > 0:
                    positives[qrel.query_id].append(qrel.doc_id)
            store = self.dataset.docs_store()
            for query in self.dataset.queries_iter():
                ids = positives.get(query.query_id)
                if not ids:
                    continue
                docs = store.get_many(ids)
                found = tuple(self._passage(docs[d]) for d in ids if d in docs)
                if found:
                    yield SeedPair(query=SeedQuery(query_id=query.query_id, text=query.default_text()), positives=found)

    def passages(self) -> Iterator[SeedPassage]:
        with self._guard():
            for doc in self.dataset.docs_iter():
                yield self._passage(doc)
