"""Sets of keys held as 64-bit digests, eight bytes a key: which keys the warehouse file may hold, asked before
a query that would otherwise read every key in it.

A digest set may say a key is there when it is not (two keys with one digest, a row deleted since), never the
reverse: a false yes costs the query it was meant to spare, nothing else. A time held with a digest may be
earlier than its key's (another key's, of the same digest), never later: a lookup that does not find the key
at that time reads on from it, never from later.
"""

from __future__ import annotations

import hashlib
import re
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb

# Digests added since the sorted ones were made are held in a dict (about 100 bytes each) before joining them (8
# bytes, 16 with a time): this many, or a sixteenth of the sorted ones if more, since a merge copies them all.
MERGE = 4096
# A run's keys are read this many at a time.
READ_ROWS = 10_000

_HEX = re.compile("[0-9a-fA-F]+")
_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=UTC)


class Digests:
    """64-bit digests, sorted, with those added since merged in a few thousand at a time. A set made with
    ``times`` holds beside each digest the earliest time noted with it (``add_timed``, ``earliest``)."""

    def __init__(self, ordered: array[int] | None = None, times: array[int] | None = None) -> None:
        self.ordered = array("Q") if ordered is None else ordered
        self.times = times  # beside ``ordered``, or None: a set without times
        self._since: dict[int, int] = {}

    def add(self, digests: Iterable[int]) -> None:
        self._since.update(dict.fromkeys(digests, 0))
        self._merge_if_due()

    def add_timed(self, stamped: Iterable[tuple[int, int]]) -> None:
        """Digests, each with a time."""
        for digest, time in stamped:
            if (held := self._since.get(digest)) is None or time < held:
                self._since[digest] = time
        self._merge_if_due()

    def _merge_if_due(self) -> None:
        if len(self._since) < max(MERGE, len(self.ordered) // 16):
            return
        ordered, times = array("Q"), None if self.times is None else array("q")
        at = 0
        for digest, time in sorted(self._since.items()):  # the sorted ones copied a slice at a time between them
            place = bisect_left(self.ordered, digest, at)
            ordered.extend(self.ordered[at:place])
            held = place < len(self.ordered) and self.ordered[place] == digest
            if times is not None and self.times is not None:
                times.extend(self.times[at:place])
                times.append(min(time, self.times[place]) if held else time)
            ordered.append(digest)
            at = place + 1 if held else place  # a digest held already is held once
        ordered.extend(self.ordered[at:])
        if times is not None and self.times is not None:
            times.extend(self.times[at:])
        self.ordered, self.times = ordered, times
        self._since.clear()

    def __contains__(self, digest: int) -> bool:
        at = bisect_left(self.ordered, digest)
        return (at < len(self.ordered) and self.ordered[at] == digest) or digest in self._since

    def earliest(self, digest: int) -> int | None:
        """The earliest time noted with ``digest`` in a set with times, or None if it is not there."""
        assert self.times is not None, "a set without times"
        found = self._since.get(digest)
        at = bisect_left(self.ordered, digest)
        if at < len(self.ordered) and self.ordered[at] == digest:
            found = self.times[at] if found is None else min(found, self.times[at])
        return found


class AnsweredKeys:
    """Which request keys the file may hold an answer for: the first 64 bits of each (a key is a SHA-256 in
    hex), with those of the keys answered since; and with each, when the first answer under it was written.

    A cache lookup is a query over the calls in the file, whatever the number of keys, so one for requests
    never answered (a new run's) costs as much as one that finds them; asked only for the keys that may be
    there, a new run makes almost no lookups. A lookup reads the calls at its keys' times: calls are appended
    as they are answered and DuckDB keeps each row group's range of times, so it reads the row groups of
    those answers alone. Without the times, each request a run repeats scanned every call in the file: in one
    of 300,000 calls, 23-29 ms and 15 MB of table blocks a lookup (bench/README.md, "Twenty-first round");
    bounded by the earliest time alone, a request answered early in a run read every call written since, so
    lookups grew with the run (bench/README.md, "Twenty-fifth round"). A key that is not hex may always be
    there, written at any time. As whole keys, the keys answered since the file was read were 10 MB of a
    20,000-seed run's memory, growing with its calls; as prefixes and times they are 16 bytes a call."""

    def __init__(self, prefixes: array[int], times: array[int]) -> None:
        self.prefixes = Digests(prefixes, times)

    @classmethod
    def read(cls, cursor: duckdb.DuckDBPyConnection) -> AnsweredKeys:
        cursor.execute(
            "SELECT TRY_CAST('0x' || key[1:16] AS UBIGINT) AS prefix, min(epoch_us(created_at)) FROM llm_calls "
            "WHERE error IS NULL GROUP BY prefix HAVING prefix IS NOT NULL ORDER BY prefix"
        )
        prefixes, times = array("Q"), array("q")
        while rows := cursor.fetchmany(READ_ROWS):  # as rows of Python ints, a large file's would be 130 B each
            prefixes.extend(prefix for prefix, _ in rows)
            times.extend(time for _, time in rows)
        return cls(prefixes, times)

    def add(self, answers: Iterable[tuple[str, datetime]]) -> None:
        """Keys answered since, each with its answer's ``created_at``."""
        self.prefixes.add_timed((prefix, _micros(at)) for key, at in answers if (prefix := _prefix(key)) is not None)

    def held(self, keys: Iterable[str]) -> dict[str, datetime | None]:
        """The keys the file may answer, each with the earliest time an answer was noted under its 64 bits (its
        own first answer's, or another key's of the same bits, earlier); None for a key that is not hex, which
        may have been answered at any time."""
        held: dict[str, datetime | None] = {}
        for key in keys:
            if (prefix := _prefix(key)) is None:
                held[key] = None
            elif (first := self.prefixes.earliest(prefix)) is not None:
                held[key] = _EPOCH + timedelta(microseconds=first)
        return held


def _micros(at: datetime) -> int:
    """Microseconds since 1970, as DuckDB's ``epoch_us`` counts a TIMESTAMP (an aware time as its UTC)."""
    return (at - (_EPOCH_UTC if at.tzinfo is not None else _EPOCH)) // timedelta(microseconds=1)


def _prefix(key: str) -> int | None:
    """A key's first 64 bits, if they are hex digits (as ``read`` casts them: no sign, space or ``_``)."""
    head = key[:16]
    return int(head, 16) if _HEX.fullmatch(head) else None


class WrittenKeys:
    """The keys of the rows that tables replaced by key hold for the runs written to: read from the file at a
    run's first write to a table, and added to as batches are committed. So a write replaces a row of the same
    key, as a primary key's ``INSERT OR REPLACE`` did, and looks for one only when the key may be there.

    A primary key's index is held whole in memory while a run writes into it, and item ids are hashes, so
    every write touched all of it (12 MB in the middle of a 40,000-seed run, 20 MB before its release, with
    the calls'); a run's digests are eight bytes a row. A new run's writes find none of their keys and only
    append. Only one write uses it at a time (the warehouse writes one batch at a time)."""

    def __init__(self, keys: Mapping[str, tuple[str, ...]]) -> None:
        """``keys``: each table's key columns, ``run_id`` first."""
        self._keys = keys
        self._runs: dict[tuple[str, str], Digests] = {}

    def present(
        self, cursor: duckdb.DuckDBPyConnection, table: str, rows: Sequence[Mapping[str, Any]]
    ) -> tuple[list[Mapping[str, Any]], dict[str, set[int]]]:
        """The rows whose key ``table`` may hold already (the caller deletes those before it inserts), and every
        row's digest by run, for ``add`` once they are committed: each digest is made once."""
        columns = self._keys[table]
        present: list[Mapping[str, Any]] = []
        made: dict[str, set[int]] = {}
        for row in rows:
            key = tuple(row[c] for c in columns)
            digest = _digest(key)
            if digest in self._run(cursor, table, key[0]):
                present.append(row)
            made.setdefault(key[0], set()).add(digest)
        return present, made

    def add(self, table: str, made: Mapping[str, set[int]]) -> None:
        """The digests ``present`` made, once their rows are committed; a run not read yet is read whole at its
        next write instead."""
        for run_id, digests in made.items():
            if (held := self._runs.get((table, run_id))) is not None:
                held.add(digests)  # a key replaced is held once: the merge keeps a digest once

    def forget(self, run_id: str | None = None) -> None:
        """Read a run's keys (every run's, by default) again at its next write: after its rows were deleted (a
        stage cleared: written again, they would each cost a ``DELETE`` that finds nothing), added another way
        (a shard absorbed), or after a write that failed, committed or not."""
        for table, run in list(self._runs):
            if run_id is None or run == run_id:
                del self._runs[(table, run)]

    def _run(self, cursor: duckdb.DuckDBPyConnection, table: str, run_id: str) -> Digests:
        if (digests := self._runs.get((table, run_id))) is None:
            rest = self._keys[table][1:]
            cursor.execute(f"SELECT {', '.join(rest)} FROM {table} WHERE run_id = ?", [run_id])
            digests = Digests()  # held only once read whole: a read cut short would miss keys that are there
            while keys := cursor.fetchmany(READ_ROWS):  # a long run's keys, read whole, would be tens of MB
                digests.add(_digest((run_id, *key)) for key in keys)
            self._runs[(table, run_id)] = digests
        return digests


def _digest(key: tuple[str, ...]) -> int:
    return int.from_bytes(hashlib.blake2b("\x1f".join(key).encode(), digest_size=8).digest(), "little")
