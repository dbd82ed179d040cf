"""Releases to files: BEIR as InstructIR released it, the MTEB instruction-retrieval layout, JSONL and
Parquet, each with a dataset card. Rows are written in a fixed order, so identical releases give
byte-identical files."""

from __future__ import annotations

import errno
import hashlib
import json
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal, get_args

import pyarrow as pa
import pyarrow.parquet as pq

from ifsynth.schemas.errors import UnknownRelease, WarehouseError
from ifsynth.warehouse import cards
from ifsynth.warehouse.store import Warehouse

Format = Literal["beir", "mteb", "jsonl", "parquet", "hf"]
FORMATS: tuple[Format, ...] = get_args(Format)
SEP = " [SEP] "


@dataclass(frozen=True)
class Release:
    """A release as the warehouse holds it, read once and handed whole to a writer: its rows, its recipe's
    rerank pool (FollowIR's) and the card stored at assembly, so a recipe's writer needs no SQL and no other
    argument. ``options`` are a format's own (InF-IR's ``anchor``)."""

    name: str
    recipe: str
    run_id: str | None
    card: dict[str, Any]
    docs: list[dict[str, Any]]
    queries: list[dict[str, Any]]
    qrels: list[dict[str, Any]]
    top_ranked: list[dict[str, Any]]
    options: Mapping[str, str] = field(default_factory=dict)

    @property
    def modes(self) -> list[str]:
        return list(dict.fromkeys(q["mode"] for q in self.queries))


@dataclass
class Written:
    """What a writer wrote: its files, the card's ``configs`` when the layout has its own (None: one per data
    file), whether the rows are training data (the configs' split), notes for the card, and what it left out
    and why (nothing empty is written)."""

    files: list[Path]
    configs: list[dict[str, Any]] | None = None
    training: bool = False
    notes: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


# a format's writer: a release -> the files it wrote into the folder
Writer = Callable[[Release, Path], Written]


def release_for(warehouse: Warehouse, ref: str | None) -> str:
    """The release of a run (by run id or name; the newest run by default), or a release by its name."""
    if ref is not None and warehouse.has_release(ref):
        return ref
    run = warehouse.run(ref)
    name = warehouse.release_name(run.run_id)
    if name is None:
        raise WarehouseError(f"run {run.run_id} has no release yet (status {run.status}); run it to completion first")
    return name


def recipe_of(warehouse: Warehouse, release: str) -> str:
    meta = warehouse.release_row(release)
    if meta is None:
        raise UnknownRelease(release)
    return str(meta["recipe"])


def export(
    warehouse: Warehouse,
    release: str,
    writer: Writer,
    out: str | Path,
    *,
    facts: Callable[[dict[str, Any]], cards.CardFacts] | None = None,
    options: Mapping[str, str] | None = None,
    overwrite: bool = False,
    endpoints: bool = False,
) -> Written:
    """Write ``release`` with ``writer`` (one of ``GENERIC``, or a format its recipe declares) into ``out``,
    with a card carrying what the recipe's ``facts`` hook says of it; the card names the endpoints' URLs only
    with ``endpoints`` (else their kind: a URL may name a private host).

    The files are written into a hidden sibling folder and renamed into place at the end, so an export that
    is killed leaves the previous one (or none), never a mix. A folder that already holds files is replaced
    only with ``overwrite``."""
    meta = warehouse.release_row(release)
    if meta is None:
        raise UnknownRelease(release)
    out = _folder(out, release)
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise WarehouseError(f"`{out}` already holds files; pass --overwrite to replace them, or another --out")
    queries = warehouse.ordered_queries(release)
    if not queries:
        raise WarehouseError(
            f"release {release} is empty: no query was kept, so there is nothing to export "
            "(`ifsynth funnel` shows where the items went)"
        )
    read = Release(
        name=release,
        recipe=meta["recipe"],
        run_id=meta["run_id"],
        card=json.loads(meta["card"]),
        docs=warehouse.release_docs(release),
        queries=queries,
        qrels=warehouse.ordered_qrels(release),
        top_ranked=warehouse.release_top_ranked(release),
        options=options or {},
    )
    try:
        with _staged(out) as staging:
            written = writer(read, staging)
            told = facts(read.card) if facts else cards.CardFacts()
            written.files.append(_card(read, written, staging, told, endpoints))
    except OSError as exc:
        raise WarehouseError(_unwritable(out, exc)) from exc
    written.files = [out / path.relative_to(staging) for path in written.files]
    return written


def _unwritable(out: Path, exc: OSError) -> str:
    """Why an export could not be written, and what to do: a full disk, a folder not ours to write, or else."""
    folder = out.resolve().parent
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return (
            f"no space left to export into `{out}`: free space on the disk of {folder} (`df {folder}`) and export again"
        )
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write into {folder} ({exc.strerror}): give an --out in a folder you may write"
    return f"cannot export into `{out}`: {exc.strerror or exc}; give another --out"


