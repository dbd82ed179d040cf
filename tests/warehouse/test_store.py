"""The warehouse's write path: full batches written behind by a background thread while their answers are
still served, a failed batch put back whole, and both journals replayed after a kill; and its memory cap."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from ifsynth.flows.run.context import recorded
from ifsynth.schemas.errors import WarehouseError
from ifsynth.schemas.records import CallRecord, RunRecord, VerdictRecord
from ifsynth.warehouse import store
from ifsynth.warehouse.store import Warehouse
from tests.conftest import invoke
from tests.helpers import answered_at, item, kept_blocks, query, random_key


def call(i: int, *, error: str | None = None) -> CallRecord:
    return CallRecord(
        call_id=f"call-{i}",
        key=f"key-{i}",
        run_id="run-1",
        stage="judge",
        template="t",
        template_hash="h",
        base_url="http://x/v1",
        model="m",
        request={"n": i},
        response=None if error else f'{{"n":{i}}}',
        error=error,
    )


def committed(warehouse: Warehouse) -> int:
    return query(warehouse, "SELECT count(*) AS n FROM llm_calls")[0]["n"]


def journal_lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


def in_writer() -> bool:
    return threading.current_thread().name.startswith("warehouse-writer")


def test_full_batch_is_written_behind_and_its_answers_stay_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "FLUSH_ROWS", 10)
    gate, writing = threading.Event(), threading.Event()
    write = Warehouse._write

    def gated(self: Warehouse, batch: dict[str, list[dict[str, Any]]]) -> None:
        if in_writer():
            writing.set()
            assert gate.wait(10)
        write(self, batch)

    monkeypatch.setattr(Warehouse, "_write", gated)
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as warehouse:
        for i in range(12):
            warehouse.add_call(call(i))
        assert writing.wait(10)  # the tenth call handed its batch to the writer, which is now held
        sealed, journal = path.with_name("w.duckdb.journal.sealed"), path.with_name("w.duckdb.journal")
        assert journal_lines(sealed) == 10 and journal_lines(journal) == 2
        assert committed(warehouse) == 0
        assert set(warehouse.cached([f"key-{i}" for i in range(12)])) == {f"key-{i}" for i in range(12)}
        gate.set()
        warehouse.flush()
        assert committed(warehouse) == 12
        assert not sealed.exists() and journal_lines(journal) == 0


def test_drain_writes_what_is_buffered_in_the_background_and_holds_no_one_who_adds_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stage that closes while others run drains the warehouse from a worker thread: its rows are written by the
    background writer while the thread that adds calls (the run's event loop) goes on; the rows added meanwhile
    are written too, and nothing is left for the flush that follows."""
    gate, writing = threading.Event(), threading.Event()
    write = Warehouse._write

    def gated(self: Warehouse, batch: dict[str, list[dict[str, Any]]]) -> None:
        assert in_writer(), "drain writes through the background writer"
        writing.set()
        assert gate.wait(10)
        write(self, batch)

    monkeypatch.setattr(Warehouse, "_write", gated)
    with Warehouse(tmp_path / "w.duckdb") as warehouse:
        for i in range(3):
            warehouse.add_call(call(i))
        draining = threading.Thread(target=warehouse.drain)
        draining.start()
        assert writing.wait(10)  # the three calls are being written, and the writer is held

        def add_two() -> None:
            for i in range(3, 5):
                warehouse.add_call(call(i))

        adding = threading.Thread(target=add_two)
        adding.start()
        adding.join(10)
        assert not adding.is_alive(), "adding a call waited for the write under way"
        assert committed(warehouse) == 0 and draining.is_alive()
        gate.set()
        draining.join(10)
        assert not draining.is_alive()
        assert committed(warehouse) == 5  # the calls added while the first batch was written, as well
        assert not any(warehouse._buffers.values())


def test_failed_background_write_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "FLUSH_ROWS", 5)
    failures = [RuntimeError("disk full")]
    append = Warehouse._append

    def failing(cursor: Any, table: str, rows: list[dict[str, Any]], **kwargs: bool) -> None:
        if in_writer() and failures:
            raise failures.pop()
        append(cursor, table, rows, **kwargs)

    monkeypatch.setattr(Warehouse, "_append", staticmethod(failing))
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as warehouse:
        for i in range(6):
            warehouse.add_call(call(i))
        assert warehouse._writing is not None
        warehouse._writing.exception(timeout=10)
        with pytest.raises(RuntimeError, match="disk full"):
            warehouse.flush()  # the failure surfaces at the next flush, with the batch put back
        assert journal_lines(path.with_name("w.duckdb.journal")) == 6
        assert not path.with_name("w.duckdb.journal.sealed").exists()
        assert len(warehouse.cached([f"key-{i}" for i in range(6)])) == 6
        warehouse.flush()
        assert committed(warehouse) == 6


