"""Releases to files: BEIR as InstructIR released it, the MTEB instruction-retrieval layout, JSONL and
Parquet, each with a dataset card. Rows are written in a fixed order, so identical releases give
byte-identical files."""

from __future__ import annotations

import json
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any, Literal, get_args

import pyarrow as pa
import pyarrow.parquet as pq

from ifsynth.schemas.errors import UnknownRelease, WarehouseError
from ifsynth.warehouse import cards, export_followir, export_ifir, export_infir
from ifsynth.warehouse.store import Warehouse

Format = Literal["beir", "mteb", "jsonl", "parquet", "infosearch", "followir", "ifir", "infir", "triplets", "hf"]
FORMATS: tuple[Format, ...] = get_args(Format)
# a recipe's own formats -> that recipe (triplets also take followir releases)
RECIPE_OF = {fmt: module.RECIPE for module in (export_infir, export_followir, export_ifir) for fmt in module.FORMATS}
SEP = " [SEP] "
# a recipe's own format: (folder, the release's documents, queries and qrels as rows) -> the files it wrote
Exporter = Callable[[Path, list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]], list[Path]]


def release_for(warehouse: Warehouse, ref: str | None) -> str:
    """The release of a run (by run id or name; the newest run by default), or a release by its name."""
    if ref is not None and warehouse.has_release(ref):
        return ref
    run = warehouse.run(ref)
    name = warehouse.release_name(run.run_id)
    if name is None:
        raise WarehouseError(f"run {run.run_id} has no release yet (status {run.status}); run it to completion first")
    return name


