"""Read-side questions about runs: the list, the funnel, what was removed and why, one item's history."""

from __future__ import annotations

import json
from typing import Any

from ifsynth.schemas.errors import UnknownItem
from ifsynth.warehouse.store import Warehouse


def runs(warehouse: Warehouse) -> list[dict[str, Any]]:
    rows = warehouse._sql(
        "SELECT r.run_id, r.name, r.recipe, r.status, r.started_at, r.ended_at, "
        "(SELECT count(DISTINCT q.query_id) FROM release_queries q JOIN releases s ON q.release = s.name "
        " WHERE s.run_id = r.run_id) AS accepted, "
        "(SELECT sum(c.cost) FROM llm_calls c WHERE c.run_id = r.run_id) AS cost_usd "
        "FROM runs r ORDER BY r.started_at"
    )
    return [{**row, "status": warehouse.shown_status(row["status"])} for row in rows]


def funnel(warehouse: Warehouse, ref: str | None = None) -> dict[str, Any]:
    run = warehouse.run(ref)
    stages = warehouse._sql(
        'SELECT stage, n_in AS "in", n_out AS out, coalesce(set_aside, 0) AS set_aside, rejected, parse_error, '
        "failed, cached, sent "
        "FROM stage_counts WHERE run_id = ? ORDER BY ord",
        [run.run_id],
    )
    calls = warehouse._sql(
        "SELECT count(*) AS sent, count(*) FILTER (WHERE error IS NOT NULL) AS failed, "
        "coalesce(sum(prompt_tokens), 0) AS prompt_tokens, coalesce(sum(completion_tokens), 0) AS completion_tokens, "
        "sum(cost) AS cost FROM llm_calls WHERE run_id = ?",
        [run.run_id],
    )[0]
    accepted = warehouse._sql("SELECT count(*) AS n FROM items WHERE run_id = ? AND status = 'accepted'", [run.run_id])[
        0
    ]["n"]
    for stage in stages:
        judges = _judges(warehouse, run.run_id, stage["stage"])
        if judges:
            stage["judges"] = judges
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
        },
        "tokens": {"prompt": calls["prompt_tokens"], "completion": calls["completion_tokens"]},
        "cost_usd": calls["cost"],
    }


def _judges(warehouse: Warehouse, run_id: str, stage: str) -> list[dict[str, Any]]:
    """Per-judge yields of a stage that decides its inputs several ways (InF-IR's three judgments)."""
    rows = warehouse._sql(
        "SELECT judge, count(*) AS judged, count(*) FILTER (WHERE decision = 'pass') AS passed, "
        "count(*) FILTER (WHERE decision = 'reject') AS rejected, "
        "count(*) FILTER (WHERE decision IN ('parse_error', 'failed')) AS unanswered "
        "FROM verdicts WHERE run_id = ? AND stage = ? AND judge LIKE 'llm:%' GROUP BY judge ORDER BY judge",
        [run_id, stage],
    )
    if len(rows) < 2:
        return []
    for row in rows:
        row["yield"] = round(row["passed"] / row["judged"], 4) if row["judged"] else None
    return rows


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
    lists every judge that failed it at that stage in ``failed_judges``."""
    run = warehouse.run(ref)
    conditions, params = ["i.run_id = ?"], [run.run_id]
    if stage is not None:
        conditions.append("(v.stage = ? OR (v.stage IS NULL AND i.stage = ?))")
        params += [stage, stage]
    if status is not None:
        conditions.append("i.status = ?")
        params.append(status)
    else:
        conditions.append("i.status NOT IN ('ok', 'accepted')")
    rows = warehouse._sql(
        "SELECT i.item_id, i.kind, i.group_id, i.stage AS made_by, i.status, v.stage AS decided_by, v.judge, "
        "v.decision, v.score, v.threshold, v.reason, "
        "(SELECT list(f.judge ORDER BY f.judge) FROM verdicts f WHERE f.run_id = i.run_id AND f.item_id = i.item_id "
        "AND f.stage = v.stage AND f.decision <> 'pass') AS failed_judges FROM items i "
        "LEFT JOIN verdicts v ON v.run_id = i.run_id AND v.item_id = i.item_id "
        f"WHERE {' AND '.join(conditions)} "
        "QUALIFY row_number() OVER (PARTITION BY i.item_id ORDER BY (v.decision = 'pass'), v.created_at DESC) = 1 "
        "ORDER BY i.group_id, i.ord, i.item_id" + (f" LIMIT {int(limit)}" if limit else ""),
        params,
    )
    return rows


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
    verdicts = warehouse._sql(
        "SELECT stage, judge, decision, score, threshold, reason, call_key FROM verdicts "
        "WHERE run_id = ? AND item_id = ? ORDER BY created_at",
        [run_id, item],
    )
    keys = list(record["call_keys"]) + [v["call_key"] for v in verdicts if v["call_key"]]
    used_by = warehouse._sql(
        "SELECT item_id, kind, stage, status FROM items WHERE run_id = ? AND list_contains(parent_ids, ?) "
        "ORDER BY stage, item_id",
        [run_id, item],
    )
    for child in used_by:  # what became of this item downstream, e.g. the judgments of a tuple it is part of
        child["verdicts"] = warehouse._sql(
            "SELECT stage, judge, decision, score, threshold, reason, call_key FROM verdicts "
            "WHERE run_id = ? AND item_id = ? ORDER BY judge",
            [run_id, child["item_id"]],
        )
    return {
        "run": run_id,
        "item": record,
        "parents": parents,
        "verdicts": verdicts,
        "used_by": used_by,
        "llm_calls": [_call(warehouse, key) for key in dict.fromkeys(keys)],
    }


def _latest_run_with(warehouse: Warehouse, item: str) -> str:
    rows = warehouse._sql(
        "SELECT i.run_id FROM items i JOIN runs r USING (run_id) WHERE i.item_id = ? "
        "ORDER BY r.started_at DESC LIMIT 1",
        [item],
    )
    if not rows:
        raise UnknownItem(item)
    return rows[0]["run_id"]


def _item(warehouse: Warehouse, run_id: str, item: str) -> dict[str, Any]:
    rows = warehouse._sql("SELECT * FROM items WHERE run_id = ? AND item_id = ?", [run_id, item])
    if not rows:
        raise UnknownItem(item)
    row = rows[0]
    row["payload"] = json.loads(row["payload"]) if row["payload"] else None
    return row


def _call(warehouse: Warehouse, key: str) -> dict[str, Any]:
    """The answer a key stands for (the successful attempt if there is one), with its failed attempts."""
    attempts = warehouse._sql(
        "SELECT call_id, template, template_hash, base_url, model, request, response, finish_reason, "
        "prompt_tokens, completion_tokens, latency_ms, cost, http_status, error, attempt, created_at "
        "FROM llm_calls WHERE key = ? ORDER BY (error IS NULL) DESC, created_at",
        [key],
    )
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
            {"attempt": a["attempt"], "http_status": a["http_status"], "error": a["error"]}
            for a in attempts[1:]
            if a["error"]
        ],
    }