def test_both_journals_are_replayed_on_open(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as warehouse:
        warehouse.add_call(call(0))  # committed, and in the sealed journal still: the kill came before its removal
    sealed, journal = path.with_name("w.duckdb.journal.sealed"), path.with_name("w.duckdb.journal")
    sealed.write_text("".join(call(i).model_dump_json() + "\n" for i in range(3)), encoding="utf-8")
    lines = [call(i).model_dump_json() for i in (2, 3, 4)]  # call 2 in both; the last line was cut by the kill
    journal.write_text("\n".join(lines) + "\n" + call(5).model_dump_json()[:40], encoding="utf-8")
    with Warehouse(path) as warehouse:
        rows = query(warehouse, "SELECT call_id FROM llm_calls ORDER BY call_id")
        assert [row["call_id"] for row in rows] == [f"call-{i}" for i in range(5)]
    assert not sealed.exists()


def test_a_damaged_journal_line_is_kept_aside_and_the_rest_replayed(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    Warehouse(path).close()
    damaged = call(1).model_dump_json().encode().replace(b"call-1", b"call-\xff")
    path.with_name("w.duckdb.journal").write_bytes(b"\n".join([call(0).model_dump_json().encode(), damaged, b""]))
    with Warehouse(path) as warehouse:
        assert [row["call_id"] for row in query(warehouse, "SELECT call_id FROM llm_calls")] == ["call-0"]
        warehouse.add_call(call(2))
    with Warehouse(path, read_only=True) as warehouse:
        assert committed(warehouse) == 2
    assert path.with_name("w.duckdb.journal.unreadable").read_bytes() == damaged + b"\n"


def test_a_full_disk_is_one_clear_error_the_run_is_recorded_failed_and_nothing_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC injected into the warehouse's writes and its journal (bench/faults.py fills a small tmpfs for
    real where the machine lets it mount one)."""
    path = tmp_path / "w.duckdb"
    run = RunRecord(run_id="run-1", name="run-1", recipe="instructir", fingerprint="f", config={},
                    code_version="v", status="running", started_at=datetime.now())  # fmt: skip
    full = r"no space left to write warehouse .* free space on the disk of"
    warehouse = Warehouse(path)
    warehouse.start_run(run)
    warehouse.add_call(call(1))
    with monkeypatch.context() as disk:
        disk.setattr(Warehouse, "_append", staticmethod(no_space))
        with pytest.raises(WarehouseError, match=full):
            warehouse.flush()
        warehouse.finish_run("run-1", "failed", "disk full")
        journal = warehouse._journal
        disk.setattr(warehouse, "_journal", FullFile())
        with pytest.raises(WarehouseError, match=full):
            warehouse.add_call(call(2))
        disk.setattr(warehouse, "_journal", journal)
        with pytest.raises(WarehouseError, match=full):
            warehouse.close()  # still full: what it could not write stays in the journal
    with Warehouse(path) as warehouse:  # space again: the journal is replayed
        assert committed(warehouse) == 1 and warehouse.run("run-1").status == "failed"


def no_space(*_: object, **__: object) -> None:
    raise duckdb.IOException(f'Could not write file "w.duckdb.wal": {os.strerror(errno.ENOSPC)}')


class FullFile:
    def write(self, _: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_memory_limit_too_small_is_one_line_that_says_so(tmp_path: Path) -> None:
    said = r"ran out of memory .* give --memory-limit a larger size"
    with pytest.raises(WarehouseError, match=said), Warehouse(tmp_path / "w.duckdb", memory_limit="1MB") as warehouse:
        query(warehouse, "SELECT list(range) AS l FROM range(1000000)")


def test_a_write_past_the_memory_limit_is_one_line_the_run_is_recorded_and_nothing_is_lost(tmp_path: Path) -> None:
    """DuckDB's own out-of-memory error, met by a real write under a small ``--memory-limit`` as a run records
    that it completed: said in one line, the run recorded failed, and the answers written once the limit is
    raised."""
    path = tmp_path / "w.duckdb"
    run = RunRecord(run_id="run-1", name="run-1", recipe="instructir", fingerprint="f", config={},
                    code_version="v", status="running", started_at=datetime.now())  # fmt: skip
    said = r"ran out of memory \(Out of Memory Error: [^)]*\)\): give --memory-limit a larger size"
    warehouse = Warehouse(path, memory_limit="16MB")
    warehouse.start_run(run)
    with pytest.raises(WarehouseError, match=said), recorded(warehouse, "run-1"):
        for i in range(300):
            warehouse.add_call(call(i).model_copy(update={"response": f"{i:06d}" * 10_000}))
    with pytest.raises(WarehouseError, match=said):
        warehouse.close()  # its rows cannot be written now either: they stay in the journal
    with Warehouse(path) as warehouse:
        assert committed(warehouse) == 300 and warehouse.run("run-1").status == "failed"


def insert_calls(start: int, n: int) -> str:
    """SQL that adds ``n`` calls, ids from ``start``: DuckDB writes them itself, at once."""
    return (
        "INSERT INTO llm_calls (call_id, key, run_id, stage, template, template_hash, base_url, model, request, "
        f"attempt, created_at) SELECT uuid()::VARCHAR, sha256((i + {start})::VARCHAR), 'r', 's', 't', 'h', 'u', "
        f"'m', '{{}}', 1, now() FROM range({n}) r(i)"
    )


def test_a_log_too_large_to_replay_under_the_memory_limit_is_one_line_and_nothing_is_lost(tmp_path: Path) -> None:
    """A process killed before DuckDB checkpointed leaves its write-ahead log, replayed at the next open. Under a
    cap too small for that (DuckDB says it "failed to pin" a block), a reader's open (and the CLI's) is one line
    that says to raise the cap; a writer replays it under the same cap, and every row is there."""
    path = tmp_path / "w.duckdb"
    Warehouse(path).close()
    with duckdb.connect(str(path)) as db:
        db.execute(insert_calls(0, 20_000))
        db.execute("CHECKPOINT")
    killed = f"""import duckdb, os
db = duckdb.connect({str(path)!r})
db.execute("SET checkpoint_threshold = '10GB'")
db.execute({insert_calls(20_000, 60_000)!r})
os._exit(0)"""
    subprocess.run([sys.executable, "-c", killed], check=True)
    assert (tmp_path / "w.duckdb.wal").stat().st_size > 0
    said = r"ran out of memory \(TransactionContext Error: Failure while replaying WAL.* give --memory-limit a larger"
    with pytest.raises(WarehouseError, match=said):
        Warehouse(path, read_only=True, memory_limit="8MiB")
    proc = invoke("--warehouse", str(path), "--memory-limit", "8MiB", "runs")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "give --memory-limit a larger size" in proc.stderr
    with Warehouse(path, memory_limit="8MiB") as warehouse:
        assert committed(warehouse) == 80_000


def test_a_duckdb_error_closing_meets_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error of the close itself (its last write, its checkpoint) is said as one that ended the block."""

    def out_of_memory(_: Warehouse) -> None:
        raise duckdb.OutOfMemoryException("Out of Memory Error: failed to allocate\n\nPossible solutions: ...")

    monkeypatch.setattr(Warehouse, "flush", out_of_memory)
    said = r"ran out of memory \(Out of Memory Error: failed to allocate\): give --memory-limit"
    with pytest.raises(WarehouseError, match=said), Warehouse(tmp_path / "w.duckdb"):
        pass