def replaceable(out: str | Path, release: str) -> Path:
    """``out``, if an export with ``overwrite`` may replace it whole: checked before a command's slow work, as
    the export checks it again."""
    out = _folder(out, release)
    _refuse_foreign(out)
    return out


def withdraw(out: str | Path, release: str) -> None:
    """Remove the export in ``out``, as an export with ``overwrite`` would replace it: for a release that has
    nothing to export, so that ``out`` does not go on holding another's. A folder holding anything an export did
    not write is refused, never deleted."""
    out = replaceable(out, release)
    old = out.with_name(f".{out.name}.{secrets.token_hex(6)}.old")
    if out.is_dir() or out.is_symlink():  # moved aside first, as ``_staged`` does: it goes whole or not at all
        out.rename(old)
    _manifest(out).unlink(missing_ok=True)  # then its list, so no folder made there later passes for the export
    _discard(old)


def _folder(out: str | Path, release: str) -> Path:
    """``out`` as a folder an export may replace whole."""
    out = Path(out)
    if out.name in ("", ".", ".."):  # `.`, `..`: the current folder or a parent
        raise WarehouseError(
            f"--out `{out}` names no folder of its own (an export replaces its folder whole); "
            f"give one, e.g. --out exports/{release}"
        )
    if out.exists() and not out.is_dir():
        raise WarehouseError(f"`{out}` is a file; give a folder to export into")
    return out


@contextmanager
def _staged(out: Path) -> Iterator[Path]:
    """A fresh folder beside ``out`` that replaces it when the block ends without an error.

    ``out`` is replaced only when it holds nothing but what an export wrote there (its manifest, a hidden file
    beside it, lists them; the folder holds the dataset alone): a folder with anything else in it (a
    warehouse, someone's files) is refused, never deleted. The folder is made with the usual permissions, not
    mkdtemp's owner-only ones."""
    _refuse_foreign(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.{secrets.token_hex(6)}.partial"
    old = out.with_name(f"{staging.name[: -len('.partial')]}.old")
    staging.mkdir()
    moved = False
    try:
        yield staging
        written = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if not p.is_dir())
        if out.exists():
            out.rename(old)
            moved = True
        staging.rename(out)  # fails where ``out`` is a link to nowhere, say: nothing is left behind then
    except BaseException:
        if moved:
            old.rename(out)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _discard(old, ignore_errors=True)  # the export is in place: a folder that will not go is left aside, hidden
    listing = staging.with_name(f"{staging.name}.list")  # written whole, then renamed: never half a manifest
    listing.write_text("".join(f"{path}\n" for path in written), encoding="utf-8")
    listing.replace(_manifest(out))


def _discard(old: Path, *, ignore_errors: bool = False) -> None:
    """What was moved aside from an export's place: a link unlinked, never what it points to; a folder deleted."""
    if old.is_symlink():
        old.unlink()
    elif old.exists():
        shutil.rmtree(old, ignore_errors=ignore_errors)


def _refuse_foreign(out: Path) -> None:
    foreign = _not_exported(out)
    if foreign:
        raise WarehouseError(
            f"`{out}` holds {foreign[0]}{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}, which no "
            "export wrote; an export replaces only an earlier export's files: give another --out"
        )


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


def _card(release: Release, written: Written, out: Path, facts: cards.CardFacts, endpoints: bool) -> Path:
    apart: list[str] = []
    configs = written.configs
    if configs is None:
        files = [path.relative_to(out).as_posix() for path in written.files]
        configs, apart = cards.configs_for(files, training=written.training)
    card = release.card
    left_out = [f"Left out (nothing to write): {what}." for what in written.left_out]
    if written.notes or facts.notes or left_out:
        card = {**card, "notes": [*card.get("notes", []), *facts.notes, *written.notes, *left_out]}
    readme = cards.render(
        card,
        facts=facts,
        configs=configs,
        apart=apart,
        run_id=release.run_id,
        queries=len(release.queries),
        content=digest(out, written.files),
        endpoints=endpoints,
    )
    return write_text(out / "README.md", readme)


Tables = Callable[[Path, list[dict], list[dict], list[dict]], list[Path]]


def _per_mode(tables: Tables, release: Release, out: Path) -> list[Path]:
    """One folder, or one per mode (``<out>/<mode>/``) when the release has several retrieval modes."""
    if len(release.modes) <= 1:
        return tables(out, release.docs, release.queries, release.qrels)
    written = []
    for mode in release.modes:
        chosen = [q for q in release.queries if q["mode"] == mode]
        written += tables(out / mode, release.docs, chosen, [r for r in release.qrels if r["mode"] == mode])
    return written


def beir(release: Release, out: Path) -> Written:
    """BEIR as InstructIR released it, a folder per mode."""
    return Written(_per_mode(_beir, release, out))


def mteb(release: Release, out: Path) -> Written:
    """mteb's retrieval layout: Parquet tables its loader reads by config, a folder per mode."""
    return Written(_per_mode(_mteb, release, out), configs=cards.mteb_configs(release.modes))


