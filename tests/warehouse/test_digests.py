"""Keys held as 64-bit digests: the cache's answered keys, and the keys of a run's items and verdicts, which
a write replaces by key without a primary key's index."""

from __future__ import annotations

from array import array
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from ifsynth.warehouse import digests
from ifsynth.warehouse.digests import AnsweredKeys, Digests, WrittenKeys


def test_keys_answered_during_a_run_are_kept_as_sorted_prefixes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight bytes a key once merged, not a string each: a long run's answers would grow its memory."""
    monkeypatch.setattr(digests, "MERGE", 3)
    keys = [f"{n * 7919:016x}{n:048x}" for n in range(1, 11)]
    at = datetime(2026, 1, 1)
    answered = AnsweredKeys(array("Q", [1 * 7919]), array("q", [0]))  # the file answered the first key
    for key in keys[1:]:
        answered.add((k, at) for k in [key, "not-hex", f"-{key[1:]}", f" {key[1:]}"])  # int() takes a sign, a space
    ordered = answered.prefixes.ordered
    assert len(ordered) >= 9 and list(ordered) == sorted(ordered)
    assert list(answered.held(keys)) == keys and answered.held(["not-hex"]) == {"not-hex": None}
    assert answered.held([f"-{keys[0][1:]}"]) == {f"-{keys[0][1:]}": None}, "not hex: it may always be there"
    assert answered.held(f"{n * 7919 + 1:016x}{n:048x}" for n in range(1, 11)) == {}