def test_a_truncated_warehouse_is_one_line_that_says_so(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as warehouse:
        for i in range(3000):
            warehouse.add_call(call(i))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    damaged = r"cannot be read .* damaged \(truncated, say\)"
    with pytest.raises(WarehouseError, match=damaged), Warehouse(path) as warehouse:
        query(warehouse, "SELECT sum(length(request)) AS n FROM llm_calls")


def test_a_file_whose_tables_were_never_made_is_one_line_and_a_run_makes_them(tmp_path: Path) -> None:
    """A run stopped between DuckDB's creation of the file and the last of the warehouse's tables leaves a
    file a reader cannot use: said in one line, not as the first query's missing table; a writer makes them."""
    path = tmp_path / "w.duckdb"
    with duckdb.connect(str(path)) as db:
        db.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)")  # stopped after it
    said = "holds no ifsynth warehouse: its tables were never made"
    with pytest.raises(WarehouseError, match=said):
        Warehouse(path, read_only=True)
    duckdb.connect(str(tmp_path / "empty.duckdb")).close()  # stopped before the first table
    with pytest.raises(WarehouseError, match=said):
        Warehouse(tmp_path / "empty.duckdb", read_only=True)
    proc = invoke("--warehouse", str(path), "runs")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "Catalog Error" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and said in proc.stderr
    Warehouse(path).close()
    with Warehouse(path, read_only=True) as warehouse:
        assert warehouse.runs_summary() == []


def test_failed_calls_are_not_served_from_the_buffer(tmp_path: Path) -> None:
    with Warehouse(tmp_path / "w.duckdb") as warehouse:
        warehouse.add_call(call(1, error="APITimeoutError: timed out"))
        assert warehouse.cached(["key-1"]) == {}
        warehouse.flush()
        assert warehouse.cached(["key-1"]) == {}


def test_memory_limit_caps_duckdb_and_a_bad_one_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    with Warehouse(path, memory_limit="64MB") as warehouse:
        warehouse.add_call(call(1))
        limit = query(warehouse, "SELECT current_setting('memory_limit') AS m")[0]["m"]
    assert limit == "61.0 MiB"  # DuckDB reads MB as 10^6 bytes and reports MiB
    with pytest.raises(WarehouseError, match="memory limit `lots` not understood"):
        Warehouse(path, memory_limit="lots")
    with Warehouse(path, read_only=True) as warehouse:  # nothing lost
        assert warehouse.cached(["key-1"])["key-1"]["response"] == '{"n":1}'
    proc = invoke("--warehouse", str(path), "--memory-limit", "lots", "runs")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "memory limit `lots`" in proc.stderr
    assert invoke("--warehouse", str(path), "--memory-limit", "64MB", "runs", "--json").returncode == 0


def test_a_writer_appends_in_small_row_groups_and_spills_beside_the_file(tmp_path: Path) -> None:
    """Row groups of ``ROW_GROUP_ROWS``: a vacuum's merge of small neighbours then rebuilds at most three times
    that many rows in memory, not DuckDB's 122,880 (the 20,000-seed run's spike). The attachment carries the setting,
    and a reader of the file sees every row. DuckDB's allocator hands freed memory back early (``ALLOCATOR``)."""
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as warehouse:
        for i in range(3 * store.ROW_GROUP_ROWS):
            warehouse.add_call(call(i))
        warehouse.checkpoint()
        groups = query(
            warehouse, "SELECT row_group_id, max(count) AS n FROM pragma_storage_info('llm_calls') GROUP BY ALL"
        )
        spill = query(warehouse, "SELECT current_setting('temp_directory') AS t")[0]["t"]
        flush = query(warehouse, "SELECT current_setting('allocator_flush_threshold') AS f")[0]["f"]
    assert len(groups) >= 3 and max(g["n"] for g in groups) <= store.ROW_GROUP_ROWS
    assert spill == f"{path}.tmp"  # a file opened directly spills there too, not to ./.tmp
    assert flush == store.ALLOCATOR["allocator_flush_threshold"], "freed memory goes back to the system early"
    with Warehouse(path, read_only=True) as warehouse:
        assert committed(warehouse) == 3 * store.ROW_GROUP_ROWS


def physical_rows(warehouse: Warehouse, table: str) -> tuple[int, int]:
    """A table's row groups and the rows they hold, deleted ones included (DuckDB keeps those until it vacuums)."""
    row = query(
        warehouse,
        "SELECT count(DISTINCT row_group_id) AS groups, coalesce(sum(count), 0) AS n "
        f"FROM pragma_storage_info('{table}') WHERE column_id = 0 AND column_path = '[0]'",
    )[0]
    return row["groups"], row["n"]


def test_a_writers_checkpoints_merge_no_row_groups(tmp_path: Path) -> None:
    """Each checkpoint writes only what was appended since the last: the short row group an earlier one left
    is not rebuilt with its neighbours (the moment that set a long run's peak), nor when the file closes."""
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as warehouse:
        for part in range(3):
            for i in range(1000):
                warehouse.add_call(call(part * 1000 + i))
            if part < 2:
                warehouse.checkpoint()
    with Warehouse(path, read_only=True) as warehouse:  # the last part checkpointed as the writer closed
        assert physical_rows(warehouse, "llm_calls") == (3, 3000)


