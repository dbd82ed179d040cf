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

    def check(self) -> None: ...

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


def _jsonl(path: Path, spec: str, *, numbered: bool = False) -> Iterator[Any]:
    """The rows of a JSONL file (with their line numbers when ``numbered``)."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                row["_id"]
            except (ValueError, KeyError, TypeError):
                raise SeedError(f"seeds `{spec}`: {path.name} line {number} is not a JSON object with an _id") from None
            yield (number, row) if numbered else row


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class BeirFolder:
    """corpus.jsonl, queries.jsonl and qrels/test.tsv (with a header row), as BEIR lays them out."""

    def __init__(self, root: Path, *, spec: str, split: str = "test") -> None:
        self.spec, self.root = spec, root
        self.corpus, self.queries = root / "corpus.jsonl", root / "queries.jsonl"
        self.qrels = root / "qrels" / f"{split}.tsv"
        for path in (self.corpus, self.queries, self.qrels):
            if not path.is_file():
                raise SeedError(f"seeds `{spec}`: missing {path.relative_to(root)} in {root}")

    def check(self) -> None:
        """One pass over the folder before any request, so that a fault costs no LLM call: ids present, unique
        and without whitespace (they become TSV and TREC fields), texts that are strings, a corpus that is not
        empty, a qrels file with its header and with no line pointing at an unknown query or passage."""
        docs = self._ids(self.corpus, "passage")
        if not docs:
            raise SeedError(f"seeds `{self.spec}`: corpus.jsonl holds no passage")
        queries = self._ids(self.queries, "query")
        with self.qrels.open(encoding="utf-8") as lines:
            header = next(lines, "").rstrip("\n").split("\t")
            if len(header) >= 3 and _is_number(header[2]):
                raise SeedError(
                    f"seeds `{self.spec}`: qrels/{self.qrels.name} line 1 is a judgement, not the header "
                    "`query-id<TAB>corpus-id<TAB>score` that BEIR files start with"
                )
            for number, line in enumerate(lines, 2):
                fields = line.rstrip("\n").split("\t")
                if len(fields) < 3:
                    continue  # blank, or reported by _positives
                unknown = "query" if fields[0] not in queries else "passage" if fields[1] not in docs else None
                if unknown:
                    which = fields[0] if unknown == "query" else fields[1]
                    raise SeedError(
                        f"seeds `{self.spec}`: qrels/{self.qrels.name} line {number} names {unknown} `{which}`, "
                        f"which {'queries' if unknown == 'query' else 'corpus'}.jsonl does not hold"
                    )

    def _ids(self, path: Path, what: str) -> set[str]:
        seen: set[str] = set()
        for line, row in _jsonl(path, self.spec, numbered=True):
            where = f"seeds `{self.spec}`: {path.name} line {line}"
            raw = row["_id"]
            if raw is None or (isinstance(raw, str) and not raw):
                raise SeedError(f"{where}: the {what} has no _id")
            doc_id = str(raw)
            if any(c.isspace() for c in doc_id):
                raise SeedError(f"{where}: _id `{doc_id}` holds whitespace (ids become TSV and TREC fields)")
            if doc_id in seen:
                raise SeedError(f"{where}: _id `{doc_id}` appears twice")
            for field in ("text", "title"):
                if field in row and row[field] is not None and not isinstance(row[field], str):
                    raise SeedError(f"{where}: `{field}` is not a string")
            if not isinstance(row.get("text"), str):
                raise SeedError(f"{where}: the {what} `{doc_id}` has no text")
            seen.add(doc_id)
        return seen

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

    def check(self) -> None:
        """ir_datasets validates its own files; loading the dataset (in ``__init__``) is the check."""

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
