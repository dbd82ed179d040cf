"""Public releases into the warehouse, so that they and regenerated versions are measured by the same code.

Each reader turns one published layout into the agreed release rows (docs, queries per mode, qrels per mode);
``import_release`` writes them as a release whose source is ``import:<format>``. Files a layout names but a
folder lacks (InstructIR's public corpus, for one) are reported, and the rest is still imported; a line of a
file that is there is held to the rule seeds are (``schemas.seeds``): one that breaks it refuses the import.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from ifsynth.schemas.config import NAME_PATTERN
from ifsynth.schemas.errors import ImportFailed
from ifsynth.schemas.ifir import SCHEMES, SINGLE_LEVEL, TEST_DATA, level_mode, release_id
from ifsynth.schemas.infir import FIELDS, MODES
from ifsynth.schemas.modes import FOLLOWIR_MODES, INFOSEARCH_MODES, INSTRUCTED, ORIGINAL
from ifsynth.schemas.seeds import NotText, QrelsFault, id_fault, judgement, qrels_header, text_lines
from ifsynth.warehouse.store import Warehouse

SEP = "[SEP]"
_INSTANCE_ID = re.compile(r"^(.+)_(\d+)$")


@dataclass
class Imported:
    """A release read from files, before it is written."""

    recipe: str
    docs: list[dict[str, Any]] = field(default_factory=list)
    queries: list[dict[str, Any]] = field(default_factory=list)
    qrels: list[dict[str, Any]] = field(default_factory=list)
    top_ranked: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def query(self, mode: str, query_id: str, group_id: str, query: str, instruction: str, **meta: Any) -> None:
        self.queries.append(
            {
                "mode": mode,
                "query_id": query_id,
                "group_id": group_id,
                "query": query,
                "instruction": instruction,
                "meta": json.dumps(meta, sort_keys=True, ensure_ascii=False),
            }
        )

    def doc(self, doc_id: str, text: str, title: str = "", **meta: Any) -> None:
        self.docs.append({"doc_id": doc_id, "title": title, "text": text, "meta": json.dumps(meta, sort_keys=True)})


# a layout's reader: a folder (or file) -> its release rows; BEIR's is here, a recipe's own named by its Recipe
Reader = Callable[[Path], Imported]


def import_release(
    warehouse: Warehouse, fmt: str, reader: Reader, directory: str | Path, name: str | None = None
) -> dict[str, Any]:
    """Read ``directory`` with ``reader`` (layout ``fmt``) and write it as the release ``name`` (default: the
    folder's name)."""
    path = Path(directory)
    if not path.exists():
        raise ImportFailed(f"no file or folder `{path}`; give the folder of a {fmt} release")
    name = name or path.resolve().name
    if not re.match(NAME_PATTERN, name):
        raise ImportFailed(f"release name `{name}` may hold letters, digits, '.', '_' and '-' only; pass --name")
    if warehouse.has_release(name):
        raise ImportFailed(f"a release named `{name}` already exists; pass --name with another name")
    run_id = warehouse.run_named(name)  # its release, still to come (a run stopped short), would replace this one
    if run_id is not None:
        raise ImportFailed(f"run {run_id} is named `{name}`, as its release will be; pass --name with another name")
    try:
        imported = reader(path)
    except KeyError as exc:
        raise ImportFailed(f"a row in `{path}` lacks the field {exc}, which the {fmt} layout requires") from None
    if not imported.queries:
        raise ImportFailed(f"no queries found in `{path}` as a {fmt} release; check the folder and the format")
    _dedupe(imported)
    card = {
        "recipe": imported.recipe,
        "source": f"import:{fmt}",
        "imported_from": path.resolve().name,
        "imported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "missing": imported.missing,
        "counts": {
            "queries": len({(q["group_id"]) for q in imported.queries}),
            "instances": len({q["query_id"] for q in imported.queries}),
            "corpus": len(imported.docs),
            "qrels": len(imported.qrels),
            "top_ranked": len(imported.top_ranked),
        },
    }
    warehouse.write_release(
        name=name,
        run_id=None,
        recipe=imported.recipe,
        source=f"import:{fmt}",
        card=card,
        docs=imported.docs,
        queries=imported.queries,
        qrels=imported.qrels,
        top_ranked=imported.top_ranked,
    )
    return {"release": name, **card}


# -- InstructIR and BEIR ----------------------------------------------------------------------------------


def read_instructir(path: Path) -> Imported:
    """InstructIR's release: instructions and queries in two files (or joined by [SEP]), one positive each."""
    root = path / "INSTRUCTIR" if (path / "INSTRUCTIR").is_dir() else path
    out = Imported(recipe="instructir")
    instructions, queries = root / "only_instruction_queries.jsonl", root / "only_queries.jsonl"
    if instructions.exists() and queries.exists():
        core = {row["_id"]: row["text"] for row in _identified(queries, "query")}
        for row in _identified(instructions, "query"):
            group = _group_of(row["_id"])
            query = core.get(group) or (row.get("metadata") or {}).get("origin_query", "")
            out.query(INSTRUCTED, row["_id"], group, query, row["text"])
    elif (root / "queries.jsonl").exists():
        _beir_queries(root / "queries.jsonl", out)
    else:
        raise ImportFailed(
            f"`{root}` has neither only_instruction_queries.jsonl with only_queries.jsonl nor queries.jsonl"
        )
    docs = _corpus(root, out)
    out.qrels = _qrels(_split_file(root / "qrels", out), INSTRUCTED, out, docs)
    return out


def read_beir(path: Path) -> Imported:
    """A BEIR folder. Instructions come from ``metadata.instruction`` (ifsynth's exports) or an
    ``instruction [SEP] query`` text (InstructIR's); without them the queries are plain (mode ``original``)."""
    out = Imported(recipe="beir")
    if not (path / "queries.jsonl").exists():
        raise ImportFailed(f"`{path}` has no queries.jsonl; a BEIR folder holds corpus.jsonl, queries.jsonl, qrels/")
    _beir_queries(path / "queries.jsonl", out)
    instructed = any(q["instruction"] for q in out.queries)
    mode = INSTRUCTED if instructed else ORIGINAL
    if instructed:
        out.recipe = "instructir"
    else:
        for q in out.queries:
            q["mode"] = mode
    docs = _corpus(path, out)
    out.qrels = _qrels(_split_file(path / "qrels", out), mode, out, docs)
    return out


def _beir_queries(path: Path, out: Imported) -> None:
    rows = list(_identified(path, "query"))
    split = [_split_query(row) for row in rows]
    ids = [row["_id"] for row in rows]
    numbered = all(_INSTANCE_ID.match(i) for i in ids) and any(instr for _, instr in split)
    first_of_query: dict[str, str] = {}
    for row, (query, instruction) in zip(rows, split, strict=True):
        meta = row.get("metadata") or {}
        group = meta.get("group_id") or (
            _group_of(row["_id"]) if numbered else first_of_query.setdefault(query, row["_id"])
        )
        out.query(INSTRUCTED, row["_id"], group, query, instruction)


def _split_query(row: dict[str, Any]) -> tuple[str, str]:
    meta = row.get("metadata") or {}
    text = row.get("text", "")
    if "instruction" in meta and "origin_query" in meta:
        return meta["origin_query"], meta["instruction"]
    if row.get("instruction"):
        return text, row["instruction"]
    if SEP in text:
        instruction, _, query = text.partition(SEP)
        return query.strip(), instruction.strip()
    return text, ""


def _group_of(instance_id: str) -> str:
    match = _INSTANCE_ID.match(instance_id)
    return match.group(1) if match else instance_id


# -- InfoSearch and FollowIR --------------------------------------------------------------------------------


def read_infosearch(path: Path) -> Imported:
    """One folder per dimension (or one dimension folder): queries with ``instruction_og|changed|reversed``,
    ``qrels_<mode>/test.tsv`` per mode."""
    out = Imported(recipe="infosearch")
    dimensions = sorted(p for p in path.iterdir() if p.is_dir() and (p / "queries.jsonl").exists())
    if (path / "queries.jsonl").exists():
        dimensions = [path]
    if not dimensions:
        raise ImportFailed(f"`{path}` has no queries.jsonl, nor subfolders (one per dimension) that have one")
    parts = [_modes_folder(d, INFOSEARCH_MODES, dimension=d.name) for d in dimensions]
    _merge(out, parts, prefix=len(parts) > 1)
    return out


def read_followir(path: Path) -> Imported:
    """FollowIR's layout: queries with ``instruction_og`` and ``instruction_changed``, qrels per mode, and the
    candidate pool to rerank (``top_ranked``) when the folder has one."""
    out = Imported(recipe="followir")
    if not (path / "queries.jsonl").exists():
        raise ImportFailed(f"`{path}` has no queries.jsonl; a FollowIR folder also holds qrels_og/, qrels_changed/")
    _merge(out, [_modes_folder(path, FOLLOWIR_MODES, dimension=None)], prefix=False)
    out.top_ranked = _top_ranked(path, out)
    return out


def _top_ranked(path: Path, out: Imported) -> list[dict[str, Any]]:
    """The pool in either of its published shapes: MTEB 1.x rows ``{qid, pid}`` keyed by topic (one pool for
    both modes), or MTEB 2 rows ``{query-id, corpus-ids}`` keyed ``<topic>-<mode>``; JSONL or Parquet, as
    ``top_ranked.jsonl`` or files in ``top_ranked/``."""
    folder = path / "top_ranked"
    files = [path / "top_ranked.jsonl"] if (path / "top_ranked.jsonl").exists() else []
    if folder.is_dir():
        files += sorted(p for p in folder.iterdir() if p.suffix in (".jsonl", ".parquet"))
    modes: dict[str, list[str]] = {}
    for q in out.queries:
        modes.setdefault(q["query_id"], []).append(q["mode"])
    pool = []
    for file in files:
        rows = pq.read_table(file).to_pylist() if file.suffix == ".parquet" else _jsonl(file)
        for row in rows:
            qid = str(row.get("query-id", row.get("qid", "")))
            docs = row["corpus-ids"] if "corpus-ids" in row else [row.get("corpus-id", row.get("pid"))]
            base, _, mode = qid.rpartition("-")
            targets = [(mode, base)] if mode in modes.get(base, ()) else [(m, qid) for m in modes.get(qid, ())]
            pool += [{"mode": m, "query_id": q, "doc_id": str(doc)} for m, q in targets for doc in docs]
    return pool


def _modes_folder(path: Path, modes: tuple[str, ...], dimension: str | None) -> Imported:
    part = Imported(recipe="")
    rows = list(_identified(path / "queries.jsonl", "query"))
    first_of_query: dict[str, str] = {}
    present = [mode for mode in modes if _split_file(path / f"qrels_{mode}", part, required=False) is not None]
    for mode in modes:
        if mode not in present:
            part.missing.append(f"{_where(dimension)}qrels_{mode}/")
    for row in rows:
        group = row.get("group_id") or first_of_query.setdefault(row.get("text", ""), row["_id"])
        meta = {"dimension": dimension} if dimension else {}
        if row.get("condition") is not None:
            meta["condition"] = row["condition"]
        for mode in present:
            part.query(mode, row["_id"], group, row.get("text", ""), row.get(f"instruction_{mode}") or "", **meta)
    docs = _corpus(path, part, dimension=dimension)
    for mode in present:
        part.qrels += _qrels(_split_file(path / f"qrels_{mode}", part), mode, part, docs)
    return part


def _merge(out: Imported, parts: list[Imported], *, prefix: bool) -> None:
    """Put dimensions together; ids are prefixed with the dimension only when two dimensions share one."""
    if prefix:
        seen_q: set[str] = set()
        seen_d: set[str] = set()
        clash = False
        for part in parts:
            q_ids, d_ids = {q["query_id"] for q in part.queries}, {d["doc_id"] for d in part.docs}
            clash = clash or bool(q_ids & seen_q) or bool(d_ids & seen_d)
            seen_q |= q_ids
            seen_d |= d_ids
        prefix = clash
    for part in parts:
        tag = json.loads(part.queries[0]["meta"]).get("dimension", "") + "/" if prefix and part.queries else ""
        for q in part.queries:
            out.queries.append({**q, "query_id": tag + q["query_id"], "group_id": tag + q["group_id"]})
        out.qrels += [{**r, "query_id": tag + r["query_id"], "doc_id": tag + r["doc_id"]} for r in part.qrels]
        out.docs += [{**d, "doc_id": tag + d["doc_id"]} for d in part.docs]
        out.missing += part.missing


def _where(dimension: str | None) -> str:
    return f"{dimension}/" if dimension else ""


# -- IFIR -------------------------------------------------------------------------------------------------------


def read_ifir(path: Path) -> Imported:
    """IFIR's layout: one folder per subset (or one subset folder), named as the subset, with
    ``<subset>-corpus.jsonl`` and ``test_data.json``, whose queries list their originally relevant passages and,
    per instruction level, the indices of those still relevant (the query and qrel files repeat it)."""
    out = Imported(recipe="ifir")
    subsets = [path] if (path / TEST_DATA).exists() else []
    if not subsets and path.is_dir():
        subsets = sorted(p for p in path.iterdir() if (p / TEST_DATA).exists())
    if not subsets:
        raise ImportFailed(f"`{path}` has no {TEST_DATA}, nor subfolders (one per subset) that have one")
    for folder in subsets:
        _ifir_subset(folder, out)
    return out


def _ifir_subset(folder: Path, out: Imported) -> None:
    subset = folder.name
    if subset in SINGLE_LEVEL:
        out.missing.append(f"{subset}/ (a single-level subset; ifsynth models the three-level ones)")
        return
    if subset not in SCHEMES:
        raise ImportFailed(f"`{folder}` names no IFIR subset; known: {', '.join((*SCHEMES, *SINGLE_LEVEL))}")
    corpus = folder / f"{subset}-corpus.jsonl"
    if not corpus.exists():
        raise ImportFailed(f"`{folder}` has no {corpus.name}; an IFIR subset folder holds it beside {TEST_DATA}")
    origin = {"domain": SCHEMES[subset].domain, "subset": subset}
    for row in _identified(corpus, "passage"):
        seed = str(row["_id"])
        out.doc(release_id(subset, seed), row["text"], row.get("title") or "", seed_doc_id=seed, **origin)
    for number, row in enumerate(_json_list(folder / TEST_DATA), 1):
        fault = id_fault(row.get("_id"), "query")
        if fault is not None:
            raise ImportFailed(f"`{TEST_DATA}` of {subset}, row {number}: {fault}")
        _ifir_query(out, row, origin)


def _ifir_query(out: Imported, row: dict[str, Any], origin: dict[str, str]) -> None:
    """One query of ``test_data.json``: a release query per level it has, each judging the passages of its
    ``rel`` relevant; every level's meta lists all the originally relevant ones."""
    seed, subset = str(row["_id"]), origin["subset"]
    query_id = release_id(subset, seed)
    relevant = [release_id(subset, str(p["_id"])) for p in row["corpus"]]
    for level in row["instructions"]:
        mode = level_mode(level["level"])
        lineage = {"item": level["item"]} if "item" in level else {}
        meta = {**origin, "level": level["level"], "seed_query_id": seed, "relevant": relevant, **lineage}
        out.query(mode, query_id, query_id, row["text"], level["instruction"], **meta)
        if not all(isinstance(i, int) and 0 <= i < len(relevant) for i in level["rel"]):
            raise ImportFailed(f"IFIR query `{seed}` of {subset}: level {level['level']}'s rel indexes past its corpus")
        out.qrels += [{"mode": mode, "query_id": query_id, "doc_id": relevant[i], "score": 1} for i in level["rel"]]


# -- InF-IR ---------------------------------------------------------------------------------------------------


def read_infir(path: Path) -> Imported:
    """InF-IR training rows (JSONL or Parquet, a file or a folder of them): one tuple = three instructed queries
    (positive, poisoned instruction, poisoned query), each with its own intended passage."""
    out = Imported(recipe="infir")
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.suffix in (".jsonl", ".parquet"))
    if not files:
        raise ImportFailed(f"`{path}` holds no .jsonl or .parquet file of InF-IR rows")
    index = 0
    for file in files:
        rows = pq.read_table(file).to_pylist() if file.suffix == ".parquet" else _jsonl(file)
        for row in rows:
            if "document_positive" not in row and "document" in row:
                row["document_positive"] = row["document"]
            absent = [name for name in FIELDS if name not in row]
            if absent:
                raise ImportFailed(
                    f"`{file.name}` row {index + 1} lacks {', '.join(absent)}; InF-IR rows have all of "
                    f"{', '.join(FIELDS)}"
                )
            index += 1
            tuple_id = str(row.get("id") or row.get("tuple_id") or f"t{index:07d}")
            fault = id_fault(tuple_id, "tuple")
            if fault is not None:
                raise ImportFailed(f"`{file.name}` row {index}: {fault}")
            _infir_tuple(out, tuple_id, row)
    return out