@pytest.mark.parametrize("threshold", [None, "1KB"])  # 1 KB: every commit checkpoints, the deletes' own too
@pytest.mark.parametrize("how", ["stage run again", "items written again"])
def test_an_open_that_deletes_rows_vacuums_from_then_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, threshold: str | None
) -> None:
    """A stage run again deletes what it wrote before, an item written again its earlier row: the checkpoint
    that writes the deletes drops those rows and merges the row groups they left short, so reruns do not grow
    the file. Deleting nothing changes nothing."""
    if threshold:
        monkeypatch.setitem(store.CHECKPOINTS, "checkpoint_threshold", threshold)
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as warehouse:
        for part in range(3):
            warehouse.add_items([item(stage, "seed", f"q{part}-{i}") for i in range(500) for stage in ("a", "b")])
            warehouse.checkpoint()
        assert physical_rows(warehouse, "items") == (3, 3000)
    with Warehouse(path) as warehouse:
        warehouse.clear_stage("instructir-run", "c")  # deletes nothing
        warehouse.add_items([item("c", "seed", "q")])
        warehouse.checkpoint()
        assert physical_rows(warehouse, "items") == (4, 3001)
        if how == "stage run again":
            warehouse.clear_stage("instructir-run", "a")
        else:
            warehouse.add_items(
                [item("a", "seed", f"q{part}-{i}", text="again") for i in range(500) for part in (0, 1)]
            )
            warehouse.flush()
    with Warehouse(path, read_only=True) as warehouse:  # checkpointed as the writer closed, if not before
        live = query(warehouse, "SELECT count(*) AS n FROM items")[0]["n"]
        assert live == (1501 if how == "stage run again" else 3001)
        assert physical_rows(warehouse, "items")[1] == live, "the deleted rows are not kept"


DECAY = """import ctypes, glob, os
import ifsynth.flows.cli.app  # the command's imports, which load DuckDB
import duckdb
module = glob.glob(os.path.join(os.path.dirname(duckdb.__file__), "..", "_duckdb*.so"))[0]
jemalloc = ctypes.CDLL(module)
value, size = ctypes.c_ssize_t(), ctypes.c_size_t(ctypes.sizeof(ctypes.c_ssize_t))
assert jemalloc.duckdb_je_mallctl(b"arenas.dirty_decay_ms", ctypes.byref(value), ctypes.byref(size), None, 0) == 0
print(value.value)"""


@pytest.mark.skipif(sys.platform != "linux", reason="DuckDB's wheels bundle jemalloc on Linux only")
@pytest.mark.parametrize(("own", "decay"), [(None, 0), ("dirty_decay_ms:250", 250)])
def test_duckdbs_allocator_hands_freed_pages_back_at_once_unless_the_user_says(own: str | None, decay: int) -> None:
    """DuckDB's jemalloc reads its settings as DuckDB loads: the command's imports set them first, and a user's
    own ``DUCKDB_JE_MALLOC_CONF`` is left as it is."""
    env = {k: v for k, v in os.environ.items() if k != "DUCKDB_JE_MALLOC_CONF"}  # this process set it already
    if own is not None:
        env["DUCKDB_JE_MALLOC_CONF"] = own
    proc = subprocess.run([sys.executable, "-c", DECAY], env=env, capture_output=True, text=True, check=True)
    assert int(proc.stdout) == decay


@pytest.mark.parametrize("memory_limit", [None, "64MB"])
def test_the_blocks_a_write_leaves_in_duckdb_are_let_go_and_the_limit_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memory_limit: str | None
) -> None:
    path = tmp_path / "w.duckdb"
    monkeypatch.setattr(store, "KEPT_BLOCK_BYTES", 64 << 20)
    with Warehouse(path, memory_limit=memory_limit) as warehouse:
        limit = query(warehouse, "SELECT current_setting('memory_limit') AS m")[0]["m"]
        for i in range(20_000):
            warehouse.add_call(call(i).model_copy(update={"response": f"{i:06d}" * 50}))
        warehouse.checkpoint()
        assert committed(warehouse) == 20_000 and kept_blocks(warehouse) > 1 << 20  # the blocks just read
        warehouse.add_call(call(20_000))
        warehouse.flush()  # kept is under KEPT_BLOCK_BYTES: they stay
        assert kept_blocks(warehouse) > 1 << 20
        monkeypatch.setattr(store, "KEPT_BLOCK_BYTES", 1 << 20)
        warehouse.add_call(call(20_001))
        warehouse.flush()
        assert kept_blocks(warehouse) < 1 << 20
        assert query(warehouse, "SELECT current_setting('memory_limit') AS m")[0]["m"] == limit
        assert committed(warehouse) == 20_002  # read again from the file


@pytest.mark.parametrize("memory_limit", [None, "64MB", ""])
def test_a_limit_lowered_to_let_blocks_go_is_set_back_as_it_was(tmp_path: Path, memory_limit: str | None) -> None:
    """When all DuckDB holds fits in the lowered limit, DuckDB lowers it: it goes back to the configured one
    (an empty setting is none, DuckDB's own)."""
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as warehouse:
        for i in range(20_000):
            warehouse.add_call(call(i))
    with Warehouse(path, memory_limit=memory_limit) as warehouse:
        limit = query(warehouse, "SELECT current_setting('memory_limit') AS m")[0]["m"]
        read = "SELECT count(*) AS n FROM llm_calls WHERE NOT contains(request::VARCHAR || response || key, '~')"
        assert query(warehouse, read)[0]["n"] == 20_000 and kept_blocks(warehouse) > 1 << 20  # read, not written
        rest = query(warehouse, "SELECT sum(memory_usage_bytes) AS b FROM duckdb_memory() WHERE tag <> 'BASE_TABLE'")
        assert rest[0]["b"] < 1 << 20, "all else fits in 1 MB: DuckDB takes the lowered limit"
        warehouse._let_blocks_go()
        assert kept_blocks(warehouse) < 1 << 20
        assert query(warehouse, "SELECT current_setting('memory_limit') AS m")[0]["m"] == limit
        assert committed(warehouse) == 20_000


def test_a_second_open_of_a_file_in_one_process_is_one_line(tmp_path: Path) -> None:
    with Warehouse(tmp_path / "w.duckdb"), pytest.raises(WarehouseError, match="open already in this process"):
        Warehouse(tmp_path / "w.duckdb", read_only=True)


