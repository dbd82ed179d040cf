"""Read-side questions about runs: the list, the funnel, what was removed and why, one item's history."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from ifsynth.schemas.errors import ConfigError, UnknownItem
from ifsynth.warehouse.store import Warehouse


def runs(warehouse: Warehouse) -> list[dict[str, Any]]:
    return [{**row, "status": warehouse.shown_status(row["status"])} for row in warehouse.runs_summary()]


def funnel(warehouse: Warehouse, ref: str | None = None) -> dict[str, Any]:
    run = warehouse.run(ref)
    stages = warehouse.funnel_stages(run.run_id)
    calls = warehouse.call_totals(run.run_id)
    accepted = warehouse.count_items(run.run_id, None, "accepted")
    judges = _judges(warehouse, run.run_id)
    for stage in stages:
        if stage["stage"] in judges:
            stage["judges"] = judges[stage["stage"]]
    return {
        "run": run.run_id,
        "name": run.name,
        "recipe": run.recipe,
        "status": run.status,
        "stages": stages,
        "accepted": accepted,
        "llm_calls": {
            "sent": calls["sent"],
            "cached": sum(stage["cached"] for stage in stages),
            "failed": calls["failed"],
            "transient": calls["transient"],  # failed attempts a rerun may cure: timeouts, 429, 5xx
            "terminal": calls["terminal"],  # the rest: a rerun asks the same
        },
        "tokens": {"prompt": calls["prompt_tokens"], "completion": calls["completion_tokens"]},
        "cost_usd": calls["cost"],
    }


def _judges(warehouse: Warehouse, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Per-judge yields of each stage that decides its inputs several ways (InF-IR's three judgments), read
    in one query for the run."""
    by_stage: dict[str, list[dict[str, Any]]] = {}
    for row in warehouse.judge_yields(run_id):
        stage = row.pop("stage")
        row["yield"] = round(row["passed"] / row["judged"], 4) if row["judged"] else None
        by_stage.setdefault(stage, []).append(row)
    return {stage: rows for stage, rows in by_stage.items() if len(rows) >= 2}


def audit(
    warehouse: Warehouse,
    ref: str | None = None,
    *,
    stage: str | None = None,
    status: str | None = None,
    limit: int | None = 50,
) -> list[dict[str, Any]]:
    """Items with the verdict that decided them; by default every item that did not go through.

    An item judged several ways (an InF-IR tuple's three judgments) shows one failing verdict in full and
    lists every judge that failed it at that stage in ``failed_judges``. An item whose call failed or gave no
    usable answer says whether a rerun may cure that (``failure``: transient or terminal). A stage the run
    does not have is refused with those it has: a misspelt one would list nothing, as if all were well."""
    run_id = warehouse.run(ref).run_id
    if stage is not None:
        names = warehouse.stage_names(run_id)
        if stage not in names:
            raise ConfigError(
                f"--stage `{stage}` is no stage of run {run_id}; its stages: {', '.join(names) or 'none yet'}"
            )
    return warehouse.decided_items(run_id, stage=stage, status=status, limit=limit)


BARS = "▁▂▃▄▅▆▇█"
BINS = 8
EMPTY = "·"  # a bin with no value: a space would vanish in HTML


def reasons(warehouse: Warehouse, ref: str | None = None, stage: str | None = None) -> list[dict[str, Any]]:
    """Why items left: one row per (stage, judge, decision, rule) with its count, the spread of the values it
    measured (range, quartiles and a text histogram of ``BINS`` bars) and the thresholds it held them to."""
    rows = warehouse.removal_reasons(warehouse.run(ref).run_id, stage)
    for row in rows:
        scores = row.pop("scores") or []
        low, high = row.pop("threshold_min"), row.pop("threshold_max")
        row["measured"] = _spread(scores) if scores else None
        row["threshold"] = None if low is None else {"min": low, "max": high}
    return rows


def _spread(values: list[float]) -> dict[str, Any]:
    q1, median, q3 = (float(q) for q in np.quantile(values, [0.25, 0.5, 0.75]))
    counts, _ = np.histogram(values, bins=min(BINS, len(set(values))))
    top = int(counts.max())
    bars = "".join(BARS[math.ceil(int(c) / top * len(BARS)) - 1] if c else EMPTY for c in counts)
    return {"min": values[0], "quartiles": [q1, median, q3], "max": values[-1], "histogram": bars}


def spread_text(row: dict[str, Any]) -> tuple[str, str]:
    """A reasons row's measured values (range, median, histogram) and thresholds, as two short texts."""
    measured, threshold = row["measured"], row["threshold"]
    shown = ""
    if measured is not None:
        span = (
            f"{measured['min']:g}" if measured["min"] == measured["max"] else f"{measured['min']:g}-{measured['max']:g}"
        )
        shown = f"{span} (median {measured['quartiles'][1]:g}) {measured['histogram']}".rstrip()
    limit = ""
    if threshold is not None:
        limit = (
            f"{threshold['min']:g}"
            if threshold["min"] == threshold["max"]
            else f"{threshold['min']:g}-{threshold['max']:g}"
        )
    return shown, limit


def show(warehouse: Warehouse, item: str, ref: str | None = None) -> dict[str, Any]:
    """An item, its lineage up to the seed, its verdicts, and every LLM call behind them."""
    run_id = warehouse.run(ref).run_id if ref else _latest_run_with(warehouse, item)
    record = _item(warehouse, run_id, item)
    parents = []
    frontier, seen = list(record["parent_ids"]), set(record["parent_ids"])
    while frontier:
        parent = _item(warehouse, run_id, frontier.pop(0))
        parents.append(parent)
        frontier.extend(p for p in parent["parent_ids"] if p not in seen)
        seen.update(parent["parent_ids"])
    verdicts = warehouse.item_verdicts(run_id, item)
    keys = list(record["call_keys"]) + [v["call_key"] for v in verdicts if v["call_key"]]
    used_by = warehouse.children(run_id, item)
    for child in used_by:  # what became of this item downstream, e.g. the judgments of a tuple it is part of
        child["verdicts"] = sorted(warehouse.item_verdicts(run_id, child["item_id"]), key=lambda v: v["judge"])
    call_keys = list(dict.fromkeys(keys))
    attempts = warehouse.call_attempts(call_keys)
    return {
        "run": run_id,
        "item": record,
        "parents": parents,
        "verdicts": verdicts,
        "used_by": used_by,
        "llm_calls": [_call(key, attempts.get(key, [])) for key in call_keys],
    }


def _latest_run_with(warehouse: Warehouse, item: str) -> str:
    run_id = warehouse.latest_run_with(item)
    if run_id is None:
        raise UnknownItem(item)
    return run_id


def _item(warehouse: Warehouse, run_id: str, item: str) -> dict[str, Any]:
    row = warehouse.item_row(run_id, item)
    if row is None:
        raise UnknownItem(item)
    row["payload"] = json.loads(row["payload"]) if row["payload"] else None
    return row


def _call(key: str, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """The answer a key stands for (the successful attempt if there is one), with its failed attempts."""
    if not attempts:
        return {"key": key, "missing": True}
    answer = attempts[0]
    request = json.loads(answer.pop("request"))
    messages = request.pop("messages")
    return {
        "key": key,
        **answer,
        "messages": messages,
        "parameters": request,
        "failed_attempts": [
            {"attempt": a["attempt"], "http_status": a["http_status"], "error": a["error"], "failure": a["failure"]}
            for a in attempts[1:]
            if a["error"]
        ],
    }