def export(
    warehouse: Warehouse,
    release: str,
    fmt: Format | Exporter,
    out: str | Path,
    *,
    anchor: export_infir.AnchorOrder = "query-instruction",
    overwrite: bool = False,
    endpoints: bool = False,
) -> list[Path]:
    """Write ``release`` as ``fmt`` into ``out``: one of ifsynth's formats, or the writer of a format the
    release's recipe declares itself. ``anchor`` orders an InF-IR triplet's anchor; the card names the
    endpoints' URLs only with ``endpoints`` (else their kind: a URL may name a private host).

    The files are written into a hidden sibling folder and renamed into place at the end, so an export that
    is killed leaves the previous one (or none), never a mix. A folder that already holds files is replaced
    only with ``overwrite``."""
    meta = warehouse.release_row(release)
    if meta is None:
        raise UnknownRelease(release)
    card = json.loads(meta["card"])
    recipe = meta["recipe"]
    followir_triplets = fmt == "triplets" and recipe == export_followir.RECIPE
    if isinstance(fmt, str) and fmt in RECIPE_OF and recipe != RECIPE_OF[fmt] and not followir_triplets:
        raise WarehouseError(f"--format {fmt} is for {RECIPE_OF[fmt]} releases; release {release} is {recipe}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise WarehouseError(f"`{out}` is a file; give a folder to export into")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise WarehouseError(f"`{out}` already holds files; pass --overwrite to replace them, or another --out")
    with _staged(out) as staging:
        written = _write(warehouse, release, fmt, staging, card, anchor, meta["run_id"], endpoints)
    return [out / path.relative_to(staging) for path in written]


@contextmanager
def _staged(out: Path) -> Iterator[Path]:
    """A fresh folder beside ``out`` that replaces it when the block ends without an error.

    ``out`` is replaced only when it holds nothing but what an export wrote there (its manifest, a hidden file
    beside it, lists them; the folder holds the dataset alone): a folder with anything else in it (a
    warehouse, someone's files) is refused, never deleted. The folder is made with the usual permissions, not
    mkdtemp's owner-only ones."""
    foreign = _not_exported(out)
    if foreign:
        raise WarehouseError(
            f"`{out}` holds {foreign[0]}{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}, which no "
            "export wrote; --overwrite replaces only an earlier export: give another --out"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.{secrets.token_hex(6)}.partial"
    staging.mkdir()
    try:
        yield staging
        written = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if not p.is_dir())
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = out.with_name(f"{staging.name[: -len('.partial')]}.old")
    if out.exists():
        out.rename(old)
    staging.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    listing = staging.with_name(f"{staging.name}.list")  # written whole, then renamed: never half a manifest
    listing.write_text("".join(f"{path}\n" for path in written), encoding="utf-8")
    listing.replace(_manifest(out))


def _manifest(out: Path) -> Path:
    """Where the files of the export in ``out`` are listed: a hidden file beside the folder."""
    return out.with_name(f".{out.name}.ifsynth-export")


def _not_exported(out: Path) -> list[str]:
    """What ``out`` holds that its last export did not write (its files, and folders holding none of them)."""
    if not out.is_dir():
        return []
    try:
        listed = set(_manifest(out).read_text(encoding="utf-8").splitlines())
    except (OSError, UnicodeDecodeError):
        listed = set()
    folders = {parent.as_posix() for path in listed for parent in PurePosixPath(path).parents}
    found = (path.relative_to(out).as_posix() + ("/" if path.is_dir() else "") for path in out.rglob("*"))
    return sorted(f"`{name}`" for name in found if name not in listed and name.rstrip("/") not in folders)


def _write(
    warehouse: Warehouse,
    release: str,
    fmt: Format | Exporter,
    out: Path,
    card: dict[str, Any],
    anchor: export_infir.AnchorOrder,
    run_id: str | None,
    endpoints: bool,
) -> list[Path]:
    docs = warehouse.release_docs(release)
    queries = warehouse.ordered_queries(release)
    qrels = warehouse.ordered_qrels(release)
    if not queries:
        raise WarehouseError(
            f"release {release} is empty: no query was kept, so there is nothing to export "
            "(`ifsynth funnel` shows where the items went)"
        )
    if not isinstance(fmt, str):
        written = fmt(out, docs, queries, qrels)
    elif fmt == "infosearch":
        from ifsynth.warehouse.export_infosearch import write_infosearch  # it builds on this module's writers

        written = write_infosearch(out, docs, queries, qrels, card)
    elif card.get("recipe") == export_followir.RECIPE and fmt in ("followir", "triplets"):
        pool = warehouse.release_top_ranked(release)
        written = export_followir.write(out, fmt, docs, queries, qrels, pool, _jsonl, _tsv)
    elif fmt in export_ifir.FORMATS:
        written = export_ifir.write(out, docs, queries, qrels, _jsonl, _tsv, _write_text)
    elif fmt in export_infir.FORMATS:
        written = export_infir.write(out, docs, queries, fmt, _jsonl, anchor)
        card = {**card, "notes": [*card.get("notes", []), *export_infir.notes(anchor)]}
    else:
        writer = {"beir": _beir, "mteb": _mteb, "jsonl": _flat, "parquet": _flat}[fmt]
        written = (_per_mode(writer) if fmt in ("beir", "mteb") else writer)(out, docs, queries, qrels, fmt)
    modes = list(dict.fromkeys(q["mode"] for q in queries))
    apart: list[str] = []
    if fmt == "mteb":
        configs = cards.mteb_configs(modes)
    elif fmt == "hf":
        configs = export_infir.HF_CONFIGS
    else:
        files = [path.relative_to(out).as_posix() for path in written]
        configs, apart = cards.configs_for(files, training=fmt in export_infir.FORMATS or fmt == "triplets")
    readme = cards.render(card, configs=configs, apart=apart, run_id=run_id, queries=len(queries), endpoints=endpoints)
    written.append(_write_text(out / "README.md", readme))
    return written


Writer = Callable[[Path, list[dict], list[dict], list[dict], str], list[Path]]


def _per_mode(writer: Writer) -> Writer:
    """One folder, or one per mode (``<out>/<mode>/``) when the release has several retrieval modes."""

    def write(out: Path, docs: list[dict], queries: list[dict], qrels: list[dict], fmt: str) -> list[Path]:
        modes = list(dict.fromkeys(q["mode"] for q in queries))
        if len(modes) <= 1:
            return writer(out, docs, queries, qrels, fmt)
        written = []
        for mode in modes:
            chosen = [q for q in queries if q["mode"] == mode]
            written += writer(out / mode, docs, chosen, [r for r in qrels if r["mode"] == mode], fmt)
        return written

    return write


def _beir(out: Path, docs: list[dict], queries: list[dict], qrels: list[dict], _: str) -> list[Path]:
    groups: dict[str, str] = {}
    group_of: dict[str, str] = {}
    for q in queries:
        groups.setdefault(q["group_id"], q["query"])
        group_of[q["query_id"]] = q["group_id"]
    return [
        _jsonl(out / "corpus.jsonl", ({"_id": d["doc_id"], "title": d["title"], "text": d["text"]} for d in docs)),
        _jsonl(
            out / "queries.jsonl",
            (
                {
                    "_id": q["query_id"],
                    "text": q["instruction"] + SEP + q["query"] if q["instruction"] else q["query"],
                    "metadata": {"origin_query": q["query"], "instruction": q["instruction"]},
                }
                for q in queries
            ),
        ),
        _jsonl(
            out / "only_instruction_queries.jsonl",
            (
                {"_id": q["query_id"], "text": q["instruction"], "metadata": {"origin_query": q["query"]}}
                for q in queries
            ),
        ),
        _jsonl(out / "only_queries.jsonl", ({"_id": g, "text": text, "metadata": {}} for g, text in groups.items())),
        _tsv(out / "qrels" / "test.tsv", ((r["query_id"], r["doc_id"], r["score"]) for r in qrels)),
        _tsv(
            out / "qrels" / "for_only_query_test.tsv",
            ((group_of[r["query_id"]], r["doc_id"], r["score"]) for r in qrels),
        ),
    ]


def _mteb(out: Path, docs: list[dict], queries: list[dict], qrels: list[dict], _: str) -> list[Path]:
    tables = {
        "corpus": pa.table(
            {"id": [d["doc_id"] for d in docs], "title": [d["title"] for d in docs], "text": [d["text"] for d in docs]}
        ),
        "queries": pa.table(
            {
                "id": [q["query_id"] for q in queries],
                "text": [q["query"] for q in queries],
                "instruction": [q["instruction"] for q in queries],
            }
        ),
        "instruction": pa.table(
            {"query-id": [q["query_id"] for q in queries], "instruction": [q["instruction"] for q in queries]}
        ),
        "default": pa.table(
            {
                "query-id": [r["query_id"] for r in qrels],
                "corpus-id": [r["doc_id"] for r in qrels],
                "score": pa.array([r["score"] for r in qrels], pa.int32()),
            }
        ),
    }
    written = []
    for config, table in tables.items():
        path = out / config / "test-00000-of-00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        written.append(path)
    return written


def _flat(out: Path, docs: list[dict], queries: list[dict], qrels: list[dict], fmt: str) -> list[Path]:
    positives: dict[tuple[str, str], list[str]] = {}
    for r in qrels:
        if r["score"] > 0:
            positives.setdefault((r["mode"], r["query_id"]), []).append(r["doc_id"])
    instances = [
        {
            "query_id": q["query_id"],
            "group_id": q["group_id"],
            "mode": q["mode"],
            "query": q["query"],
            "instruction": q["instruction"],
            "positive_ids": positives.get((q["mode"], q["query_id"]), []),
            **json.loads(q["meta"]),
        }
        for q in queries
    ]
    corpus = [{"doc_id": d["doc_id"], "title": d["title"], "text": d["text"], "meta": d["meta"]} for d in docs]
    if fmt == "jsonl":
        return [_jsonl(out / "instances.jsonl", instances), _jsonl(out / "corpus.jsonl", corpus)]
    paths = [out / "instances.parquet", out / "corpus.parquet"]
    pq.write_table(pa.Table.from_pylist(instances), paths[0])
    pq.write_table(pa.Table.from_pylist(corpus), paths[1])
    return paths


# Characters that str.splitlines() and some readers take for line breaks; escaped so one row stays one line.
_LINE_BREAKS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


def _jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    lines = (json.dumps(row, ensure_ascii=False).translate(_LINE_BREAKS) + "\n" for row in rows)
    return _write_text(path, "".join(lines))


def _tsv(path: Path, rows: Iterable[tuple[Any, ...]]) -> Path:
    lines = ["query-id\tcorpus-id\tscore"] + ["\t".join(str(v) for v in row) for row in rows]
    return _write_text(path, "\n".join(lines) + "\n")


def _write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