def test_a_cache_lookup_reads_the_answers_not_the_requests(tmp_path: Path) -> None:
    """A lookup scans every call: returning the answer's columns alone, it reads their blocks and not the
    requests', the largest (a 20,000-seed run's lookups read its whole table otherwise)."""
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as warehouse:
        for i in range(20_000):
            warehouse.add_call(call(i).model_copy(update={"request": {"n": i, "messages": f"{i:08d}" * 250}}))
    with Warehouse(path) as warehouse:
        found = warehouse.cached([f"key-{i}" for i in range(0, 20_000, 97)])
        assert len(found) == 207 and found["key-97"] == {
            "key": "key-97", "response": '{"n":97}', "finish_reason": None, "logprobs": None
        }  # fmt: skip
        assert kept_blocks(warehouse) < 4 << 20  # 2 MB; returning whole rows read 20 MB
        read = "SELECT count(*) AS n FROM llm_calls WHERE NOT contains(request::VARCHAR, '~')"
        assert query(warehouse, read)[0]["n"] == 20_000 and kept_blocks(warehouse) > 12 << 20  # what it did not read
        warehouse.add_call(call(20_000))
        assert set(warehouse.cached(["key-20000"])["key-20000"]) == set(store.ANSWER_COLUMNS), "buffered alike"


