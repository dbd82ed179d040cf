"""What people review and what they decided: machine verdicts to look at, human verdicts written beside them,
and the pairs that measure how far the judges agree with people.

A human verdict is a row of ``verdicts`` like any other, at the stage of the verdict it answers, with the
judge ``human:<reviewer>``: one per reviewer, item and stage, so a second look replaces the first and two
reviewers keep theirs. Clearing a stage for a rerun keeps them (``store.py``)."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any, Literal

from ifsynth.schemas.errors import WarehouseError
from ifsynth.schemas.records import VerdictRecord
from ifsynth.warehouse.store import Warehouse

Status = Literal["rejected", "ok", "all"]
HUMAN = "human"
_NAME = re.compile(r"[^a-z0-9_]+")


def human_judge(reviewer: str) -> str:
    """The judge name of a reviewer's verdicts: ``human:<name>``, the name cut to what a judge name holds."""
    name = _NAME.sub("_", reviewer.strip().lower()).strip("_")
    if not name:
        raise WarehouseError(f"reviewer `{reviewer}` has no letter or digit to name the verdicts by")
    return f"{HUMAN}:{name}"


def machine_verdicts(
    warehouse: Warehouse, run_id: str, *, stage: str | None = None, status: Status = "rejected"
) -> list[dict[str, Any]]:
    """The LLM verdicts of a run that a person may review, with the item they decided and its parents' payloads
    (the query and instruction a passage was written for). ``rejected``: what a judge removed; ``ok``: what it
    let through; ``all``: both. Parse errors and failed calls are no judgment to agree with."""
    decisions = {"rejected": ("reject",), "ok": ("pass",), "all": ("pass", "reject")}[status]
    conditions, params = ["v.run_id = ?", "v.judge LIKE 'llm%'", "v.decision IN ?"], [run_id, list(decisions)]
    if stage is not None:
        conditions.append("v.stage = ?")
        params.append(stage)
    return warehouse._sql(
        "SELECT v.item_id, v.stage, v.judge, v.decision, v.score, v.threshold, v.reason, v.call_key, "
        "i.kind, i.group_id, i.payload, "
        "(SELECT list(p.payload ORDER BY p.item_id) FROM items p WHERE p.run_id = i.run_id "
        " AND list_contains(i.parent_ids, p.item_id)) AS parents "
        "FROM verdicts v JOIN items i ON i.run_id = v.run_id AND i.item_id = v.item_id "
        f"WHERE {' AND '.join(conditions)} ORDER BY v.stage, v.item_id, v.judge",
        params,
    )


def stratified(rows: Sequence[dict[str, Any]], n: int | None, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` rows spread evenly over (stage, decision), so a review of 100 says something about every judge;
    a stratum with fewer rows than its share gives the rest to the others. The same seed, the same sample."""
    if n is None or n >= len(rows):
        return list(rows)
    strata: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        strata.setdefault((row["stage"], row["decision"]), []).append(row)
    rng = random.Random(seed)
    for members in strata.values():
        rng.shuffle(members)
    chosen: list[dict[str, Any]] = []
    pools = sorted(strata.items())
    while len(chosen) < n:
        for _, members in pools:
            if members and len(chosen) < n:
                chosen.append(members.pop())
    return sorted(chosen, key=lambda r: (r["stage"], r["item_id"], r["judge"]))


def record(warehouse: Warehouse, verdicts: Sequence[VerdictRecord]) -> None:
    """Write human verdicts at once: a review closed mid-way keeps every decision already made."""
    if any(not v.judge.startswith(f"{HUMAN}:") for v in verdicts):
        raise WarehouseError("only human verdicts are written by a review")
    if not verdicts:
        return
    known = {  # only the verdicts decided here: the page records one decision per key press
        (r["item_id"], r["stage"])
        for r in warehouse._sql(
            "SELECT DISTINCT item_id, stage FROM verdicts WHERE run_id = ? AND item_id IN ? "
            "AND judge NOT LIKE 'human%'",
            [verdicts[0].run_id, sorted({v.item_id for v in verdicts})],
        )
    }
    for v in verdicts:
        if (v.item_id, v.stage) not in known:
            raise WarehouseError(f"run {v.run_id} has no verdict on item {v.item_id} at stage {v.stage} to review")
    warehouse.add_verdicts(verdicts)
    warehouse.flush()


def decisions(warehouse: Warehouse, run_id: str) -> dict[tuple[str, str], str]:
    """(item, stage) -> what people decided there, the newest human verdict counting."""
    rows = warehouse._sql(
        "SELECT item_id, stage, decision FROM verdicts WHERE run_id = ? AND judge LIKE 'human%' "
        "QUALIFY row_number() OVER (PARTITION BY item_id, stage ORDER BY created_at DESC, judge) = 1",
        [run_id],
    )
    return {(r["item_id"], r["stage"]): r["decision"] for r in rows}


def pairs(warehouse: Warehouse, run_id: str) -> list[dict[str, Any]]:
    """Every (stage, LLM judge, item) that a person decided too: the LLM's decision and the newest human one."""
    return warehouse._sql(
        "WITH people AS (SELECT item_id, stage, decision FROM verdicts WHERE run_id = ? AND judge LIKE 'human%' "
        "QUALIFY row_number() OVER (PARTITION BY item_id, stage ORDER BY created_at DESC, judge) = 1) "
        "SELECT m.stage, m.judge, m.item_id, m.decision AS llm, p.decision AS human "
        "FROM verdicts m JOIN people p ON p.item_id = m.item_id AND p.stage = m.stage "
        "WHERE m.run_id = ? AND m.judge LIKE 'llm%' AND m.decision IN ('pass', 'reject') "
        "ORDER BY m.stage, m.judge, m.item_id",
        [run_id, run_id],
    )


def forget(warehouse: Warehouse, run_id: str, item_id: str, stage: str, judge: str) -> None:
    """Take back one person's verdict (a review's undo)."""
    if not judge.startswith(f"{HUMAN}:"):
        raise WarehouseError("a review takes back only human verdicts")
    warehouse.flush()
    warehouse._execute(
        "DELETE FROM verdicts WHERE run_id = ? AND item_id = ? AND stage = ? AND judge = ?",
        [run_id, item_id, stage, judge],
    )


def siblings(warehouse: Warehouse, run_id: str, item_id: str) -> list[dict[str, Any]]:
    """The items made from the same parent by the same stage (InstructIR's other rewrites of a passage, the
    passages of an InF-IR tuple), with their status: what a judge chose among, or compared against."""
    return warehouse._sql(
        "SELECT s.item_id, s.kind, s.status, s.payload FROM items i JOIN items s ON s.run_id = i.run_id "
        "AND s.stage = i.stage AND s.item_id <> i.item_id AND len(list_intersect(s.parent_ids, i.parent_ids)) > 0 "
        "WHERE i.run_id = ? AND i.item_id = ? ORDER BY s.ord, s.item_id",
        [run_id, item_id],
    )
