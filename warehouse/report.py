"""The figures of `ifsynth report`: judges' scores, rejection reasons, tokens and cost per stage, and the
lengths of a release's texts. The funnel, audit samples and the card come from audit.py and stats.py."""

from __future__ import annotations

from typing import Any

from ifsynth.warehouse.store import Warehouse


def scores(warehouse: Warehouse, run_id: str) -> list[dict[str, Any]]:
    """Every scored LLM verdict: its stage, judge, score, threshold and decision."""
    return warehouse._sql(
        "SELECT stage, judge, score, threshold, decision FROM verdicts "
        "WHERE run_id = ? AND judge LIKE 'llm%' AND score IS NOT NULL ORDER BY stage, judge, item_id",
        [run_id],
    )


def reasons(warehouse: Warehouse, run_id: str, limit: int = 25) -> list[dict[str, Any]]:
    """What removed items most often, by stage and judge: the reasons of every verdict that did not pass."""
    return warehouse._sql(
        "SELECT stage, judge, decision, reason, count(*) AS n FROM verdicts "
        "WHERE run_id = ? AND decision <> 'pass' AND judge NOT LIKE 'human%' "
        "GROUP BY ALL ORDER BY n DESC, stage, reason LIMIT ?",
        [run_id, limit],
    )


def usage(warehouse: Warehouse, run_id: str) -> list[dict[str, Any]]:
    """Per stage: requests sent, tokens in and out, and cost (None where no price was given)."""
    return warehouse._sql(
        "SELECT c.stage, count(*) AS requests, coalesce(sum(c.prompt_tokens), 0) AS prompt_tokens, "
        "coalesce(sum(c.completion_tokens), 0) AS completion_tokens, sum(c.cost) AS cost "
        "FROM llm_calls c LEFT JOIN stage_counts s ON s.run_id = c.run_id AND s.stage = c.stage "
        "WHERE c.run_id = ? GROUP BY c.stage, s.ord ORDER BY s.ord NULLS LAST, c.stage",
        [run_id],
    )


def lengths(warehouse: Warehouse, release: str) -> dict[str, list[int]]:
    """Words per instruction, query and passage of a release (each text once)."""
    queries = warehouse._sql(
        "SELECT DISTINCT query_id, mode, len(string_split(trim(query), ' ')) AS q, "
        "CASE WHEN trim(instruction) = '' THEN NULL ELSE len(string_split(trim(instruction), ' ')) END AS i "
        "FROM release_queries WHERE release = ? ORDER BY mode, query_id",
        [release],
    )
    docs = warehouse._sql(
        "SELECT len(string_split(trim(text), ' ')) AS n FROM release_docs WHERE release = ? ORDER BY doc_id",
        [release],
    )
    return {
        "instructions": [r["i"] for r in queries if r["i"] is not None],
        "queries": [r["q"] for r in queries],
        "passages": [r["n"] for r in docs],
    }