def test_each_key_is_held_with_the_earliest_answer_under_its_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each prefix keeps the time of its first answer, before and after the merge, whichever order they came in;
    a key that is not hex may have been answered at any time, so it has none."""
    monkeypatch.setattr(digests, "MERGE", 4)
    start = datetime(2026, 1, 1, 12)
    key = {n: f"{n:016x}" + "0" * 48 for n in range(1, 9)}
    answered = AnsweredKeys(array("Q", [1, 2]), array("q", [0, 10]))  # as read from the file
    assert answered.held([key[2]]) == {key[2]: datetime(1970, 1, 1) + timedelta(microseconds=10)}
    answered.add([(key[3], start + timedelta(seconds=5)), (key[3], start + timedelta(seconds=1))])
    assert answered.held([key[3], key[7]]) == {key[3]: start + timedelta(seconds=1)}
    answered.add([(key[4], start), (key[5], start), (key[6], start)])  # merged now
    assert answered.prefixes.times is not None and len(answered.prefixes.ordered) == 6
    answered.add([(key[3], start + timedelta(seconds=9)), (key[3], start - timedelta(seconds=2))])
    assert answered.held([key[3]]) == {key[3]: start - timedelta(seconds=2)}
    answered.add([(key[2], start), (key[4], start - timedelta(days=1)), (key[7], start)])  # merged again
    assert list(answered.prefixes.ordered) == [1, 2, 3, 4, 5, 6, 7], "a prefix answered again is held once"
    assert answered.held([key[2]])[key[2]] == datetime(1970, 1, 1) + timedelta(microseconds=10), "the earlier kept"
    assert answered.held([key[3]])[key[3]] == start - timedelta(seconds=2)
    assert answered.held([key[4]])[key[4]] == start - timedelta(days=1)
    assert answered.held([key[3], key[5]]) == {key[3]: start - timedelta(seconds=2), key[5]: start}
    assert answered.held([key[3], "not-hex"]) == {key[3]: start - timedelta(seconds=2), "not-hex": None}
    aware = start.replace(tzinfo=UTC) + timedelta(hours=1)  # counted as its UTC, as DuckDB stores it
    answered.add([(key[8], aware)])
    assert answered.held([key[8]])[key[8]] == start + timedelta(hours=1)


def test_digests_added_since_are_found_before_and_after_they_are_merged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(digests, "MERGE", 4)
    held = Digests(array("Q", [5, 9]))
    held.add([7, 2**64 - 1])
    assert list(held.ordered) == [5, 9] and 7 in held and 2**64 - 1 in held
    held.add([1, 3])
    assert list(held.ordered) == [1, 3, 5, 7, 9, 2**64 - 1] and held.times is None
    assert all(n in held for n in (1, 3, 5, 7, 9, 2**64 - 1)) and not any(n in held for n in (0, 4, 8, 10))
    held.add([5, 9, 3, 11])  # three held already: each is held once after the merge
    assert list(held.ordered) == [1, 3, 5, 7, 9, 11, 2**64 - 1]


class Spy:
    """A DuckDB cursor that keeps the statements run on it."""

    def __init__(self, cursor: duckdb.DuckDBPyConnection) -> None:
        self.cursor, self.statements = cursor, list[str]()

    def execute(self, sql: str, *args: Any) -> Spy:
        self.statements.append(sql)
        self.cursor.execute(sql, *args)
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cursor, name)


def items(*keys: tuple[str, str], payload: str = "") -> list[dict[str, Any]]:
    return [{"run_id": run, "item_id": item, "payload": payload} for run, item in keys]


def insert(db: duckdb.DuckDBPyConnection, rows: list[dict[str, Any]]) -> None:
    db.register("incoming", pa.Table.from_pylist(rows))
    db.execute("INSERT INTO items SELECT run_id, item_id, payload FROM incoming")


def test_a_write_deletes_the_rows_it_replaces_and_looks_for_none_when_its_keys_are_new(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run's keys are read once, at its first write; after that, a new key costs no query at all, and a key
    written before (in the file when the run was read, or committed since) replaces its row."""
    monkeypatch.setattr(digests, "READ_ROWS", 2)  # the file's keys read a few at a time
    db = duckdb.connect()
    db.execute("CREATE TABLE items (run_id VARCHAR, item_id VARCHAR, payload VARCHAR)")
    insert(db, items(("r1", "a"), ("r1", "b"), ("r1", "c"), ("r2", "x"), payload="old"))
    written, spy = WrittenKeys({"items": ("run_id", "item_id")}), Spy(db)

    def write(rows: list[dict[str, Any]]) -> list[str]:
        """As the warehouse writes: the rows that may be there deleted, all inserted, their digests noted."""
        spy.statements.clear()
        present, made = written.present(spy, "items", rows)  # type: ignore[arg-type]
        if present:
            db.register("present", pa.Table.from_pylist(list(present)))
            spy.execute("DELETE FROM items t USING present p WHERE t.run_id = p.run_id AND t.item_id = p.item_id")
        insert(db, rows)
        written.add("items", made)
        return spy.statements

    first = write(items(("r1", "d"), ("r1", "e")))
    assert len(first) == 1 and first[0].startswith("SELECT"), "the run's keys, read once"
    assert write(items(("r1", "f"))) == [], "new keys: nothing read, nothing deleted"
    replaced = write(items(("r1", "a"), ("r1", "d"), ("r1", "g"), payload="new"))
    assert [s.split()[0] for s in replaced] == ["DELETE"]
    assert write(items(("r2", "x"), payload="new"))[-1].startswith("DELETE"), "another run: read, then replaced"
    rows = db.execute("SELECT run_id, item_id, payload FROM items ORDER BY ALL").fetchall()
    assert rows == [
        ("r1", "a", "new"), ("r1", "b", "old"), ("r1", "c", "old"), ("r1", "d", "new"), ("r1", "e", ""),
        ("r1", "f", ""), ("r1", "g", "new"), ("r2", "x", "new"),
    ]  # fmt: skip
    written.forget("r2")
    assert write(items(("r1", "h"))) == [], "another run's keys forgotten"
    assert write(items(("r2", "y")))[0].startswith("SELECT"), "forgotten: read again"
    written.forget()
    assert write(items(("r1", "i")))[0].startswith("SELECT")


def test_a_read_of_a_runs_keys_cut_short_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept, it would miss keys that are in the file, and a write would add their rows a second time."""
    monkeypatch.setattr(digests, "READ_ROWS", 2)
    db = duckdb.connect()
    db.execute("CREATE TABLE items (run_id VARCHAR, item_id VARCHAR, payload VARCHAR)")
    insert(db, items(("r1", "a"), ("r1", "b"), ("r1", "c"), payload="old"))
    written = WrittenKeys({"items": ("run_id", "item_id")})

    class CutShort(Spy):
        def fetchmany(self, size: int) -> list[Any]:
            if self.statements.count("fetched") == 1:
                raise KeyboardInterrupt
            self.statements.append("fetched")
            return self.cursor.fetchmany(size)

    with pytest.raises(KeyboardInterrupt):
        written.present(CutShort(db), "items", items(("r1", "c")))  # type: ignore[arg-type]
    spy = Spy(db)
    present, _ = written.present(spy, "items", items(("r1", "c"), payload="new"))  # type: ignore[arg-type]
    assert [s.split()[0] for s in spy.statements] == ["SELECT"], "read again whole"
    assert present == items(("r1", "c"), payload="new")
