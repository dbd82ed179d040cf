"""The one class that opens the DuckDB file. Writes are buffered and flushed in Arrow batches by the
process that holds the file; LLM calls also go to a journal first, so a killed process loses only the
requests that were still in flight.

Batches that fill up during a stage are written by a background thread (DuckDB writes without holding the
GIL), so the event loop keeps serving answers instead of pausing for tens of milliseconds every
FLUSH_ROWS calls. The journal lines of a batch being written move to a sealed file that is deleted once
the batch is committed; opening a warehouse replays both files."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager
from datetime import datetime
from importlib import resources
from itertools import chain
from pathlib import Path
from typing import Any, BinaryIO, Literal, Self, TypeGuard

import duckdb
import pyarrow as pa

from ifsynth.schemas.errors import UnknownRun, WarehouseError, WarehouseInUse
from ifsynth.schemas.records import CallRecord, ItemRecord, ItemStatus, RunRecord, StageCounts, VerdictRecord
from ifsynth.warehouse.digests import AnsweredKeys, WrittenKeys

FLUSH_ROWS = 2000
FLUSH_SECONDS = 2.0
# A reader (`ifsynth funnel` from another shell) holds the file for the moment a query takes; a writer that
# finds it held tries again for this long before it says the file is in use.
WRITER_WAIT_SECONDS = 3.0
# Rows per row group of what a writer appends. Each checkpoint leaves the rows appended since the last one in a
# row group of their own, and a checkpoint that vacuums merges such neighbours into as many as their rows fill
# (three at most), rebuilding them uncompressed in memory: with DuckDB's 122,880 rows, a spike of 100-150 MB in
# a 20,000-seed run (bench/README.md, "The transient spike", "Seventeenth round"). A setting of the attachment,
# not of the file: other programs append as they do.
ROW_GROUP_ROWS = 8192
# A writer's checkpoints do not vacuum (merge short row groups, drop deleted rows) until it deletes rows:
# merging row groups of a wide stage's calls took 98-106 MB for a moment (a replay in plain DuckDB; up to 186
# in a run), against 25-28 MB for a checkpoint that only writes what was appended, and set a long run's peak
# (bench/README.md, "Twenty-second round"). An open that deletes (a run continued, a release replaced)
# vacuums from then on (``_delete``), as DuckDB does by default: a checkpoint vacuums only the tables changed
# since the one before, so the one that writes the deletes must. DuckDB's own threshold (a checkpoint each 16 MB
# of log) stays: at 4 MB a 20,000-seed run's peak was lower (299.5 and 297.9 MB), but each checkpoint leaves a
# row group more, and a 100,000-seed run's was 415.6 MB against 375.9 (bench/README.md, "Twenty-sixth round").
CHECKPOINTS = {"max_vacuum_tasks": 0}
# Table blocks DuckDB may keep in its buffer pool after a write before they are let go. It keeps every block
# it writes or reads up to its memory limit (80 % of RAM by default), so a run's process grew with what it wrote
# (bench/README.md, "Seventeenth round"); a later read of a block let go reads it from the file again. A
# release lets its pages' blocks go past the same (``_let_parts_go``). At 4 MB rather than 16, a 20,000-seed
# run's peak was 306.1 and 305.2 MB against 310.6 and 314.4 in one sitting ("Twenty-sixth round").
KEPT_BLOCK_BYTES = 4 << 20
# DuckDB's allocator (jemalloc) keeps what a thread freed until a task of that thread has allocated more than
# this, then hands it back: 128 MB by default, past which a writer's checkpoints and scans seldom go. At 8 MB a
# 20,000-seed run's peak was 358-368 MB against 377-392 MB in the same sitting (bench/README.md, "Eighteenth round").
ALLOCATOR = {"allocator_flush_threshold": "8MB"}
# What a cache hit reads of a call (flows/llm/gateway.py). A lookup reads the blocks of every column it returns
# in each row group it does not skip; the request, the largest column, is not among them.
ANSWER_COLUMNS = ("key", "response", "finish_reason", "logprobs")

_STR = pa.string()
_ARROW = {
    "items": pa.schema(
        [
            ("run_id", _STR),
            ("item_id", _STR),
            ("stage", _STR),
            ("kind", _STR),
            ("group_id", _STR),
            ("parent_ids", pa.list_(_STR)),
            ("payload", _STR),
            ("status", _STR),
            ("call_keys", pa.list_(_STR)),
            ("ord", pa.int32()),
        ]
    ),
    "verdicts": pa.schema(
        [
            ("run_id", _STR),
            ("item_id", _STR),
            ("stage", _STR),
            ("judge", _STR),
            ("decision", _STR),
            ("score", pa.float64()),
            ("threshold", pa.float64()),
            ("reason", _STR),
            ("call_key", _STR),
            ("created_at", pa.timestamp("us")),
            ("rule", _STR),
        ]
    ),
    "llm_calls": pa.schema(
        [
            ("call_id", _STR),
            ("key", _STR),
            ("run_id", _STR),
            ("stage", _STR),
            ("template", _STR),
            ("template_hash", _STR),
            ("base_url", _STR),
            ("model", _STR),
            ("request", _STR),
            ("response", _STR),
            ("finish_reason", _STR),
            ("prompt_tokens", pa.int32()),
            ("completion_tokens", pa.int32()),
            ("latency_ms", pa.float64()),
            ("cost", pa.float64()),
            ("http_status", pa.int32()),
            ("error", _STR),
            ("attempt", pa.int32()),
            ("created_at", pa.timestamp("us")),
            ("logprobs", _STR),
            ("failure", _STR),
        ]
    ),
}
_REQUEST = {"request"}


def skip_pandas_probe() -> None:
    """Spare this process pandas' import, a quarter of a second of CPU at its first write. pyarrow imports
    pandas the first time it converts Python objects, only to ask whether they are pandas objects, which the
    warehouse's never are; it asks once a process. Answered "no pandas" before anything imported it, pyarrow
    imports pandas only when asked for pandas itself (``to_pandas``, ``from_pandas``), and the tables here are
    built from typed arrays (``_arrow``), which never ask. For ifsynth's own processes (the CLI, a shard's)."""
    if "pandas" in sys.modules:
        return
    sys.meta_path.insert(0, _NoPandas)
    try:
        pa.array([], pa.int8())
    finally:
        sys.meta_path.remove(_NoPandas)


class _NoPandas:
    @staticmethod
    def find_spec(name: str, *_: object) -> None:
        if name == "pandas":
            raise ImportError("pandas is not wanted while pyarrow probes for it")


def _arrow(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """``rows`` as a table of ``schema``, column by column: ``pa.Table.from_pylist`` and ``pa.table(dict)``
    of lists would import pandas (``skip_pandas_probe``)."""
    return pa.Table.from_arrays([pa.array([row.get(f.name) for row in rows], f.type) for f in schema], schema=schema)


def _count(cursor: duckdb.DuckDBPyConnection, statement: str, params: list[Any] | None = None) -> int:
    """The one number a statement returns as its one row: the rows an ``INSERT``, ``UPDATE`` or ``DELETE``
    changed, or a ``SELECT count(...)``."""
    return int(cursor.execute(statement, params or []).fetchall()[0][0])


def _insert(cursor: duckdb.DuckDBPyConnection, statement: str, data: pa.Table, params: list[Any] | None = None) -> int:
    """``statement``, which reads ``data`` as the table ``incoming``; the rows it changed. DuckDB finds it among
    this frame's locals (its replacement scan), as the statement runs: a table registered instead is a view,
    and a view dropped inside a transaction keeps its table alive until the transaction ends, so a release's
    transaction held every page it wrote (35 MB of Arrow at 100,000 seeds; bench/README.md, "Twenty-fifth
    round")."""
    incoming = data  # noqa: F841 (read by DuckDB, by its name)
    # not through ``_count``: DuckDB looks for ``incoming`` in the frame that executes, and no other
    return int(cursor.execute(statement, params or []).fetchall()[0][0])


@contextlib.contextmanager
def _transaction(cursor: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """The block's statements in one transaction: committed if it ends, rolled back if it raises."""
    cursor.execute("BEGIN")
    try:
        yield
        cursor.execute("COMMIT")
    except BaseException:
        # a COMMIT that failed has rolled back; one that ran out of memory may have invalidated the database
        with contextlib.suppress(duckdb.TransactionException, duckdb.FatalException):
            cursor.execute("ROLLBACK")
        raise


def _one_column(name: str, values: Sequence[str]) -> pa.Table:
    return pa.Table.from_arrays([pa.array(values, _STR)], names=[name])


# An export's query order: by group, then by the instruction's number (`q12_3` before `q12_10`).
_QUERY_ORDER = "ORDER BY q.group_id, TRY_CAST(string_split(q.query_id, '_')[-1] AS INTEGER), q.query_id"
# The newest human decision per (item, stage) of a run, as a `people` table.
_PEOPLE = (
    "WITH people AS (SELECT item_id, stage, decision FROM verdicts WHERE run_id = ? AND judge LIKE 'human%' "
    "QUALIFY row_number() OVER (PARTITION BY item_id, stage ORDER BY created_at DESC, judge) = 1)"
)
# The key columns of the tables without a primary key (``ddl.sql``): items and verdicts are replaced by key
# (``WrittenKeys``), a call is added once.
_REPLACED = {"items": ("run_id", "item_id"), "verdicts": ("run_id", "item_id", "stage", "judge")}
_KEYS = {**_REPLACED, "llm_calls": ("call_id",)}


def _same_key(table: str, source: str) -> str:
    """The condition that the row ``t`` of ``table`` has the key of the row ``source`` names."""
    return " AND ".join(f"t.{c} = {source}.{c}" for c in _KEYS[table])


def _absent(table: str, source: str) -> str:
    """The condition that the row ``source`` names has no row of its key in ``table`` yet."""
    return f"NOT EXISTS (SELECT 1 FROM {table} t WHERE {_same_key(table, source)})"


def _out_of_space(exc: BaseException) -> bool:
    """Whether a write failed for want of space: a full disk, a quota, or a file past ``ulimit -f``."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    said = str(exc)
    return isinstance(exc, duckdb.Error) and any(
        os.strerror(code) in said for code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    )


def _out_of_memory(exc: BaseException) -> TypeGuard[duckdb.Error]:
    """Whether DuckDB ran out of memory under its cap: as a statement runs (its own exception), or as a commit
    or the replay of its write-ahead log at the open does (a transaction error that says it could not
    allocate)."""
    if isinstance(exc, duckdb.OutOfMemoryException):
        return True
    return isinstance(exc, duckdb.TransactionException | duckdb.FatalException) and bool(
        re.search(r"could not allocate|failed to allocate|failed to pin|Out of Memory", str(exc))
    )


def _row(record: ItemRecord | VerdictRecord | CallRecord, **serialized: str) -> dict[str, Any]:
    """A record as a row; JSON fields serialized, or taken as given in ``serialized``."""
    row = record.model_dump(exclude=set(serialized))
    for name in ("payload", "request", "logprobs"):
        if name in row and row[name] is not None:
            row[name] = json.dumps(row[name], ensure_ascii=False, sort_keys=True)
    row.update(serialized)
    return row


def _strings(*names: str) -> list[tuple[str, pa.DataType]]:
    return [(name, pa.string()) for name in names]


# The columns of a release, generated or imported alike (meta is a JSON object as text).
RELEASE_COLUMNS = {
    "release_docs": pa.schema(_strings("doc_id", "title", "text", "meta")),
    "release_queries": pa.schema(_strings("mode", "query_id", "group_id", "query", "instruction", "meta")),
    "release_qrels": pa.schema([*_strings("mode", "query_id", "doc_id"), ("score", pa.int32())]),
    "release_top_ranked": pa.schema(_strings("mode", "query_id", "doc_id")),
}


class _InFlight:
    """The statements under way on a warehouse's cursors, counted so that one can be run alone."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running = 0
        self._alone = False

    @contextlib.contextmanager
    def one(self) -> Iterator[None]:
        """A statement under way while the block runs; it waits while one runs alone."""
        with self._changed:
            self._changed.wait_for(lambda: not self._alone)
            self._running += 1
        try:
            yield
        finally:
            with self._changed:
                self._running -= 1

    @contextlib.contextmanager
    def alone(self) -> Iterator[bool]:
        """Whether no statement is under way; if none is, none starts until the block ends. It never waits:
        a thread inside ``one`` may be the one asking."""
        alone = False
        try:
            with self._changed:
                alone = self._running == 0 and not self._alone
                if alone:
                    self._alone = True
            yield alone
        finally:
            if alone:
                with self._changed:
                    self._alone = False
                    self._changed.notify_all()


class ReleaseWriter:
    """A release being written (``Warehouse.writing_release``): rows added a part at a time, then its card."""

    def __init__(
        self,
        cursor: duckdb.DuckDBPyConnection,
        name: str,
        about: tuple[Any, ...],
        guard: Callable[[], AbstractContextManager[Any]],
        let_go: Callable[[], None],
    ) -> None:
        self._cursor, self._name, self._about, self._guard, self._let_go = cursor, name, about, guard, let_go
        self.finished = False

    def add(
        self,
        *,
        docs: Sequence[Mapping[str, Any]] = (),
        queries: Sequence[Mapping[str, Any]] = (),
        qrels: Sequence[Mapping[str, Any]] = (),
        top_ranked: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """Rows as generated or imported (``RELEASE_COLUMNS``)."""
        self._refuse_if_finished()
        rows = {"release_docs": docs, "release_queries": queries, "release_qrels": qrels,
                "release_top_ranked": top_ranked}  # fmt: skip
        for table, part in rows.items():
            if not part:
                continue
            data = _arrow(part, RELEASE_COLUMNS[table])
            columns = ", ".join(data.column_names)
            with self._guard():
                statement = f"INSERT INTO {table} (release, {columns}) SELECT ?, {columns} FROM incoming"
                _insert(self._cursor, statement, data, [self._name])
        self._let_go()

    def query_groups(self) -> int:
        """How many groups the queries added so far make: counted in the file, not held by the caller."""
        self._refuse_if_finished()
        with self._guard():
            return _count(
                self._cursor, "SELECT count(DISTINCT group_id) FROM release_queries WHERE release = ?", [self._name]
            )

    def finish(self, card: dict[str, Any]) -> None:
        """The card, and the commit: the release replaces the one of its name."""
        self._refuse_if_finished()
        with self._guard():
            self._cursor.execute(
                "INSERT INTO releases VALUES (?, ?, ?, ?, ?, ?)",
                [self._name, *self._about, json.dumps(card, sort_keys=True), datetime.now()],
            )
            self._cursor.execute("COMMIT")
        self.finished = True

    def _refuse_if_finished(self) -> None:
        """After the commit, a row would be written on its own, outside the release."""
        if self.finished:
            raise RuntimeError(f"release `{self._name}` is finished: its rows are committed")


class Warehouse:
    """Runs, items with lineage, verdicts, the LLM call cache and releases, in one DuckDB file."""

    def __init__(
        self, path: str | Path, *, read_only: bool = False, memory_limit: str | None = None, create: bool = True
    ) -> None:
        """``memory_limit`` caps DuckDB's buffer pool (``512MB``, ``2GB``); by default DuckDB takes up to 80 %
        of the machine's memory and keeps the blocks a run writes, so a large run's process grows with its
        warehouse. A writer that is not ``create`` refuses a missing file, as a reader does: a mistyped path
        is said, not made into an empty warehouse."""
        self.path = Path(path)
        self.read_only = read_only
        if (read_only or not create) and not self.path.exists():
            raise WarehouseError(f"no warehouse at `{self.path}`; `ifsynth run` creates one")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._memory_limit = memory_limit or None  # an empty IFSYNTH_MEMORY_LIMIT is none
        config: dict[str, Any] = {"memory_limit": self._memory_limit} if self._memory_limit else {}
        self._in_flight = _InFlight()
        self._db = self._connect(config, time.monotonic() + (0.0 if read_only else WRITER_WAIT_SECONDS))
        self._local = threading.local()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._cursors_lock = threading.Lock()
        self._lock = threading.RLock()
        self._buffers: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {name: {} for name in _ARROW}
        self._buffered_answers: dict[str, dict[str, Any]] = {}  # key -> first buffered successful call
        self._answered: AnsweredKeys | None = None  # which keys the file may answer (``cached``), once read
        self._written = WrittenKeys(_REPLACED)  # which items and verdicts a write replaces; one write at a time
        self._retrying = False  # a batch was put back after a failure, maybe after its commit: the next write checks
        self._vacuums = False  # rows were deleted: checkpoints vacuum from then on (``_delete``)
        # The batch a background thread is writing, and its answers (still served from memory meanwhile).
        self._writer: ThreadPoolExecutor | None = None
        self._writing: Future[None] | None = None
        self._writing_rows: dict[str, list[dict[str, Any]]] = {}
        self._writing_answers: dict[str, dict[str, Any]] = {}
        self._last_flush = time.monotonic()
        self._journal_path = self.path.with_name(self.path.name + ".journal")
        self._sealed_path = self.path.with_name(self.path.name + ".journal.sealed")
        self._journal: BinaryIO | None = None
        self._columns: dict[tuple[str, str], bool] = {}
        if read_only and not self._made():
            self._db.close()
            raise WarehouseError(
                f"`{self.path}` holds no ifsynth warehouse: its tables were never made (a run stopped as it created "
                "the file, or the path names another DuckDB file); `ifsynth run` makes them"
            )
        if not read_only:
            try:
                # one transaction: one commit of DuckDB's log, not one a statement (2-14 ms of a new file's
                # open), and a file with every table or none
                self._db.execute("BEGIN TRANSACTION")
                self._db.execute(resources.files("ifsynth.warehouse").joinpath("ddl.sql").read_text())
                self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', '1')")
                self._db.execute("COMMIT")
                self._replay_journal()
                # A run still marked running cannot be alive: this process holds the only write lock. It is
                # recorded as readers showed it (``shown_status``), not as a stop someone asked for.
                self._db.execute(
                    "UPDATE runs SET status = 'died', error = 'its process ended without recording how' "
                    "WHERE status = 'running'"
                )
            except duckdb.Error as exc:
                self._db.close()
                raise self._explained(exc) from exc
            self._journal = self._open_journal()

    def _made(self) -> bool:
        """Whether the file's tables were all made: the schema's version is written after the last of them.
        One query on every reader's open; a file without even the ``meta`` table answers it with an error."""
        try:
            return self._db.execute("SELECT 1 FROM meta WHERE key = 'schema_version'").fetchone() is not None
        except duckdb.CatalogException:
            return False

    # -- lifecycle ---------------------------------------------------------------------------------

    def _connect(self, config: dict[str, Any], until: float) -> duckdb.DuckDBPyConnection:
        """DuckDB's connection; a lock held by another process is waited out until ``until``."""
        while True:
            try:
                return self._attach(config)
            except (duckdb.ParserException, duckdb.InvalidInputException) as exc:
                if not config:
                    raise
                raise WarehouseError(
                    f"memory limit `{config['memory_limit']}` not understood ({exc}); give a size such as 2GB"
                ) from None
            except duckdb.OutOfMemoryException as exc:  # a memory limit too small to open the file at all
                raise self._explained(exc) from None
            except duckdb.TransactionException as exc:  # the replay of the write-ahead log a kill left
                if not _out_of_memory(exc):
                    raise
                raise self._explained(exc) from None
            except duckdb.ResourceInUseException:  # DuckDB shares no attached file between two opens
                raise WarehouseError(
                    f"warehouse `{self.path}` is open already in this process; close it first"
                ) from None
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower():
                    raise WarehouseError(f"cannot open warehouse `{self.path}`: {exc}") from exc
                if time.monotonic() < until:
                    time.sleep(0.1)
                    continue
                pid = re.search(r"PID (\d+)", str(exc))
                raise WarehouseInUse(str(self.path), f"pid {pid.group(1)}" if pid else "unknown pid") from None

    def _attach(self, config: dict[str, Any]) -> duckdb.DuckDBPyConnection:
        """The file attached to a database of its own settings, the one way to give it a row group size."""
        # spilled blocks go beside the file, as they do for a file opened directly (not to ./.tmp)
        db = duckdb.connect(config={**config, "temp_directory": f"{self.path}.tmp", **ALLOCATOR, **CHECKPOINTS})
        try:
            options = "READ_ONLY" if self.read_only else f"ROW_GROUP_SIZE {ROW_GROUP_ROWS}"
            db.execute(f"ATTACH ? AS warehouse ({options})", [str(self.path)])
            db.execute("USE warehouse")
        except BaseException:
            db.close()
            raise
        return db

    def __enter__(self) -> Self:
        return self

    def __exit__(self, _kind: object, error: BaseException | None, _trace: object) -> None:
        """Close; a DuckDB error that ended the block, or that closing met (its last write), becomes one line
        that says what to do about it."""
        try:
            self.close()
        except duckdb.Error as exc:
            if error is None:
                raise self._explained(exc) from exc
            # else the error that ended the block is the one to tell; what closing could not write is journaled
        if isinstance(error, duckdb.Error) and (
            not isinstance(error, duckdb.TransactionException) or _out_of_memory(error)
        ):
            raise self._explained(error) from error

    def _explained(self, error: duckdb.Error) -> WarehouseError:
        """A DuckDB error a user can act on, said so: a memory limit too small, a full disk, a damaged file."""
        said = " ".join(re.split(r"\s+Possible solutions", str(error))[0].split())[:200]
        if _out_of_memory(error):
            kept = "" if self.read_only else "; the answers received are kept in the journal"
            return WarehouseError(
                f"the warehouse ran out of memory ({said}): give --memory-limit a larger size, or leave it unset "
                f"(DuckDB then takes up to 80% of RAM), and run the same command again{kept}"
            )
        if _out_of_space(error):
            return self._no_space()
        if isinstance(error, duckdb.IOException | duckdb.SerializationException | duckdb.InternalException):
            return WarehouseError(
                f"warehouse `{self.path}` cannot be read ({said}): it is damaged (truncated, say) or another "
                "program's file; restore it from a copy, or pass --warehouse with another file"
            )
        return WarehouseError(f"warehouse `{self.path}`: {said}")

    def close(self) -> None:
        try:
            if not self.read_only:
                self.flush()  # if it fails (a full disk), what it could not write stays in the journal
        finally:
            if self._writer is not None:
                self._writer.shutdown()
                self._writer = None
            if self._journal is not None:
                self._journal.close()
                self._journal = None
            for cursor in self._cursors:  # cursors of worker threads too, so none outlives the database
                cursor.close()
            self._cursors.clear()
            self._db.close()

    def _delete(
        self, cursor: duckdb.DuckDBPyConnection, statement: str, params: list[Any], data: pa.Table | None = None
    ) -> None:
        """A ``DELETE`` (of the rows in ``data``, as ``incoming``), in a transaction: one that deletes rows has
        this open's checkpoints vacuum from then on, set before the commit that may checkpoint the deletes
        (``CHECKPOINTS``). Two threads may both set it, and a transaction rolled back leaves it set: either
        way only as DuckDB's default would."""
        deleted = _count(cursor, statement, params) if data is None else _insert(cursor, statement, data, params)
        if deleted and not self._vacuums:
            cursor.execute("RESET max_vacuum_tasks")
            self._vacuums = True

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            cursor = self._local.cursor = self._db.cursor()
            cursor.execute("USE warehouse")  # a cursor starts in the attaching database
            with self._cursors_lock:  # not the write lock: flush() holds that while it waits for the writer
                self._cursors.append(cursor)
        return cursor

    @contextlib.contextmanager
    def _statement(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """This thread's cursor, counted while it is in use, so that ``_let_blocks_go`` runs alone."""
        with self._in_flight.one():
            yield self._cursor()

    def _sql(
        self, query: str, params: Sequence[Any] | None = None, *, tables: dict[str, pa.Table] | None = None
    ) -> list[dict[str, Any]]:
        """Run a read query and return its rows as dicts; ``tables`` are Arrow tables it may join."""
        with self._statement() as cursor:
            for name, table in (tables or {}).items():
                cursor.register(name, table)
            try:
                result = cursor.execute(query, params or [])
                names = [column[0] for column in result.description or []]
                return [dict(zip(names, row, strict=True)) for row in result.fetchall()]
            finally:
                for name in tables or {}:
                    cursor.unregister(name)

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """A read query of your own, for tests and ad-hoc inspection: ifsynth's code asks the named methods,
        which keep SQL in this package and the file's shape in one place. Only a SELECT is taken, so nothing
        goes around the buffered writes."""
        with self._statement() as cursor:
            statements = cursor.extract_statements(sql)
        if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
            raise WarehouseError("Warehouse.query takes one SELECT")
        return self._sql(sql, params)

    def checkpoint(self) -> None:
        """Write everything, buffered rows and DuckDB's write-ahead log alike, into the file itself."""
        self.flush()
        self._execute("CHECKPOINT")

    def _execute(
        self, query: str, params: Sequence[Any] | None = None, *, tables: dict[str, pa.Table] | None = None
    ) -> None:
        with self._lock:
            self._sql(query, params, tables=tables)

    # -- buffered writes ---------------------------------------------------------------------------

    def add_call(self, call: CallRecord, *, request_json: str | None = None) -> None:
        """Journal first (survives a kill), then buffer for the next batch. ``request_json``, the request
        already serialized by the caller, spares serializing it again (the gateway's hot path)."""
        if request_json is None:
            line, row = call.model_dump_json(), _row(call)
        else:  # splice the serialized request in: serializing and copying it again costs more than the rest
            line = f'{call.model_dump_json(exclude=_REQUEST)[:-1]},"request":{request_json}}}'
            row = {**call.__dict__, "request": request_json}
            if row["logprobs"] is not None:
                row["logprobs"] = json.dumps(row["logprobs"], ensure_ascii=False, sort_keys=True)
        with self._lock:
            assert self._journal is not None, "warehouse opened read-only"
            try:
                self._journal.write(f"{line}\n".encode())  # unbuffered: one write(2), in the file when this returns
            except OSError as exc:
                if _out_of_space(exc):
                    raise self._no_space() from exc
                raise
            self._buffer("llm_calls", [row])
            if call.error is None:
                self._buffered_answers.setdefault(call.key, row)
                if self._answered is not None:
                    self._answered.add([(call.key, call.created_at)])

    def add_items(self, items: Sequence[ItemRecord]) -> None:
        with self._lock:
            self._buffer("items", [_row(item) for item in items])

    def add_verdicts(self, verdicts: Sequence[VerdictRecord]) -> None:
        with self._lock:
            self._buffer("verdicts", [_row(verdict) for verdict in verdicts])

    def _buffer(self, table: str, rows: list[dict[str, Any]]) -> None:
        buffer = self._buffers[table]
        for row in rows:
            buffer[tuple(row[k] for k in _KEYS[table])] = row
        pending = sum(len(b) for b in self._buffers.values())
        if pending >= FLUSH_ROWS or time.monotonic() - self._last_flush > FLUSH_SECONDS:
            self._flush_behind()

    def _flush_behind(self) -> None:
        """Hand the buffered rows to the background writer, unless it is still busy with the last batch
        (then they go with the next one)."""
        if self._writing is not None:
            if not self._writing.done():
                return
            self._finish_writing()
        self._last_flush = time.monotonic()
        self._writing_rows = {table: list(buffer.values()) for table, buffer in self._buffers.items() if buffer}
        if not self._writing_rows:
            return
        for buffer in self._buffers.values():
            buffer.clear()
        self._writing_answers, self._buffered_answers = self._buffered_answers, {}
        if self._journal is not None:  # the batch's journal lines: kept until the batch is committed
            self._journal.close()
            os.replace(self._journal_path, self._sealed_path)
            self._journal = self._open_journal()
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="warehouse-writer")
        self._writing = self._writer.submit(self._write, self._writing_rows)

    def _write(self, batch: dict[str, list[dict[str, Any]]]) -> None:
        """One transaction. Whatever raises, before the commit or after it, the caller puts the batch back
        (``_put_back``), which has the next write check what the file holds."""
        retrying = self._retrying
        made: dict[str, dict[str, set[int]]] = {}  # the digests of the rows replaced by key, noted once committed
        with self._statement() as cursor:
            try:
                with _transaction(cursor):
                    for table, rows in batch.items():
                        if table in _REPLACED:
                            present, made[table] = self._written.present(cursor, table, rows)
                            if present:
                                keys = _arrow(present, pa.schema(_strings(*_KEYS[table])))
                                statement = f"DELETE FROM {table} t USING incoming p WHERE {_same_key(table, 'p')}"
                                self._delete(cursor, statement, [], keys)
                            self._append(cursor, table, rows)
                        else:  # calls put back may have been committed (an interrupt after the commit)
                            self._append(cursor, table, rows, new_only=retrying)
            except BaseException as exc:
                if _out_of_space(exc):
                    raise self._no_space() from exc
                if _out_of_memory(exc):  # rows kept, as for a full disk: a rerun writes them
                    raise self._explained(exc) from exc
                raise
        self._retrying = False
        for table, digests in made.items():
            self._written.add(table, digests)
        # housekeeping once the batch is committed: an error in it must not put the batch back (a database
        # that is really broken fails the next statement), and the next commit tries again
        with contextlib.suppress(duckdb.Error):
            self._let_blocks_go(past=KEPT_BLOCK_BYTES)

    def _let_blocks_go(self, *, past: int = 0, tags: tuple[str, ...] = ("BASE_TABLE",)) -> None:
        """Have DuckDB let go of the table blocks it keeps, if those of ``tags`` are ``past`` bytes or more. It
        has no statement for that; lowering its memory limit evicts every block it can, and when what stays (the
        tables' indexes, say) is more than the new limit, the limit is left as it was. It is done with no other
        statement of this warehouse under way, so none can meet the lowered limit, or not at all this time."""
        with self._statement() as cursor:
            sql = "SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() WHERE list_contains(?, tag)"
            if cursor.execute(sql, [list(tags)]).fetchall()[0][0] < past:
                return
        with self._in_flight.alone() as alone:
            if not alone:
                return
            cursor = self._cursor()
            lowered = True
            try:
                cursor.execute("SET memory_limit = '1MB'")
            except duckdb.OutOfMemoryException:
                lowered = False  # the blocks are evicted and the limit left as it was
            finally:
                if lowered:  # it held all it had in 1 MB (or the SET failed otherwise): the limit goes back
                    if self._memory_limit is None:
                        cursor.execute("RESET memory_limit")
                    else:
                        cursor.execute("SET memory_limit = ?", [self._memory_limit])

    def _no_space(self) -> WarehouseError:
        """What a write that found the disk full (or past ``ulimit -f``) says: what to free, and that nothing
        received is lost."""
        folder = self.path.resolve().parent
        return WarehouseError(
            f"no space left to write warehouse `{self.path}`: free space on the disk of {folder} (`df {folder}`; "
            "it holds the warehouse, its .wal and .journal files and its .tmp folder) or raise `ulimit -f`, then run "
            "the same command again; the answers received are kept in the journal"
        )

    def _finish_writing(self) -> None:
        """Settle the background writer's finished batch. A failed batch is put back as it was (rows,
        answers, journal lines) before its error is raised, so nothing is lost and a later flush retries."""
        assert self._writing is not None
        error = self._writing.exception()
        if error is None:
            self._sealed_path.unlink(missing_ok=True)
            self._writing, self._writing_rows, self._writing_answers = None, {}, {}
            return
        # put back before the batch is let go: an interrupt in between then leaves it to be put back again
        self._put_back(self._writing_rows, self._writing_answers)
        if self._journal is not None and self._sealed_path.exists():
            self._journal.write(self._sealed_path.read_bytes())
            self._sealed_path.unlink()
        self._writing, self._writing_rows, self._writing_answers = None, {}, {}
        raise error

    def _put_back(self, batch: dict[str, list[dict[str, Any]]], answers: dict[str, dict[str, Any]]) -> None:
        """A batch whose write raised, back in the buffers under the rows buffered since. It may have been
        committed before it raised (an interrupt after the commit), so the next write reads which rows the file
        holds instead of trusting what it knew."""
        self._written.forget()
        self._retrying = True
        for table, rows in batch.items():
            buffer = self._buffers[table]
            for row in rows:
                buffer.setdefault(tuple(row[k] for k in _KEYS[table]), row)
        for key, row in answers.items():
            self._buffered_answers.setdefault(key, row)

    def flush(self) -> None:
        """Write every buffered row in one transaction, then empty the journal (after the background
        writer, if it is busy, has finished)."""
        with self._lock:
            if self._writing is not None:
                self._finish_writing()  # waits for the writer, which never takes this lock
            self._last_flush = time.monotonic()
            if not any(self._buffers.values()):
                return
            batch = {table: list(buffer.values()) for table, buffer in self._buffers.items() if buffer}
            answers = self._buffered_answers
            try:  # the buffers emptied inside: an interrupt as they are emptied puts back what they held
                self._buffered_answers = {}
                for buffer in self._buffers.values():
                    buffer.clear()
                self._write(batch)
            except BaseException:
                self._put_back(batch, answers)
                raise
            if self._journal is not None:
                self._journal.truncate(0)
                self._journal.seek(0)

    def drain(self) -> None:
        """Have the background writer write the rows buffered so far, and wait for it here without the lock,
        so the threads that add rows meanwhile are not held: a flush that follows writes only what they
        added. A stage that closes while others run drains the warehouse from a worker thread first, and the
        event loop goes on serving requests while its rows are written (``flows/run/pipeline.py``)."""
        for _ in range(2):  # the batch under way, then the rows buffered while it was written
            with self._lock:
                self._flush_behind()
                writing = self._writing
            if writing is None:
                return
            wait([writing])

    @staticmethod
    def _append(
        cursor: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, Any]], *, new_only: bool = False
    ) -> None:
        """Rows added to ``table``: all of them, or with ``new_only`` those whose key it does not hold."""
        columns = ", ".join(_ARROW[table].names)
        absent = f"WHERE {_absent(table, 'incoming')}" if new_only else ""
        statement = f"INSERT INTO {table} ({columns}) SELECT {columns} FROM incoming {absent}"
        _insert(cursor, statement, _arrow(rows, _ARROW[table]))

    def _open_journal(self) -> BinaryIO:
        return self._journal_path.open("ab", buffering=0)

    def _replay_journal(self) -> None:
        """Calls a killed process journaled but had not committed: those of the batch the background
        writer was writing (the sealed file), and those still buffered (the journal). A line that cannot be
        read (cut short by the kill, or damaged: bytes that are not UTF-8) is kept aside in
        ``<warehouse>.journal.unreadable`` instead of blocking every later open."""
        paths = [path for path in (self._sealed_path, self._journal_path) if path.exists()]
        rows: list[dict[str, Any]] = []
        unreadable: list[bytes] = []
        for path in paths:
            for line in path.read_bytes().splitlines():
                try:
                    rows.append(_row(CallRecord.model_validate_json(line)))
                except ValueError:
                    unreadable.append(line)
        if unreadable:
            with self.path.with_name(self.path.name + ".journal.unreadable").open("ab") as kept:
                kept.write(b"".join(line + b"\n" for line in unreadable))
        if rows:  # a call of a batch committed before the kill is in the file already
            unique = {row["call_id"]: row for row in rows}
            self._append(self._db, "llm_calls", list(unique.values()), new_only=True)
        for path in paths:
            path.unlink()

    # -- the cache ---------------------------------------------------------------------------------

    def cached(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Successful answers for these request keys (their ``ANSWER_COLUMNS``), from the file and from the
        unflushed buffer."""
        found: dict[str, dict[str, Any]] = {}
        wanted = set(keys)
        with self._lock:
            for key in wanted:
                if (row := self._buffered_answers.get(key) or self._writing_answers.get(key)) is not None:
                    found[key] = {column: row[column] for column in ANSWER_COLUMNS}
        missing = [k for k in wanted if k not in found]
        firsts: dict[str, datetime | None] = {}
        if missing:
            with self._lock:
                if self._answered is None:  # the file's answers, and those still on their way to it
                    with self._statement() as cursor:
                        self._answered = AnsweredKeys.read(cursor)
                    # every answer still on its way, not only each key's first: the earliest is the one noted
                    calls = chain(self._buffers["llm_calls"].values(), self._writing_rows.get("llm_calls", []))
                    self._answered.add((row["key"], row["created_at"]) for row in calls if row["error"] is None)
                firsts = self._answered.held(missing)
        if firsts:
            found.update(self._first_answers(firsts))
        return found

    def _first_answers(self, firsts: Mapping[str, datetime | None]) -> dict[str, dict[str, Any]]:
        """Each key's first answer in the file, read first where its noted time says: a row of a key at the
        earliest time noted under its 64 bits is its first answer (any earlier would have been noted). The read
        asks for those times alone, as constants, which DuckDB checks against each row group's range of times:
        a batch of a few keys reads a few row groups however long the run (one of hundreds reads them all, no
        slower than a join), and only their rows at those times. Asked for the keys as well, DuckDB read the key
        column of every row group it did not skip, twice the memory of this read on a 20,000-seed run's file
        (bench/README.md, "Twenty-sixth round"). Rows of other keys at these times come back too and are
        dropped here; calls are stamped as they are answered, so they are few. The keys not found so (a time
        noted for another key of the same 64 bits, a first answer deleted since, a key that is not hex) are
        read from their earliest time on."""
        timed = {key: at for key, at in firsts.items() if at is not None}
        found: dict[str, dict[str, Any]] = {}
        if timed:
            rows = self._sql(
                f"SELECT {', '.join(ANSWER_COLUMNS)}, created_at FROM llm_calls "
                "WHERE error IS NULL AND list_contains(?::TIMESTAMP[], created_at)",
                [sorted(set(timed.values()))],
            )
            for row in rows:  # each key's row at its own time, not another key's or at another key's time
                if row.pop("created_at") == timed.get(row["key"]):
                    found.setdefault(row["key"], row)
        rest = [key for key in firsts if key not in found]
        if rest:
            bounds = [firsts[key] for key in rest]
            since = None if None in bounds else min(b for b in bounds if b is not None)
            bounded = "" if since is None else " AND created_at >= ?"
            rows = self._sql(
                f"SELECT {', '.join(ANSWER_COLUMNS)} FROM llm_calls "
                f"WHERE error IS NULL AND key IN (SELECT unnest(?::VARCHAR[])){bounded} ORDER BY created_at",
                [rest] if since is None else [rest, since],
            )
            for row in rows:  # the first answer to a key is its answer
                found.setdefault(row["key"], row)
        return found

    # -- batches -----------------------------------------------------------------------------------

    def pending_batch(self, run_id: str, base_url: str, request_set: str) -> str | None:
        """The batch an earlier invocation submitted for exactly these requests, if it is still to be ingested."""
        rows = self._sql(
            "SELECT batch_id FROM llm_batches WHERE run_id = ? AND base_url = ? AND request_set = ? "
            "AND status = 'submitted' ORDER BY created_at DESC LIMIT 1",
            [run_id, base_url, request_set],
        )
        return rows[0]["batch_id"] if rows else None

    def add_batch(self, batch_id: str, run_id: str, stage: str, base_url: str, request_set: str, n: int) -> None:
        """Recorded before polling starts, so a run stopped while it waits polls the same batch when rerun."""
        self._execute(
            "INSERT INTO llm_batches VALUES (?, ?, ?, ?, ?, ?, 'submitted', ?)",
            [batch_id, run_id, stage, base_url, request_set, n, datetime.now()],
        )

    def set_batch_status(self, batch_id: str, status: Literal["ingested", "failed"]) -> None:
        self._execute("UPDATE llm_batches SET status = ? WHERE batch_id = ?", [status, batch_id])

    # -- runs --------------------------------------------------------------------------------------

    def start_run(self, run: RunRecord) -> None:
        self._execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run.run_id,
                run.name,
                run.recipe,
                run.fingerprint,
                json.dumps(run.config, sort_keys=True),
                run.code_version,
                "running",
                run.started_at,
                None,
                None,
            ],
        )

    def resumable_run(self, fingerprint: str) -> str | None:
        """The newest unfinished run with this fingerprint: running it again continues it."""
        rows = self._sql(
            "SELECT run_id FROM runs WHERE fingerprint = ? "
            "AND status IN ('pending', 'interrupted', 'failed', 'stopped', 'died') ORDER BY started_at DESC LIMIT 1",
            [fingerprint],
        )
        return rows[0]["run_id"] if rows else None

    def completed_run(self, fingerprint: str) -> str | None:
        """The newest completed run with this fingerprint (a shard a rerun need not run again)."""
        rows = self._sql(
            "SELECT run_id FROM runs WHERE fingerprint = ? AND status = 'completed' ORDER BY started_at DESC LIMIT 1",
            [fingerprint],
        )
        return rows[0]["run_id"] if rows else None

    def absorb(self, path: str | Path) -> None:
        """Copy another warehouse's runs, items, verdicts, LLM calls and stage counts into this one (a shard's,
        at the merge). Rows this one already holds stay as they are, so absorbing twice adds nothing."""
        quoted = str(Path(path).resolve()).replace("'", "''")
        with self._lock:
            self.flush()  # under the lock: no batch is written behind while the shard's rows come in
            self._answered = None  # the shard's answers are this one's now: read again when asked
            self._written.forget()
            with self._statement() as cursor:
                cursor.execute(f"ATTACH '{quoted}' AS shard (READ_ONLY)")
                try:
                    for table in ("runs", "stage_counts"):
                        cursor.execute(f"INSERT OR IGNORE INTO {table} BY NAME SELECT * FROM shard.{table}")
                    for table in _KEYS:  # without a primary key: the rows not here yet
                        cursor.execute(
                            f"INSERT INTO {table} BY NAME SELECT * FROM shard.{table} s WHERE {_absent(table, 's')}"
                        )
                finally:
                    cursor.execute("DETACH shard")

    def run_named(self, name: str) -> str | None:
        """The id of a run named ``name`` (its release will carry that name), if any."""
        rows = self._sql("SELECT run_id FROM runs WHERE name = ? LIMIT 1", [name])
        return rows[0]["run_id"] if rows else None

    def name_taken(self, name: str, fingerprint: str) -> str | None:
        """The run that already carries ``name`` with another fingerprint (another config), if any."""
        rows = self._sql("SELECT run_id FROM runs WHERE name = ? AND fingerprint <> ?", [name, fingerprint])
        return rows[0]["run_id"] if rows else None

    def common_call_error(self, run_id: str) -> str | None:
        """The error the run's failed calls gave most often, with its count."""
        self.flush()
        rows = self._sql(
            "SELECT error, count(*) AS n FROM llm_calls WHERE run_id = ? AND error IS NOT NULL "
            "GROUP BY error ORDER BY n DESC, error LIMIT 1",
            [run_id],
        )
        return f"{rows[0]['error'][:200]} (x{rows[0]['n']})" if rows else None

    def finish_run(self, run_id: str, status: str, error: str | None = None) -> None:
        """Record how a run ended. A run that did not complete is recorded so even when its buffered rows
        cannot be written now (a full disk): they stay in the journal, replayed at the next open."""
        try:
            self.flush()
        except WarehouseError:
            if status == "completed":
                raise
        self._execute(
            "UPDATE runs SET status = ?, ended_at = ?, error = ? WHERE run_id = ?",
            [status, datetime.now(), error, run_id],
        )

    def runs_summary(self) -> list[dict[str, Any]]:
        """Every run, oldest first, with the queries its release kept and what its calls cost."""
        return self._sql(
            "SELECT r.run_id, r.name, r.recipe, r.status, r.started_at, r.ended_at, "
            "(SELECT count(DISTINCT q.query_id) FROM release_queries q JOIN releases s ON q.release = s.name "
            " WHERE s.run_id = r.run_id) AS accepted, "
            "(SELECT sum(c.cost) FROM llm_calls c WHERE c.run_id = r.run_id) AS cost_usd "
            "FROM runs r ORDER BY r.started_at"
        )

    def latest_run_with(self, item_id: str) -> str | None:
        """The newest run that holds this item."""
        rows = self._sql(
            "SELECT i.run_id FROM items i JOIN runs r USING (run_id) WHERE i.item_id = ? "
            "ORDER BY r.started_at DESC LIMIT 1",
            [item_id],
        )
        return rows[0]["run_id"] if rows else None

    def run(self, ref: str | None = None) -> RunRecord:
        """A run by id or name; the newest run when ``ref`` is None."""
        if ref is None:
            rows = self._sql("SELECT * FROM runs ORDER BY started_at DESC LIMIT 1")
        else:
            rows = self._sql(
                "SELECT * FROM runs WHERE run_id = ? OR name = ? ORDER BY started_at DESC LIMIT 1", [ref, ref]
            )
        if not rows:
            raise UnknownRun(ref)
        row = rows[0]
        row["config"] = json.loads(row["config"])
        row["status"] = self.shown_status(row["status"])
        return RunRecord.model_validate(row)

    def shown_status(self, status: str) -> str:
        """A run marked running in a warehouse this process only reads has no live process: a writer would hold
        the file, and a read-only open would have been refused. So it died (kill -9, a crash, a reboot)."""
        return "died" if self.read_only and status == "running" else status

    # -- stages ------------------------------------------------------------------------------------

    def clear_stage(self, run_id: str, stage: str) -> None:
        """Forget what a stage wrote for a run: rerunning it rebuilds everything from the cache."""
        with self._lock:
            self.flush()  # under the lock: no batch is written behind as the run's keys are forgotten
            self._written.forget(run_id)
            with self._statement() as cursor, _transaction(cursor):
                self._delete(cursor, "DELETE FROM items WHERE run_id = ? AND stage = ?", [run_id, stage])
                # people's verdicts (`human`, `human:<reviewer>`) are no stage's output: a rerun keeps them
                self._delete(
                    cursor,
                    "DELETE FROM verdicts WHERE run_id = ? AND stage = ? AND judge NOT LIKE 'human%'",
                    [run_id, stage],
                )
                self._delete(cursor, "DELETE FROM stage_counts WHERE run_id = ? AND stage = ?", [run_id, stage])

    def record_stage(self, run_id: str, ord_: int, counts: StageCounts) -> None:
        self.flush()
        self._execute(
            "INSERT OR REPLACE INTO stage_counts (run_id, stage, ord, n_in, n_out, rejected, parse_error, failed, "
            "cached, sent, set_aside) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run_id,
                counts.stage,
                ord_,
                counts.n_in,
                counts.n_out,
                counts.rejected,
                counts.parse_error,
                counts.failed,
                counts.cached,
                counts.sent,
                counts.set_aside,
            ],
        )

    def funnel_stages(self, run_id: str) -> list[dict[str, Any]]:
        """A run's stage counts in run order, as the funnel shows them."""
        return self._sql(
            'SELECT stage, n_in AS "in", n_out AS out, coalesce(set_aside, 0) AS set_aside, rejected, parse_error, '
            "failed, cached, sent FROM stage_counts WHERE run_id = ? ORDER BY ord",
            [run_id],
        )

    def stage_rows(self, run_id: str) -> list[dict[str, Any]]:
        """A run's recorded stage counts in run order (what a release card's funnel shows)."""
        return self._sql(
            "SELECT stage, n_in, n_out, rejected, parse_error, failed FROM stage_counts WHERE run_id = ? ORDER BY ord",
            [run_id],
        )

    def count_groups(self, run_id: str, stage: str) -> int:
        """How many groups (seeds, core queries) a stage's items, of any status, belong to."""
        self.flush()
        rows = self._sql(
            "SELECT count(DISTINCT group_id) AS n FROM items WHERE run_id = ? AND stage = ?", [run_id, stage]
        )
        return int(rows[0]["n"])

    def set_stage_status(self, run_id: str, stage: str, status: ItemStatus) -> None:
        """Every ``ok`` item of a stage takes ``status``: a release's accepted items, without their ids."""
        self.flush()
        self._execute(
            "UPDATE items SET status = ? WHERE run_id = ? AND stage = ? AND status = 'ok'", [status, run_id, stage]
        )

    def set_status(self, run_id: str, item_ids: Sequence[str], status: ItemStatus) -> None:
        if not item_ids:
            return
        self.flush()
        self._execute(
            "UPDATE items SET status = ? WHERE run_id = ? AND item_id IN (SELECT item_id FROM ids)",
            [status, run_id],
            tables={"ids": _one_column("item_id", list(item_ids))},
        )

    def items(
        self, run_id: str, stage: str, *, status: str | None = "ok", page: int = 1000
    ) -> Iterator[list[ItemRecord]]:
        """A stage's items in pages of ``page`` whole groups, in group order, so memory stays bounded on large
        runs: each page asks for the groups after the last page's, so the stage's list of group ids is never
        held here (a release reads its source twice at a run's end, where its peak was at 40,000 seeds)."""
        if page < 1:
            raise ValueError(f"a page holds one group or more, not {page}")
        self.flush()
        condition = "" if status is None else "AND status = ?"
        after: str | None = None
        while True:
            last = self._sql(
                "SELECT max(group_id) AS last FROM (SELECT DISTINCT group_id FROM items WHERE run_id = ? "
                "AND stage = ? AND (?::VARCHAR IS NULL OR group_id > ?) ORDER BY group_id LIMIT ?)",
                [run_id, stage, after, after, page],
            )[0]["last"]
            if last is None:
                return
            rows = self._sql(
                f"SELECT * FROM items WHERE run_id = ? AND stage = ? {condition} "
                "AND (?::VARCHAR IS NULL OR group_id > ?) AND group_id <= ? ORDER BY group_id, ord, item_id",
                [run_id, stage, *([] if status is None else [status]), after, after, last],
            )
            yield [self.item_record(row) for row in rows]
            after = last

    @staticmethod
    def item_record(row: dict[str, Any]) -> ItemRecord:
        row = dict(row)
        row["payload"] = json.loads(row["payload"]) if row["payload"] is not None else {}
        return ItemRecord.model_validate(row)

    def count_items(self, run_id: str, stage: str | None, status: str = "ok") -> int:
        """A stage's items with this status (every stage's, with ``stage`` None)."""
        self.flush()
        rows = self._sql(
            "SELECT count(*) AS n FROM items WHERE run_id = ? AND (?::VARCHAR IS NULL OR stage = ?) AND status = ?",
            [run_id, stage, stage, status],
        )
        return int(rows[0]["n"])

    def item_row(self, run_id: str, item_id: str) -> dict[str, Any] | None:
        """An item as stored (its payload JSON text), if the run holds it."""
        rows = self._sql("SELECT * FROM items WHERE run_id = ? AND item_id = ?", [run_id, item_id])
        return rows[0] if rows else None

    def children(self, run_id: str, item_id: str) -> list[dict[str, Any]]:
        """The items made from this one (with others, maybe): what became of it downstream."""
        return self._sql(
            "SELECT item_id, kind, stage, status FROM items WHERE run_id = ? AND list_contains(parent_ids, ?) "
            "ORDER BY stage, item_id",
            [run_id, item_id],
        )

    def siblings(self, run_id: str, item_id: str) -> list[dict[str, Any]]:
        """The items made from the same parent by the same stage, with their status and payload."""
        return self._sql(
            "SELECT s.item_id, s.kind, s.status, s.payload FROM items i JOIN items s ON s.run_id = i.run_id "
            "AND s.stage = i.stage AND s.item_id <> i.item_id AND len(list_intersect(s.parent_ids, i.parent_ids)) > 0 "
            "WHERE i.run_id = ? AND i.item_id = ? ORDER BY s.ord, s.item_id",
            [run_id, item_id],
        )

    def decided_items(
        self, run_id: str, *, stage: str | None, status: str | None, limit: int | None
    ) -> list[dict[str, Any]]:
        """Items with the verdict that decided each (a failing one first), by default those not kept; a failed
        or unparsed verdict says whether a rerun may cure it (``failure``)."""
        conditions, params = ["i.run_id = ?"], [run_id]
        if stage is not None:
            conditions.append("(v.stage = ? OR (v.stage IS NULL AND i.stage = ?))")
            params += [stage, stage]
        if status is not None:
            conditions.append("i.status = ?")
            params.append(status)
        else:
            conditions.append("i.status NOT IN ('ok', 'accepted')")
        failed_call = (
            "(SELECT c.failure FROM llm_calls c WHERE c.key = v.call_key AND c.error IS NOT NULL "
            "ORDER BY c.created_at DESC LIMIT 1)"
            if self._has_column("llm_calls", "failure")
            else "NULL"
        )
        return self._sql(
            "SELECT i.item_id, i.kind, i.group_id, i.stage AS made_by, i.status, v.stage AS decided_by, v.judge, "
            "v.decision, v.score, v.threshold, v.reason, "
            "(SELECT list(f.judge ORDER BY f.judge) FROM verdicts f WHERE f.run_id = i.run_id "
            "AND f.item_id = i.item_id AND f.stage = v.stage AND f.decision <> 'pass') AS failed_judges, "
            f"CASE v.decision WHEN 'parse_error' THEN 'terminal' WHEN 'failed' THEN {failed_call} END AS failure "
            "FROM items i LEFT JOIN verdicts v ON v.run_id = i.run_id AND v.item_id = i.item_id "
            f"WHERE {' AND '.join(conditions)} "
            "QUALIFY row_number() OVER (PARTITION BY i.item_id ORDER BY (v.decision = 'pass'), v.created_at DESC) = 1 "
            "ORDER BY i.group_id, i.ord, i.item_id" + (f" LIMIT {int(limit)}" if limit else ""),
            params,
        )

    def stage_names(self, run_id: str) -> list[str]:
        """The stages that made, decided or counted something in a run, in run order where counted."""
        return [
            row["stage"]
            for row in self._sql(
                "SELECT stage, min(ord) AS ord FROM (SELECT stage, ord FROM stage_counts WHERE run_id = ? "
                "UNION ALL SELECT stage, NULL FROM items WHERE run_id = ? "
                "UNION ALL SELECT stage, NULL FROM verdicts WHERE run_id = ?) WHERE stage IS NOT NULL "
                "GROUP BY stage ORDER BY ord NULLS LAST, stage",
                [run_id, run_id, run_id],
            )
        ]

    # -- verdicts ----------------------------------------------------------------------------------

    def item_verdicts(self, run_id: str, item_id: str) -> list[dict[str, Any]]:
        """Every verdict on an item, in the order they were given."""
        return self._sql(
            "SELECT stage, judge, decision, score, threshold, reason, call_key FROM verdicts "
            "WHERE run_id = ? AND item_id = ? ORDER BY created_at, judge",
            [run_id, item_id],
        )

    def judge_yields(self, run_id: str) -> list[dict[str, Any]]:
        """Per stage and LLM judge of a run: how many it judged, passed, rejected, and left unanswered."""
        return self._sql(
            "SELECT stage, judge, count(*) AS judged, count(*) FILTER (WHERE decision = 'pass') AS passed, "
            "count(*) FILTER (WHERE decision = 'reject') AS rejected, "
            "count(*) FILTER (WHERE decision IN ('parse_error', 'failed')) AS unanswered "
            "FROM verdicts WHERE run_id = ? AND judge LIKE 'llm:%' GROUP BY stage, judge ORDER BY stage, judge",
            [run_id],
        )

    def scored_verdicts(self, run_id: str) -> list[dict[str, Any]]:
        """Every scored LLM verdict: its stage, judge, score, threshold and decision."""
        return self._sql(
            "SELECT stage, judge, score, threshold, decision FROM verdicts "
            "WHERE run_id = ? AND judge LIKE 'llm%' AND score IS NOT NULL ORDER BY stage, judge, item_id",
            [run_id],
        )

    def removal_reasons(self, run_id: str, stage: str | None = None) -> list[dict[str, Any]]:
        """Machine verdicts that did not pass, grouped by stage, judge, decision and rule (by reason where a
        verdict names no rule: a file an older ifsynth wrote, or a judge's own words), most frequent first; each
        group with its count, its measured values and thresholds, and one reason as an example."""
        rule = "coalesce(nullif(rule, ''), reason)" if self._has_column("verdicts", "rule") else "reason"
        return self._sql(
            f"SELECT stage, judge, decision, {rule} AS rule, count(*) AS n, "
            "list(score ORDER BY score) FILTER (WHERE score IS NOT NULL) AS scores, "
            "min(threshold) AS threshold_min, max(threshold) AS threshold_max, min(reason) AS example "
            "FROM verdicts WHERE run_id = ? AND decision <> 'pass' AND judge NOT LIKE 'human%' "
            "AND (?::VARCHAR IS NULL OR stage = ?) GROUP BY ALL ORDER BY n DESC, stage, judge, rule",
            [run_id, stage, stage],
        )

    def reviewable_verdicts(
        self, run_id: str, decisions: Sequence[str], stage: str | None = None
    ) -> list[dict[str, Any]]:
        """LLM verdicts with these decisions, with the item decided and its parents' payloads."""
        return self._sql(
            "SELECT v.item_id, v.stage, v.judge, v.decision, v.score, v.threshold, v.reason, v.call_key, "
            "i.kind, i.group_id, i.payload, "
            "(SELECT list(p.payload ORDER BY p.item_id) FROM items p WHERE p.run_id = i.run_id "
            " AND list_contains(i.parent_ids, p.item_id)) AS parents "
            "FROM verdicts v JOIN items i ON i.run_id = v.run_id AND i.item_id = v.item_id "
            "WHERE v.run_id = ? AND v.judge LIKE 'llm%' AND v.decision IN ? AND (?::VARCHAR IS NULL OR v.stage = ?) "
            "ORDER BY v.stage, v.item_id, v.judge",
            [run_id, list(decisions), stage, stage],
        )

    def machine_judged(self, run_id: str, item_ids: Collection[str]) -> set[tuple[str, str]]:
        """The (item, stage) pairs among these items that a machine judge decided."""
        rows = self._sql(
            "SELECT DISTINCT item_id, stage FROM verdicts WHERE run_id = ? AND item_id IN ? "
            "AND judge NOT LIKE 'human%'",
            [run_id, sorted(item_ids)],
        )
        return {(r["item_id"], r["stage"]) for r in rows}

    def human_decisions(self, run_id: str) -> list[dict[str, Any]]:
        """Per (item, stage) a person decided, the newest human decision."""
        return self._sql(
            f"{_PEOPLE} SELECT item_id, stage, decision FROM people",
            [run_id],
        )

    def judged_by_both(self, run_id: str) -> list[dict[str, Any]]:
        """Every (stage, LLM judge, item) a person decided too: the LLM's decision and the newest human one."""
        return self._sql(
            f"{_PEOPLE} SELECT m.stage, m.judge, m.item_id, m.decision AS llm, p.decision AS human "
            "FROM verdicts m JOIN people p ON p.item_id = m.item_id AND p.stage = m.stage "
            "WHERE m.run_id = ? AND m.judge LIKE 'llm%' AND m.decision IN ('pass', 'reject') "
            "ORDER BY m.stage, m.judge, m.item_id",
            [run_id, run_id],
        )

    def delete_verdict(self, run_id: str, item_id: str, stage: str, judge: str) -> None:
        self.flush()
        with self._lock, self._statement() as cursor, _transaction(cursor):
            self._delete(
                cursor,
                "DELETE FROM verdicts WHERE run_id = ? AND item_id = ? AND stage = ? AND judge = ?",
                [run_id, item_id, stage, judge],
            )

    # -- calls -------------------------------------------------------------------------------------

    def call_totals(self, run_id: str, *, answered: bool = False) -> dict[str, Any]:
        """A run's calls (only those answered, with ``answered``): attempts, failed ones and how (transient or
        terminal), tokens and cost."""
        failure = "failure" if self._has_column("llm_calls", "failure") else "NULL"  # a file an older ifsynth wrote
        return self._sql(
            "SELECT count(*) AS sent, count(*) FILTER (WHERE error IS NOT NULL) AS failed, "
            f"count(*) FILTER (WHERE {failure} = 'transient') AS transient, "
            f"count(*) FILTER (WHERE {failure} = 'terminal') AS terminal, "
            "coalesce(sum(prompt_tokens), 0) AS prompt_tokens, "
            "coalesce(sum(completion_tokens), 0) AS completion_tokens, "
            "sum(cost) AS cost FROM llm_calls WHERE run_id = ? AND (NOT ? OR error IS NULL)",
            [run_id, answered],
        )[0]

    def call_attempts(self, keys: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """Every attempt at each of these requests, the answered one first: one scan of the calls for them all
        (the key has no index)."""
        failure = "failure" if self._has_column("llm_calls", "failure") else "NULL AS failure"
        rows = self._sql(
            "SELECT key, call_id, template, template_hash, base_url, model, request, response, finish_reason, "
            f"prompt_tokens, completion_tokens, latency_ms, cost, http_status, error, {failure}, attempt, created_at "
            "FROM llm_calls WHERE key IN (SELECT unnest(?::VARCHAR[])) ORDER BY key, (error IS NULL) DESC, created_at",
            [list(keys)],
        )
        attempts: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            attempts.setdefault(row.pop("key"), []).append(row)
        return attempts

    def usage_by_stage(self, run_id: str) -> list[dict[str, Any]]:
        """Per stage, in run order: requests sent, tokens in and out, and cost (None where no price was given)."""
        return self._sql(
            "SELECT c.stage, count(*) AS requests, coalesce(sum(c.prompt_tokens), 0) AS prompt_tokens, "
            "coalesce(sum(c.completion_tokens), 0) AS completion_tokens, sum(c.cost) AS cost "
            "FROM llm_calls c LEFT JOIN stage_counts s ON s.run_id = c.run_id AND s.stage = c.stage "
            "WHERE c.run_id = ? GROUP BY c.stage, s.ord ORDER BY s.ord NULLS LAST, c.stage",
            [run_id],
        )

    def _has_column(self, table: str, column: str) -> bool:
        """Whether the file has this column: one an older ifsynth wrote and this process only reads lacks the
        columns added since (a writer adds them when it opens the file)."""
        key = (table, column)
        if key not in self._columns:
            rows = self._sql(
                "SELECT 1 FROM duckdb_columns() WHERE database_name = current_database() AND schema_name = 'main' "
                "AND table_name = ? AND column_name = ?",
                [table, column],
            )
            self._columns[key] = bool(rows)
        return self._columns[key]

    # -- releases ----------------------------------------------------------------------------------

    def has_release(self, name: str) -> bool:
        return bool(self._sql("SELECT 1 FROM releases WHERE name = ?", [name]))

    def release_row(self, name: str) -> dict[str, Any] | None:
        """A release's record: its name, run, recipe, source and card (JSON text)."""
        rows = self._sql("SELECT * FROM releases WHERE name = ?", [name])
        return rows[0] if rows else None

    def release_name(self, run_id: str) -> str | None:
        """The name of the release a run made, if it made one."""
        rows = self._sql("SELECT name FROM releases WHERE run_id = ?", [run_id])
        return rows[0]["name"] if rows else None

    def release_modes(self, release: str) -> list[str]:
        rows = self._sql("SELECT DISTINCT mode FROM release_queries WHERE release = ? ORDER BY mode", [release])
        return [r["mode"] for r in rows]

    def release_sizes(self, release: str) -> dict[str, int]:
        """A release's core queries, its instances (query, instruction) and its corpus, counted."""
        return self._sql(
            "SELECT count(DISTINCT group_id) AS queries, count(DISTINCT query_id) AS instances, "
            "(SELECT count(*) FROM release_docs WHERE release = ?) AS corpus FROM release_queries WHERE release = ?",
            [release, release],
        )[0]

    def mean_positives(self, release: str, mode: str | None) -> float | None:
        """Positive passages per query of a mode, on average."""
        return self._sql(
            "SELECT avg(n) AS mean FROM (SELECT count(r.doc_id) FILTER (WHERE r.score > 0) AS n "
            "FROM release_queries q LEFT JOIN release_qrels r USING (release, mode, query_id) "
            "WHERE q.release = ? AND q.mode = ? GROUP BY q.query_id)",
            [release, mode],
        )[0]["mean"]

    def release_docs(self, release: str) -> list[dict[str, Any]]:
        """A release's passages with their meta (JSON text), by doc id: what an export writes."""
        return self._sql(
            "SELECT doc_id, title, text, meta FROM release_docs WHERE release = ? ORDER BY doc_id", [release]
        )

    def ordered_queries(self, release: str) -> list[dict[str, Any]]:
        """A release's queries with their meta, grouped and in instruction order: what an export writes."""
        return self._sql(
            "SELECT mode, query_id, group_id, query, instruction, meta FROM release_queries q "
            f"WHERE release = ? {_QUERY_ORDER}",
            [release],
        )

    def ordered_qrels(self, release: str) -> list[dict[str, Any]]:
        """A release's judgments in the order of its queries: what an export writes."""
        return self._sql(
            "SELECT r.mode, r.query_id, r.doc_id, r.score FROM release_qrels r "
            "JOIN release_queries q USING (release, mode, query_id) "
            f"WHERE r.release = ? {_QUERY_ORDER}, r.doc_id",
            [release],
        )

    def release_word_counts(self, release: str) -> dict[str, list[int]]:
        """Words per instruction, query and passage of a release (each text once)."""
        queries = self._sql(
            "SELECT DISTINCT query_id, mode, len(string_split(trim(query), ' ')) AS q, "
            "CASE WHEN trim(instruction) = '' THEN NULL ELSE len(string_split(trim(instruction), ' ')) END AS i "
            "FROM release_queries WHERE release = ? ORDER BY mode, query_id",
            [release],
        )
        docs = self._sql(
            "SELECT len(string_split(trim(text), ' ')) AS n FROM release_docs WHERE release = ? ORDER BY doc_id",
            [release],
        )
        return {
            "instructions": [r["i"] for r in queries if r["i"] is not None],
            "queries": [r["q"] for r in queries],
            "passages": [r["n"] for r in docs],
        }

    def release_passages(
        self, release: str, *, doc_ids: Collection[str] | None = None, dimension: str | None = None
    ) -> list[dict[str, Any]]:
        """A release's passages (doc_id, title, text) by doc id: those in ``doc_ids`` when given; with a
        ``dimension``, that InfoSearch dimension's own and those of no dimension."""
        wanted = _one_column("doc_id", sorted(doc_ids)) if doc_ids is not None else None
        return self._sql(
            "SELECT doc_id, title, text FROM release_docs WHERE release = ? "
            f"{'AND doc_id IN (SELECT doc_id FROM wanted) ' if wanted is not None else ''}"
            "AND (?::VARCHAR IS NULL OR meta->>'dimension' IS NULL OR meta->>'dimension' = ?) ORDER BY doc_id",
            [release, dimension, dimension],
            tables={"wanted": wanted} if wanted is not None else None,
        )

    def release_queries(self, release: str) -> list[dict[str, Any]]:
        """A release's queries with their mode, group, instruction, InfoSearch dimension and IFIR subset."""
        return self._sql(
            "SELECT mode, query_id, group_id, query, instruction, meta->>'dimension' AS dimension, "
            "meta->>'subset' AS subset "
            "FROM release_queries WHERE release = ?",
            [release],
        )

    def release_qrels(self, release: str) -> list[dict[str, Any]]:
        return self._sql("SELECT mode, query_id, doc_id, score FROM release_qrels WHERE release = ?", [release])

    def release_positive_pairs(self, release: str, mode: str) -> list[dict[str, Any]]:
        """One row per (query, positive passage) of a mode: query_id, query, instruction, passage."""
        return self._sql(
            "SELECT q.query_id, q.query, q.instruction, d.text AS passage FROM release_queries q "
            "JOIN release_qrels r USING (release, mode, query_id) "
            "JOIN release_docs d ON d.release = q.release AND d.doc_id = r.doc_id "
            "WHERE q.release = ? AND q.mode = ? AND r.score > 0 ORDER BY q.query_id, d.doc_id",
            [release, mode],
        )

    def release_card(self, run_id: str) -> str | None:
        """The card (JSON text) of the release a run made, if it made one."""
        rows = self._sql("SELECT card FROM releases WHERE run_id = ?", [run_id])
        return rows[0]["card"] if rows else None

    def release_top_ranked(self, release: str) -> list[dict[str, Any]]:
        """The candidate pool of a reranking release, one row per (mode, query, document); none elsewhere."""
        return self._sql("SELECT mode, query_id, doc_id FROM release_top_ranked WHERE release = ?", [release])

    def write_release(
        self,
        *,
        name: str,
        run_id: str | None,
        recipe: str,
        source: str,
        card: dict[str, Any],
        docs: Sequence[Mapping[str, Any]],
        queries: Sequence[Mapping[str, Any]],
        qrels: Sequence[Mapping[str, Any]],
        top_ranked: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """Replace the release ``name`` in one transaction; rows as generated or imported (RELEASE_COLUMNS)."""
        with self.writing_release(name=name, run_id=run_id, recipe=recipe, source=source) as release:
            release.add(docs=docs, queries=queries, qrels=qrels, top_ranked=top_ranked)
            release.finish(card)

    @contextlib.contextmanager
    def writing_release(self, *, name: str, run_id: str | None, recipe: str, source: str) -> Iterator[ReleaseWriter]:
        """Replace the release ``name`` in one transaction, its rows written as they are made: a release of
        tens of thousands of instances is never all in memory. Nothing is kept unless ``finish`` is called.
        DuckDB checkpoints nothing while the transaction is open: keep other writes out of it."""
        self.flush()
        cursor = self._db.cursor()  # its own transaction, beside the statements the caller runs meanwhile
        release = ReleaseWriter(cursor, name, (run_id, recipe, source), self._writing_statement, self._let_parts_go)
        try:
            cursor.execute("USE warehouse")
            cursor.execute("BEGIN")
            with self._writing_statement():
                for table in ("releases", *RELEASE_COLUMNS):
                    column = "name" if table == "releases" else "release"
                    self._delete(cursor, f"DELETE FROM {table} WHERE {column} = ?", [name])
            yield release
            if not release.finished:
                raise RuntimeError(f"release `{name}` was left unfinished")
        except BaseException:
            if not release.finished:
                with contextlib.suppress(duckdb.Error):  # (a failed commit may have ended it already)
                    cursor.execute("ROLLBACK")
            raise
        finally:
            cursor.close()

    def _let_parts_go(self) -> None:
        """An open release's transaction holds every row added until its commit: in memory (``IN_MEMORY_TABLE``)
        or written ahead into the file and kept (``BASE_TABLE``), 65 MB at the end of a 40,000-seed run
        (bench/README.md, "Nineteenth round"). Past ``KEPT_BLOCK_BYTES`` of those (with what the run's commits
        left) they are let go, as after a batch's commit: the first wait in the warehouse's temporary files, the
        second are read from the file again. A part added while another statement runs is let go with the next."""
        with contextlib.suppress(duckdb.Error):  # housekeeping: the next part tries again
            self._let_blocks_go(past=KEPT_BLOCK_BYTES, tags=("BASE_TABLE", "IN_MEMORY_TABLE"))

    @contextlib.contextmanager
    def _writing_statement(self) -> Iterator[None]:
        """A write on a cursor of its own: serialized with the others, and counted (``_let_blocks_go``)."""
        with self._lock, self._in_flight.one():
            yield

    # -- embeddings --------------------------------------------------------------------------------

    def embeddings(self, keys: Sequence[str]) -> dict[str, list[float]]:
        """The cached vectors of these text keys (those present)."""
        if not keys or not self._has_table("embeddings"):
            return {}
        rows = self._sql("SELECT key, vector FROM embeddings WHERE key IN (SELECT unnest(?::VARCHAR[]))", [list(keys)])
        return {row["key"]: row["vector"] for row in rows}

    def add_embeddings(self, model: str, vectors: Mapping[str, Sequence[float]]) -> None:
        """Store vectors by text key at once (not buffered: a batch of them is one answer, kept as it lands)."""
        table = pa.Table.from_arrays(
            [
                pa.array(list(vectors), _STR),
                pa.array([model] * len(vectors), _STR),
                pa.array([list(v) for v in vectors.values()], pa.list_(pa.float32())),
                pa.array([datetime.now()] * len(vectors), pa.timestamp("us")),
            ],
            names=["key", "model", "vector", "created_at"],
        )
        self._execute("INSERT OR IGNORE INTO embeddings SELECT * FROM incoming", tables={"incoming": table})

    def _has_table(self, table: str) -> bool:
        """Whether the file has this table: a file an older ifsynth wrote and this process only reads may not."""
        return bool(
            self._sql(
                "SELECT 1 FROM duckdb_tables() WHERE database_name = current_database() AND table_name = ?", [table]
            )
        )

    # -- validity ----------------------------------------------------------------------------------

    def add_validity(self, report: Mapping[str, Any]) -> None:
        """Keep a validity result, for ``report --compare`` to chart."""
        self._execute(
            "INSERT INTO validity VALUES (?, ?, ?, ?)",
            [report["original"], report["regenerated"], json.dumps(report, sort_keys=True), datetime.now()],
        )

    def latest_validity(self, one: str, other: str) -> dict[str, Any] | None:
        """The newest validity result between these two releases, either way round."""
        if not self._has_table("validity"):
            return None
        rows = self._sql(
            "SELECT report FROM validity WHERE (original = ? AND regenerated = ?) "
            "OR (original = ? AND regenerated = ?) ORDER BY created_at DESC LIMIT 1",
            [one, other, other, one],
        )
        return json.loads(rows[0]["report"]) if rows else None
