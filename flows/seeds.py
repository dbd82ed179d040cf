"""Seed sources: the built-in demo set, a local BEIR folder, or any ir_datasets id.

A source yields (query, positives) pairs and, for noise, the passages of its corpus or its positives alone. All
iterate lazily and can be iterated again, so selection can take two passes without holding a whole collection.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable, Collection, Container, Iterator, Mapping
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from ifsynth.schemas.errors import SeedError
from ifsynth.schemas.seeds import (
    Judgement,
    NotText,
    QrelsFault,
    SeedPair,
    SeedPassage,
    SeedQuery,
    id_fault,
    judgement,
    placed_lines,
    qrels_header,
)


class SeedSource(Protocol):
    spec: str

    def check(self) -> None: ...

    def pairs(self) -> Iterator[SeedPair]: ...

    def passages(self) -> Iterator[SeedPassage]: ...

    def positives(self) -> Iterator[SeedPassage]:
        """Every passage a query of ``pairs`` holds relevant, once."""
        ...


def open_source(spec: str, demo: tuple[str, ...] = (), package: str = "ifsynth.flows") -> SeedSource:
    """``demo``, ``beir:DIR`` or ``irds:ID``; ``demo`` is the folder ``demo_seeds/<demo...>`` of ``package`` (a
    recipe's or a dimension's own; ifsynth's InstructIR-style seeds without one)."""
    kind, _, rest = spec.partition(":")
    if spec == "demo":
        label = f"demo ({demo[-1]})" if demo else "demo"
        return BeirFolder(Path(str(resources.files(package).joinpath("demo_seeds", *demo))), spec=label)
    if kind == "beir" and rest:
        return BeirFolder(Path(rest).expanduser(), spec=spec)
    if kind == "irds" and rest:
        return IrDatasets(rest, spec=spec)
    raise SeedError(f"unknown seed source `{spec}`; use demo, beir:DIR or irds:ID")


def _lines(path: Path, spec: str, first: int = 1) -> Iterator[tuple[int, int, str]]:
    """The numbered lines of a seed file, from line ``first`` on, with the byte offsets they start at; bytes
    that are not UTF-8 are one SeedError."""
    try:
        for number, start, line in placed_lines(path):
            if number >= first:
                yield number, start, line
    except NotText as fault:
        raise SeedError(f"seeds `{spec}`: {path.name} {fault}") from None


def _rows(path: Path, spec: str) -> Iterator[tuple[int, int, Any]]:
    """The rows of a JSONL file, each with its line number and the byte offset its line starts at."""
    for number, start, line in _lines(path, spec):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            row["_id"]
        except (ValueError, KeyError, TypeError):
            raise SeedError(f"seeds `{spec}`: {path.name} line {number} is not a JSON object with an _id") from None
        yield number, start, row


def _jsonl(path: Path, spec: str) -> Iterator[Any]:
    """The rows of a JSONL file."""
    return (row for _, _, row in _rows(path, spec))


def positives_of(pairs: Iterator[SeedPair]) -> Iterator[SeedPassage]:
    """Every passage relevant to a pair's query, once, in the pairs' order."""
    seen: set[str] = set()
    for pair in pairs:
        for passage in pair.positives:
            if passage.doc_id not in seen:
                seen.add(passage.doc_id)
                yield passage


def _topic(qid: str, row: dict[str, Any]) -> SeedQuery:
    """A query with the TREC topic fields a BEIR row may carry, at its top level or in its ``metadata``."""
    meta = row.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    topic = {key: str(row.get(key) or meta.get(key) or "") for key in ("title", "description", "narrative")}
    return SeedQuery(query_id=qid, text=str(row.get("text", "")), metadata=meta, **topic)


def _pair(
    query: SeedQuery, grades: dict[str, int], read: Callable[[Collection[str]], Mapping[str, SeedPassage]]
) -> SeedPair | None:
    """The query with its judged passages that the corpus holds, relevant first; none without a relevant one
    or without a query text (nothing could be asked about it). ``read`` gives the judged passages the corpus
    holds, by id; it is called only for a query that may make a pair, so no other query's passages are read."""
    if not query.text.strip() or not any(grade > 0 for grade in grades.values()):
        return None
    docs = read(grades)
    found = [docs[doc].model_copy(update={"grade": grade}) for doc, grade in grades.items() if doc in docs]
    positives = tuple(p for p in found if p.grade > 0)
    if not positives:
        return None
    return SeedPair(query=query, positives=positives, negatives=tuple(p for p in found if p.grade <= 0))


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
        empty, a qrels file with its header and with no line pointing at an unknown query or passage, finite
        scores; and at least one query with text judged relevant to a passage, since a source without one could
        only make an empty release."""
        docs = self._ids(self.corpus, "passage")
        if not docs:
            raise SeedError(f"seeds `{self.spec}`: corpus.jsonl holds no passage")
        queries = self._ids(self.queries, "query")
        if not queries:
            raise SeedError(f"seeds `{self.spec}`: queries.jsonl holds no query")
        if not any(queries.values()):
            raise SeedError(f"seeds `{self.spec}`: every query in queries.jsonl has an empty text")
        if not qrels_header(next((line for _, _, line in _lines(self.qrels, self.spec)), "")):
            raise SeedError(
                f"seeds `{self.spec}`: qrels/{self.qrels.name} line 1 is not the header "
                "`query-id<TAB>corpus-id<TAB>score` that BEIR files start with"
            )
        judged = usable = 0
        for found in self._judged(queries, docs):
            judged += 1
            usable += found.grade > 0 and queries[found.query_id]
        if not usable:
            what = (
                "holds no judgement"
                if not judged
                else "judges no passage relevant (score above 0) to a query with text"
            )
            raise SeedError(f"seeds `{self.spec}`: qrels/{self.qrels.name} {what}; nothing could be made from it")

    def _ids(self, path: Path, what: str) -> dict[str, bool]:
        """Every id of the file, and whether its row has a text that is not blank."""
        seen: dict[str, bool] = {}
        for line, _, row in _rows(path, self.spec):
            where = f"seeds `{self.spec}`: {path.name} line {line}"
            fault = id_fault(row["_id"], what)
            if fault is not None:
                raise SeedError(f"{where}: {fault}")
            doc_id = str(row["_id"])
            if doc_id in seen:
                raise SeedError(f"{where}: _id `{doc_id}` appears twice")
            for field in ("text", "title"):
                if field in row and row[field] is not None and not isinstance(row[field], str):
                    raise SeedError(f"{where}: `{field}` is not a string")
            if not isinstance(row.get("text"), str):
                raise SeedError(f"{where}: the {what} `{doc_id}` has no text")
            seen[doc_id] = bool(row["text"].strip())
        return seen

    def _judgements(self) -> dict[str, dict[str, int]]:
        """Per query, every judged passage with its grade (> 0 relevant)."""
        judged: dict[str, dict[str, int]] = defaultdict(dict)
        for found in self._judged():
            judged[found.query_id][found.doc_id] = found.grade
        return judged

    def _judged(self, queries: Container[str] | None = None, docs: Container[str] | None = None) -> Iterator[Judgement]:
        """The judgements below the header, each line held to ``judgement``'s rule (ids too, where given)."""
        for number, _, line in _lines(self.qrels, self.spec, first=2):
            try:
                found = judgement(line, queries, docs)
            except QrelsFault as fault:
                raise SeedError(f"seeds `{self.spec}`: qrels/{self.qrels.name} line {number} {fault}") from None
            if found is not None:
                yield found

    def pairs(self) -> Iterator[SeedPair]:
        """Each query with its judged passages, read from the corpus when the query comes: what is held is
        where each judged passage's line starts, not the passage, so a large collection's pairs are read in
        a fraction of the memory (bench/README.md, "Twenty-fourth round")."""
        judged = self._judgements()
        # keyed by the qrels' own id strings (a key set again keeps its first object): each id is held once
        starts: dict[str, int | None] = dict.fromkeys(doc for docs in judged.values() for doc in docs)
        for _, start, row in _rows(self.corpus, self.spec):
            if (doc := str(row["_id"])) in starts:
                starts[doc] = start
        with self.corpus.open("rb") as corpus:

            def read(ids: Collection[str]) -> dict[str, SeedPassage]:
                return {doc: self._passage_at(corpus, doc, at) for doc in ids if (at := starts[doc]) is not None}

            for row in _jsonl(self.queries, self.spec):
                qid = str(row["_id"])
                pair = _pair(_topic(qid, row), judged.get(qid, {}), read)
                if pair is not None:
                    yield pair

    def _passage_at(self, corpus: BinaryIO, doc_id: str, start: int) -> SeedPassage:
        """The passage whose line starts at ``start``, which ``pairs`` found to be ``doc_id``'s."""
        corpus.seek(start)
        try:
            row = json.loads(corpus.readline().decode("utf-8"))
            same = str(row["_id"]) == doc_id
        except (ValueError, KeyError, TypeError):
            same = False
        if not same:
            raise SeedError(f"seeds `{self.spec}`: corpus.jsonl changed while it was read; run the same command again")
        return _beir_passage(row)

    def passages(self) -> Iterator[SeedPassage]:
        return map(_beir_passage, _jsonl(self.corpus, self.spec))

    def positives(self) -> Iterator[SeedPassage]:
        """The passages ``pairs`` holds relevant, once each, in corpus order: read as the corpus streams, with
        no passage held (a 20,000-seed corpus's judged passages were the top of its run's memory, at the end)."""
        judged = self._judgements()
        relevant = {
            doc for row in _jsonl(self.queries, self.spec) if str(row.get("text", "")).strip()
            for doc, grade in judged.get(str(row["_id"]), {}).items() if grade > 0
        }  # fmt: skip
        del judged
        for row in _jsonl(self.corpus, self.spec):
            if (doc_id := str(row["_id"])) in relevant:
                relevant.discard(doc_id)
                yield _beir_passage(row)


def _beir_passage(row: dict[str, Any]) -> SeedPassage:
    return SeedPassage(doc_id=str(row["_id"]), title=str(row.get("title") or ""), text=str(row.get("text", "")))


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
            judged: dict[str, dict[str, int]] = defaultdict(dict)
            for qrel in self.dataset.qrels_iter():
                judged[qrel.query_id][qrel.doc_id] = qrel.relevance
            store = self.dataset.docs_store()
            for query in self.dataset.queries_iter():
                grades = judged.get(query.query_id)
                if not grades:
                    continue
                seed = SeedQuery(
                    query_id=query.query_id,
                    text=query.default_text(),
                    title=getattr(query, "title", "") or "",
                    description=getattr(query, "description", "") or "",
                    narrative=getattr(query, "narrative", "") or "",
                )
                pair = _pair(seed, grades, lambda ids: {i: self._passage(d) for i, d in store.get_many(ids).items()})
                if pair is not None:
                    yield pair

    def passages(self) -> Iterator[SeedPassage]:
        with self._guard():
            for doc in self.dataset.docs_iter():
                yield self._passage(doc)

    def positives(self) -> Iterator[SeedPassage]:
        return positives_of(self.pairs())