def jsonl(release: Release, out: Path) -> Written:
    """Every instance in one file with its positives, and the corpus."""
    instances, corpus = _flat(release)
    return Written([write_jsonl(out / "instances.jsonl", instances), write_jsonl(out / "corpus.jsonl", corpus)])


def parquet(release: Release, out: Path) -> Written:
    """``jsonl``'s two tables as Parquet, the Hub's own format (``hf`` for a recipe without a layout of its own)."""
    paths = [out / "instances.parquet", out / "corpus.parquet"]
    for path, rows in zip(paths, _flat(release), strict=True):
        pq.write_table(pa.Table.from_pylist(rows), path)
    return Written(paths)


# the formats every release takes; a recipe's own format of the same name takes its place (InF-IR's hf)
GENERIC: dict[str, Writer] = {"beir": beir, "mteb": mteb, "jsonl": jsonl, "parquet": parquet, "hf": parquet}


def _beir(out: Path, docs: list[dict], queries: list[dict], qrels: list[dict]) -> list[Path]:
    groups: dict[str, str] = {}
    group_of: dict[str, str] = {}
    for q in queries:
        groups.setdefault(q["group_id"], q["query"])
        group_of[q["query_id"]] = q["group_id"]
    return [
        write_jsonl(out / "corpus.jsonl", ({"_id": d["doc_id"], "title": d["title"], "text": d["text"]} for d in docs)),
        write_jsonl(
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
        write_jsonl(
            out / "only_instruction_queries.jsonl",
            (
                {"_id": q["query_id"], "text": q["instruction"], "metadata": {"origin_query": q["query"]}}
                for q in queries
            ),
        ),
        write_jsonl(
            out / "only_queries.jsonl", ({"_id": g, "text": text, "metadata": {}} for g, text in groups.items())
        ),
        write_tsv(out / "qrels" / "test.tsv", ((r["query_id"], r["doc_id"], r["score"]) for r in qrels)),
        write_tsv(
            out / "qrels" / "for_only_query_test.tsv",
            ((group_of[r["query_id"]], r["doc_id"], r["score"]) for r in qrels),
        ),
    ]


def _mteb(out: Path, docs: list[dict], queries: list[dict], qrels: list[dict]) -> list[Path]:
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


def _flat(release: Release) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The instances, each with its positives and meta, and the corpus."""
    positives: dict[tuple[str, str], list[str]] = {}
    for r in release.qrels:
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
        for q in release.queries
    ]
    corpus = [{"doc_id": d["doc_id"], "title": d["title"], "text": d["text"], "meta": d["meta"]} for d in release.docs]
    return instances, corpus


def digest(out: Path, files: list[Path]) -> str:
    """sha256 of the data files' paths and bytes: equal for identical releases, different for any other."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.relative_to(out).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return f"ifsynth release content sha256:{digest.hexdigest()}"


def qrels_files(out: Path, mode: str, rows: list[dict]) -> list[Path]:
    """One mode's qrels as the public layouts have them (``qrels_<mode>/test.tsv``) and as the config
    ``qrels_<mode>`` that the authors' loaders ask ``datasets`` for (JSON, as the folder's other configs:
    ``datasets`` reads all of a folder's configs with one file reader)."""
    return [
        write_tsv(out / f"qrels_{mode}" / "test.tsv", ((r["query_id"], r["doc_id"], r["score"]) for r in rows)),
        write_jsonl(
            out / f"qrels_{mode}.jsonl",
            ({"query-id": r["query_id"], "corpus-id": r["doc_id"], "score": r["score"]} for r in rows),
        ),
    ]


def sub_card(
    folder: Path,
    card: dict[str, Any],
    files: list[Path],
    *,
    facts: cards.CardFacts,
    queries: int,
    splits: Mapping[str, str] | None = None,
) -> Path:
    """The README.md of a folder inside an export that a loader is pointed at on its own: ``datasets`` reads the
    configs of the folder it is given, not of the export around it. ``splits`` names a config's split where a
    loader asks for one other than ``test``. It names no run (the export's own card does), so two exports of
    the same rows stay byte-identical."""
    configs, apart = cards.configs_for([path.relative_to(folder).as_posix() for path in files], training=False)
    for config in configs:
        if config["config_name"] in (splits or {}):
            config["data_files"][0]["split"] = (splits or {})[config["config_name"]]
    text = cards.render(
        card, facts=facts, configs=configs, apart=apart, run_id=None, queries=queries, content=digest(folder, files)
    )
    return write_text(folder / "README.md", text)


# Characters that str.splitlines() and some readers take for line breaks; escaped so one row stays one line.
_LINE_BREAKS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    lines = (json.dumps(row, ensure_ascii=False).translate(_LINE_BREAKS) + "\n" for row in rows)
    return write_text(path, "".join(lines))


def write_tsv(path: Path, rows: Iterable[tuple[Any, ...]]) -> Path:
    lines = ["query-id\tcorpus-id\tscore"] + ["\t".join(str(v) for v in row) for row in rows]
    return write_text(path, "\n".join(lines) + "\n")


def write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