def test_a_lookup_reads_the_row_groups_of_its_keys_first_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls are appended as they are answered, DuckDB keeps each row group's range of times, and the answered
    keys keep the time of their first answer: a request a run repeats reads the row group of its first answer,
    not every call written since (a 100,000-seed run's lookups grew from 17 to 78 ms so). A key noted under
    another's time (the same first 64 bits) is read from that time on; the first answer stays the answer."""
    monkeypatch.setattr(store, "ROW_GROUP_ROWS", 2048)  # twenty row groups
    path, start = tmp_path / "w.duckdb", datetime(2026, 1, 1)
    twin = random_key(3)[:16] + "f" * 48  # answered after random_key(3), noted under its time

    def looked_up(keys: list[str]) -> tuple[dict[str, str], int]:
        """The answers, and the table blocks the lookup read."""
        warehouse._let_blocks_go()
        before = kept_blocks(warehouse)
        found = warehouse.cached(keys)
        return {k: row["response"] for k, row in found.items()}, kept_blocks(warehouse) - before

    with Warehouse(path) as warehouse:
        for i in range(40_000):
            warehouse.add_call(answered_at(i, start + timedelta(seconds=i)))
        warehouse.add_call(answered_at(40_001, start + timedelta(days=2), "twin").model_copy(update={"key": twin}))
    with Warehouse(path) as warehouse:
        late = start + timedelta(days=1)
        warehouse.add_call(answered_at(40_000, late + timedelta(seconds=1), "second"))  # written first
        warehouse.add_call(answered_at(40_000, late, "first"))
        warehouse.add_call(answered_at(40_002, late + timedelta(seconds=1), "at the other's second"))
        warehouse.flush()
        # the file's answered keys read (every call's), nothing looked up
        assert warehouse.cached([random_key(-1)]) == {}
        found, _ = looked_up([random_key(40_000)])
        assert found == {random_key(40_000): "first"}
        found, _ = looked_up([random_key(40_000), random_key(40_002)])  # one's second answer at the other's time
        assert found == {random_key(40_000): "first", random_key(40_002): "at the other's second"}
        found, _ = looked_up([random_key(40_002)])  # a key not asked for, at the time of one asked for
        assert found == {random_key(40_002): "at the other's second"}
        found, early = looked_up([random_key(3), random_key(40_000)])  # answered when the file began
        assert found == {random_key(3): "000003" * 50, random_key(40_000): "first"}
        found, alone = looked_up([random_key(3)])
        assert found == {random_key(3): "000003" * 50}
        found, everything = looked_up([twin])  # read from random_key(3)'s time on: every row group
        assert found == {twin: "twin"} and early * 2 < everything and alone * 4 < everything


def test_the_blocks_are_let_go_only_with_no_other_statement_under_way() -> None:
    in_flight = store._InFlight()
    with in_flight.one(), in_flight.alone() as alone:
        assert not alone  # a statement under way (this thread's own, say): not this time
    started = threading.Event()
    with in_flight.alone() as alone:
        assert alone

        def statement() -> None:
            with in_flight.one():
                started.set()

        other = threading.Thread(target=statement)
        other.start()
        assert not started.wait(0.2), "a statement waits while the blocks are let go"
    assert started.wait(5)
    other.join()


def test_a_file_an_older_ifsynth_wrote_is_read_as_is_and_upgraded_by_a_writer(warehouse_path: Path) -> None:
    """``llm_calls.failure`` came later: a read-only open (which cannot add it) still answers the funnel's and
    `show`'s questions, and the next writer adds the column, keeping the rows."""
    with Warehouse(warehouse_path) as warehouse:
        warehouse.add_call(call(1, error="APITimeoutError: timed out"))
    with duckdb.connect(str(warehouse_path)) as db:
        db.execute("ALTER TABLE llm_calls DROP COLUMN failure")  # as an older ifsynth left the file
    with Warehouse(warehouse_path, read_only=True) as warehouse:
        assert warehouse.call_totals("run-1") | {"cost": None} == {
            "sent": 1, "failed": 1, "transient": 0, "terminal": 0, "prompt_tokens": 0, "completion_tokens": 0,
            "cost": None,
        }  # fmt: skip
        assert [a["failure"] for a in warehouse.call_attempts(["key-1"])["key-1"]] == [None]
    with Warehouse(warehouse_path) as warehouse:
        failed = call(2, error="InternalServerError: HTTP 500").model_copy(update={"failure": "transient"})
        warehouse.add_call(failed)
    with Warehouse(warehouse_path, read_only=True) as warehouse:
        assert (warehouse.call_totals("run-1")["failed"], warehouse.call_totals("run-1")["transient"]) == (2, 1)
        assert [a["failure"] for a in warehouse.call_attempts(["key-2"])["key-2"]] == ["transient"]


def test_a_writer_drops_the_call_key_index_an_older_ifsynth_made(warehouse_path: Path) -> None:
    """DuckDB holds an index whole in memory while a run writes; the cache's lookups never used this one."""
    with Warehouse(warehouse_path) as warehouse:
        warehouse.add_call(call(1))
    with duckdb.connect(str(warehouse_path)) as db:
        db.execute("CREATE INDEX llm_calls_key ON llm_calls (key)")  # as an older ifsynth made the file
    with Warehouse(warehouse_path) as warehouse:
        assert warehouse.cached(["key-1"])["key-1"]["response"] == call(1).response
    with duckdb.connect(str(warehouse_path), read_only=True) as db:
        assert db.execute("SELECT index_name FROM duckdb_indexes()").fetchall() == []


def items_and_verdicts(warehouse: Warehouse) -> list[tuple[Any, ...]]:
    return [
        tuple(row.values())
        for row in query(warehouse, "SELECT item_id, payload::VARCHAR AS payload FROM items ORDER BY ALL")
        + query(warehouse, "SELECT item_id, judge, decision FROM verdicts ORDER BY ALL")
    ]


@pytest.mark.parametrize("keys", ["none", "older"])
def test_an_item_or_verdict_written_again_replaces_the_row_of_its_key(warehouse_path: Path, keys: str) -> None:
    """As ``INSERT OR REPLACE`` did with the primary keys a file an older ifsynth made still has: in one batch,
    across batches, and in a later open; a person's verdict decided again is one verdict."""
    with Warehouse(warehouse_path) as warehouse:
        warehouse.add_items([item("select", "seed", "q1", text="first"), item("select", "seed", "q2")])
        warehouse.add_verdicts([verdict("select-seed-q1-0", 40)])
    with duckdb.connect(str(warehouse_path), read_only=True) as db:
        tables = {table for (table,) in db.execute("SELECT table_name FROM duckdb_constraints() "
                                                   "WHERE constraint_type = 'PRIMARY KEY'").fetchall()}  # fmt: skip
        assert not tables & {"items", "verdicts", "llm_calls"}, "no key's index for DuckDB to hold"
    if keys == "older":
        with duckdb.connect(str(warehouse_path)) as db:
            db.execute("ALTER TABLE items ADD PRIMARY KEY (run_id, item_id)")
            db.execute("ALTER TABLE verdicts ADD PRIMARY KEY (run_id, item_id, stage, judge)")
            db.execute("ALTER TABLE llm_calls ADD PRIMARY KEY (call_id)")
    human = verdict("select-seed-q1-0", 40).model_copy(update={"judge": "human:ann", "decision": "pass"})
    with Warehouse(warehouse_path) as warehouse:
        warehouse.add_items([item("select", "seed", "q1", text="second")])
        warehouse.add_verdicts([human])
        warehouse.add_call(call(1))
        warehouse.flush()
        warehouse.add_items([item("select", "seed", "q1", text="third"), item("select", "seed", "q3")])
        warehouse.add_verdicts([human.model_copy(update={"decision": "reject"})])
        warehouse.flush()
        assert items_and_verdicts(warehouse) == [
            ("select-seed-q1-0", '{"text": "third"}'), ("select-seed-q2-0", "{}"), ("select-seed-q3-0", "{}"),
            ("select-seed-q1-0", "human:ann", "reject"), ("select-seed-q1-0", "rule:query_length", "reject"),
        ]  # fmt: skip


@pytest.mark.parametrize("where", ["_let_blocks_go", "_written.add"])
def test_a_batch_interrupted_after_its_commit_is_not_written_twice(
    warehouse_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Ctrl-C can land after a flush's commit, as the writer tidies up or notes the keys it wrote: the batch is
    put back, as a failed one is, and the next write finds its rows in the file instead of adding them again."""
    with Warehouse(warehouse_path) as warehouse:
        owner = warehouse._written if where == "_written.add" else warehouse
        name = where.rsplit(".", 1)[-1]
        original = getattr(owner, name)

        def interrupted(*args: Any, **kwargs: Any) -> None:
            monkeypatch.setattr(owner, name, original)
            raise KeyboardInterrupt

        monkeypatch.setattr(owner, name, interrupted)
        warehouse.add_call(call(1))
        warehouse.add_items([item("select", "seed", "q1")])
        warehouse.add_verdicts([verdict("select-seed-q1-0", 40)])
        with pytest.raises(KeyboardInterrupt):
            warehouse.flush()
        warehouse.add_call(call(2))
        warehouse.flush()
        assert committed(warehouse) == 2
        assert len(items_and_verdicts(warehouse)) == 2


def test_a_background_batch_that_fails_after_its_commit_is_not_written_twice(
    warehouse_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "FLUSH_ROWS", 3)
    with Warehouse(warehouse_path) as warehouse:
        let_go = warehouse._let_blocks_go

        def failing(**kwargs: Any) -> None:
            if in_writer():
                monkeypatch.setattr(warehouse, "_let_blocks_go", let_go)
                raise RuntimeError("after the commit")

        monkeypatch.setattr(warehouse, "_let_blocks_go", failing)
        warehouse.add_items([item("select", "seed", "q1")])
        warehouse.add_verdicts([verdict("select-seed-q1-0", 40)])
        warehouse.add_call(call(1))  # the third row: written behind
        assert warehouse._writing is not None
        warehouse._writing.exception(timeout=10)
        with pytest.raises(RuntimeError, match="after the commit"):
            warehouse.flush()
        warehouse.flush()
        assert committed(warehouse) == 1
        assert len(items_and_verdicts(warehouse)) == 2


def test_a_shard_absorbed_twice_adds_nothing_the_second_time(tmp_path: Path) -> None:
    """The merge copies only the rows not there yet, by key, as ``INSERT OR IGNORE`` did."""
    shard = tmp_path / "shard.duckdb"
    with Warehouse(shard) as warehouse:
        warehouse.add_items([item("select", "seed", "q1", text="shard's"), item("select", "seed", "q2")])
        warehouse.add_verdicts([verdict("select-seed-q2-0", 40)])
        warehouse.add_call(call(1))
        warehouse.add_call(call(2))
    with Warehouse(tmp_path / "w.duckdb") as warehouse:
        warehouse.add_items([item("select", "seed", "q1", text="mine")])
        warehouse.add_call(call(1))
        warehouse.flush()
        warehouse.absorb(shard)
        once = items_and_verdicts(warehouse), committed(warehouse)
        warehouse.absorb(shard)
        assert (items_and_verdicts(warehouse), committed(warehouse)) == once
        assert once == (
            [("select-seed-q1-0", '{"text": "mine"}'), ("select-seed-q2-0", "{}"),
             ("select-seed-q2-0", "rule:query_length", "reject")],
            2,
        )  # fmt: skip
        warehouse.add_items([item("select", "seed", "q2", text="again")])  # an absorbed row, replaced
        warehouse.flush()
        assert items_and_verdicts(warehouse)[:2] == [
            ("select-seed-q1-0", '{"text": "mine"}'), ("select-seed-q2-0", '{"text": "again"}'),
        ]  # fmt: skip
        assert len(items_and_verdicts(warehouse)) == 3


def doc(i: int) -> dict[str, Any]:
    return {"doc_id": f"d{i}", "title": "", "text": f"passage {i}", "meta": "{}"}


def test_a_release_written_in_parts_replaces_the_old_one_only_when_finished(warehouse_path: Path) -> None:
    """The old release is what others read while the new one's parts are written; all of the new one after."""
    about: dict[str, Any] = {"name": "r", "run_id": None, "recipe": "instructir", "source": "demo"}
    with Warehouse(warehouse_path) as warehouse:
        warehouse.write_release(**about, card={"n": 1}, docs=[doc(0)], queries=[], qrels=[])
        with warehouse.writing_release(**about) as release:
            release.add(docs=[doc(1), doc(2)])
            release.add(docs=[doc(3)], qrels=[{"mode": "m", "query_id": "q", "doc_id": "d3", "score": 1}])
            assert [d["doc_id"] for d in warehouse.release_docs("r")] == ["d0"]  # (another cursor)
            release.finish({"n": 3})
            with pytest.raises(RuntimeError, match="finished"):
                release.add(docs=[doc(4)])  # its transaction is over: the row would be written on its own
        assert [d["doc_id"] for d in warehouse.release_docs("r")] == ["d1", "d2", "d3"]
        assert warehouse.release_qrels("r") == [{"mode": "m", "query_id": "q", "doc_id": "d3", "score": 1}]


def test_a_large_release_lets_what_its_open_transaction_holds_go(
    warehouse_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Until its commit, a release's transaction holds the rows added (and those DuckDB wrote ahead): past
    KEPT_BLOCK_BYTES they are let go after a part, the limit set back, and the commit keeps every row. The
    parts' Arrow tables are not held with them (a view registered for each held its table to the commit)."""
    about: dict[str, Any] = {"name": "r", "run_id": None, "recipe": "instructir", "source": "demo"}
    held = "SELECT sum(memory_usage_bytes) AS b FROM duckdb_memory() WHERE tag IN ('BASE_TABLE', 'IN_MEMORY_TABLE')"
    limit = "SELECT current_setting('memory_limit') AS m"
    monkeypatch.setattr(store, "KEPT_BLOCK_BYTES", 1 << 20)
    with Warehouse(warehouse_path) as warehouse:
        configured = query(warehouse, limit)[0]["m"]
        arrow = pa.total_allocated_bytes()
        with warehouse.writing_release(**about) as release:
            for part in range(0, 20_000, 2000):
                release.add(docs=[{**doc(i), "text": f"passage {i} " * 60} for i in range(part, part + 2000)])
                assert pa.total_allocated_bytes() - arrow < 1 << 20  # a part's table is 1.5 MB
                assert query(warehouse, held)[0]["b"] < 1 << 20
                assert query(warehouse, limit)[0]["m"] == configured
                assert warehouse.release_docs("r") == []  # (another cursor) not committed
            release.finish({"n": 20_000})
        docs = warehouse.release_docs("r")
        assert sorted(d["text"] for d in docs) == sorted(f"passage {i} " * 60 for i in range(20_000))


def test_a_release_left_unfinished_keeps_the_old_one(warehouse_path: Path) -> None:
    about: dict[str, Any] = {"name": "r", "run_id": "run-1", "recipe": "instructir", "source": "demo"}
    with Warehouse(warehouse_path) as warehouse:
        warehouse.write_release(**about, card={"n": 1}, docs=[doc(0)], queries=[], qrels=[])
        with pytest.raises(KeyboardInterrupt), warehouse.writing_release(**about) as release:
            release.add(docs=[doc(1)])
            raise KeyboardInterrupt  # the assembly stopped midway
        with pytest.raises(RuntimeError, match="left unfinished"), warehouse.writing_release(**about) as release:
            release.add(docs=[doc(2)])
        assert [d["doc_id"] for d in warehouse.release_docs("r")] == ["d0"]
        assert json.loads(warehouse.release_card("run-1") or "null") == {"n": 1}
        warehouse.write_release(**about, card={"n": 2}, docs=[doc(3)], queries=[], qrels=[])
        assert [d["doc_id"] for d in warehouse.release_docs("r")] == ["d3"]


def verdict(item: str, score: float, rule: str = "") -> VerdictRecord:
    reason = f"query length {score:g} chars outside [27, 35]"
    return VerdictRecord(run_id="run-1", item_id=item, stage="select", judge="rule:query_length", decision="reject",
                         score=score, threshold=35, reason=reason, rule=rule)  # fmt: skip


def test_reasons_group_by_rule_and_a_file_without_rules_by_reason(warehouse_path: Path) -> None:
    """``verdicts.rule`` came later: the reasons of a file without it group by their text, as they did."""
    with Warehouse(warehouse_path) as warehouse:
        warehouse.add_verdicts([verdict(f"seed-{n}", 36 + n % 3, "query length outside the band") for n in range(9)])
    with Warehouse(warehouse_path, read_only=True) as warehouse:
        (grouped,) = warehouse.removal_reasons("run-1")
        assert (grouped["rule"], grouped["n"], grouped["scores"]) == ("query length outside the band", 9,
                                                                     [36.0] * 3 + [37.0] * 3 + [38.0] * 3)  # fmt: skip
    with duckdb.connect(str(warehouse_path)) as db:
        db.execute("ALTER TABLE verdicts DROP COLUMN rule")  # as an older ifsynth left the file
    with Warehouse(warehouse_path, read_only=True) as warehouse:
        assert sorted(r["n"] for r in warehouse.removal_reasons("run-1")) == [3, 3, 3], "one row per text"
    with Warehouse(warehouse_path) as warehouse:
        warehouse.add_verdicts([verdict("seed-9", 40, "query length outside the band")])
    with Warehouse(warehouse_path, read_only=True) as warehouse:
        assert sorted(r["n"] for r in warehouse.removal_reasons("run-1")) == [1, 3, 3, 3]


def test_query_reads_and_refuses_anything_else(warehouse_path: Path) -> None:
    with Warehouse(warehouse_path) as warehouse:
        assert warehouse.query("SELECT 1 AS one") == [{"one": 1}]
        for statement in ("DELETE FROM llm_calls", "SELECT 1; DELETE FROM llm_calls", "CHECKPOINT"):
            with pytest.raises(WarehouseError, match="one SELECT"):
                warehouse.query(statement)


def test_the_cache_answers_every_way_an_answer_arrives_and_skips_keys_never_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys are SHA-256 in hex; a lookup goes to the file only for keys it may answer."""

    def answered(key: str, *, error: str | None = None) -> CallRecord:
        return call(0, error=error).model_copy(update={"key": key, "call_id": f"call-{key}"})

    hexed = [f"{n:016x}{0:048x}" for n in range(1, 7)]
    other = tmp_path / "shard.duckdb"
    with Warehouse(other) as shard:
        shard.add_call(answered(hexed[5]))
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.add_call(answered(hexed[0]))
        wh.flush()
        lookups: list[str] = []
        sql = wh._sql

        def counted(query: str, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
            lookups.extend([query] if "FROM llm_calls" in query else [])
            return sql(query, *args, **kwargs)

        monkeypatch.setattr(wh, "_sql", counted)
        assert set(wh.cached([hexed[0], hexed[1]])) == {hexed[0]}
        assert len(lookups) == 1
        assert wh.cached([hexed[1], hexed[2]]) == {} and len(lookups) == 1, "never answered: the file is not read"
        wh.add_call(answered(hexed[2]))  # answered after the file's keys were read, then written
        wh.add_call(answered(hexed[3], error="HTTP 500"))
        wh.add_call(answered("not-hex"))
        wh.flush()
        assert set(wh.cached([hexed[2], hexed[3], "not-hex"])) == {hexed[2], "not-hex"}
        wh.absorb(other)
        assert set(wh.cached([hexed[5]])) == {hexed[5]}, "a shard's answers, absorbed, are answers"
    with Warehouse(tmp_path / "fresh.duckdb") as wh:
        wh.add_call(answered(hexed[4]))  # answered before the file's keys are read, still buffered when they are
        assert wh.cached([hexed[1]]) == {}
        wh.flush()
        assert set(wh.cached([hexed[4]])) == {hexed[4]}, "an answer buffered while the keys were read"


def test_a_stages_items_come_in_pages_of_whole_groups_in_group_order(warehouse_path: Path) -> None:
    """Each page holds the next ``page`` groups of the stage, a group never split, its items in their order; a
    page's groups are read with it, so a group with no item of the status asked gives a page without it."""
    groups = ["g3", "g1", "", "g2", "g10", "g4"]  # an empty group id sorts first, and is a group like the others
    made = [item("rewrite", "pair", group, ord) for group in groups for ord in (1, 0)]
    made += [item("judge", "pair", "g1", 0), item("rewrite", "pair", "g5", 0).model_copy(update={"status": "rejected"})]
    with Warehouse(warehouse_path) as warehouse:
        warehouse.add_items(made)
        pages = [[(i.group_id, i.ord) for i in page] for page in warehouse.items("instructir-run", "rewrite", page=2)]
        assert pages == [
            [("", 0), ("", 1), ("g1", 0), ("g1", 1)],
            [("g10", 0), ("g10", 1), ("g2", 0), ("g2", 1)],
            [("g3", 0), ("g3", 1), ("g4", 0), ("g4", 1)],
            [],  # g5: its one item is rejected
        ]
        every = list(warehouse.items("instructir-run", "rewrite", status=None, page=4))
        assert [len(page) for page in every] == [8, 5]
        assert [i.group_id for i in every[1]] == ["g3", "g3", "g4", "g4", "g5"]
        assert list(warehouse.items("instructir-run", "absent")) == []


def test_a_release_counts_its_query_groups_and_a_stage_accepts_its_ok_items(warehouse_path: Path) -> None:
    """What InstructIR's assembly no longer holds to the end: the groups of the queries written so far,
    counted in the open release, and the status of the stage's items it read (its ``ok`` ones)."""
    about: dict[str, Any] = {"name": "r", "run_id": "instructir-run", "recipe": "instructir", "source": "demo"}

    def queries(*groups: str) -> list[dict[str, Any]]:
        return [{"mode": "m", "query_id": f"{g}_{n}", "group_id": g, "query": "", "instruction": "", "meta": "{}"}
                for n, g in enumerate(groups)]  # fmt: skip

    with Warehouse(warehouse_path) as warehouse:
        warehouse.write_release(**{**about, "name": "other"}, card={}, docs=[], queries=queries("x", "y"), qrels=[])
        with warehouse.writing_release(**about) as release:
            release.add(queries=queries("q1", "q1", "q2"))
            release.add(queries=queries("q2", "q3"), docs=[doc(1)])
            assert release.query_groups() == 3  # its own rows, not yet committed; not the other release's
            release.finish({})
            with pytest.raises(RuntimeError, match="finished"):
                release.query_groups()
        rejected = item("rewrite", "pair", "q2").model_copy(update={"status": "rejected"})
        warehouse.add_items([item("rewrite", "pair", "q1"), rejected, item("judge", "pair", "q1")])
        warehouse.set_stage_status("instructir-run", "rewrite", "accepted")
        statuses = query(warehouse, "SELECT stage, group_id, status FROM items ORDER BY ALL")
        assert [tuple(row.values()) for row in statuses] == [
            ("judge", "q1", "ok"), ("rewrite", "q1", "accepted"), ("rewrite", "q2", "rejected"),
        ]  # fmt: skip