def _infir_tuple(out: Imported, tuple_id: str, row: dict[str, Any]) -> None:
    doc_ids = {mode: f"{tuple_id}-{mode}" for mode in MODES}
    for mode, (_, _, passage) in MODES.items():
        out.doc(doc_ids[mode], row[passage], role=mode, tuple=tuple_id)
    for mode, (query, instruction, _) in MODES.items():
        out.query(mode, tuple_id, tuple_id, row[query], row[instruction])
        out.qrels += [
            {"mode": mode, "query_id": tuple_id, "doc_id": doc_id, "score": int(doc_id == doc_ids[mode])}
            for doc_id in doc_ids.values()
        ]


# -- files ------------------------------------------------------------------------------------------------------


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    for _, row in _numbered(path):
        yield row


def _numbered(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in _lines(path):
        if line.strip():
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                raise ImportFailed(f"`{path.name}` line {number} is not JSON: {exc.msg}") from None


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """A text file's lines, numbered from 1; one that is not UTF-8 is said with its file and line."""
    try:
        yield from text_lines(path)
    except NotText as fault:
        raise ImportFailed(f"`{path.name}` {fault}") from None


def _identified(path: Path, what: str) -> Iterator[dict[str, Any]]:
    """The rows of a file of queries or passages, each ``_id`` held to the rule seeds are; an ``_id`` that comes
    again is refused unless its whole row does (else one would silently replace the other, a judged passage's
    text for one)."""
    first: dict[str, tuple[int, bytes]] = {}
    for number, row in _numbered(path):
        where = f"`{path.name}` line {number}"
        fault = id_fault(row.get("_id") if isinstance(row, dict) else None, what)
        if fault is not None:
            raise ImportFailed(f"{where}: {fault}")
        key = str(row["_id"])
        digest = hashlib.blake2b(json.dumps(row, sort_keys=True).encode(), digest_size=16).digest()
        line, seen = first.setdefault(key, (number, digest))
        if seen != digest:
            raise ImportFailed(f"{where}: _id `{key}` comes again with other content (first on line {line})")
        yield row


def _json_list(path: Path) -> list[dict[str, Any]]:
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ImportFailed(f"`{path.name}` is not JSON: {exc.msg} (line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise ImportFailed(f"`{path.name}` is not UTF-8 text; save the file as UTF-8") from None
    if not isinstance(rows, list):
        raise ImportFailed(f"`{path.name}` holds no JSON list of rows")
    return rows


def _corpus(root: Path, out: Imported, dimension: str | None = None) -> set[str] | None:
    """The ids of the passages read, none where the folder has no corpus (then qrels cannot be held to one)."""
    corpus = root / "corpus.jsonl"
    if not corpus.exists():
        out.missing.append(f"{_where(dimension)}corpus.jsonl")
        return None
    meta = {"dimension": dimension} if dimension else {}
    ids = set()
    for row in _identified(corpus, "passage"):
        ids.add(str(row["_id"]))
        out.doc(str(row["_id"]), row.get("text", ""), row.get("title") or "", **meta)
    return ids


def _split_file(qrels_dir: Path, out: Imported, *, required: bool = True) -> Path | None:
    """``test.tsv`` if there is one, else the only TSV of the folder."""
    if (qrels_dir / "test.tsv").exists():
        return qrels_dir / "test.tsv"
    found = sorted(qrels_dir.glob("*.tsv")) if qrels_dir.is_dir() else []
    if len(found) == 1:
        return found[0]
    if required:
        out.missing.append(f"{qrels_dir.name}/test.tsv")
    return None


def _qrels(path: Path | None, mode: str, out: Imported, docs: set[str] | None) -> list[dict[str, Any]]:
    """A qrels file's judgements, held to the rule a seed folder's are (a line that is none is refused, not
    skipped), each naming a query of ``out`` and a passage of ``docs`` (none: the folder has no corpus). Only a
    first line that is a header is passed over: a published file may lack one."""
    if path is None:
        return []
    queries = {q["query_id"] for q in out.queries}
    rows = []
    for number, line in _lines(path):
        if number == 1 and qrels_header(line):
            continue
        try:
            found = judgement(line, queries, docs)
        except QrelsFault as fault:
            raise ImportFailed(f"`{Path(*path.parts[-3:])}` line {number} {fault}") from None
        if found is not None:
            rows.append({"mode": mode, "query_id": found.query_id, "doc_id": found.doc_id, "score": found.grade})
    return rows


def _dedupe(imported: Imported) -> None:
    """The release tables key on (mode, query) and (mode, query, doc); a repeated row keeps its last value."""
    imported.queries = list({(q["mode"], q["query_id"]): q for q in imported.queries}.values())
    imported.qrels = list({(r["mode"], r["query_id"], r["doc_id"]): r for r in imported.qrels}.values())
    imported.docs = list({d["doc_id"]: d for d in imported.docs}.values())
    imported.top_ranked = list({(r["mode"], r["query_id"], r["doc_id"]): r for r in imported.top_ranked}.values())


READERS: dict[str, Reader] = {"beir": read_beir}  # the layout every recipe's releases come in
