"""How far an LLM judge agrees with people, on the items both decided: the LLM's rejections are the positive
class, as a filter's errors matter in two ways (it removes what people keep, it keeps what people remove)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

REJECT, PASS = "reject", "pass"


class Agreement(BaseModel):
    """One judge at one stage. The confusion table is ``llm -> human -> count``."""

    stage: str
    judge: str
    items: int
    confusion: dict[str, dict[str, int]]
    accuracy: float
    precision: float | None  # of the LLM's rejections, the share people rejected too; None when it rejected none
    recall: float | None  # of people's rejections, the share the LLM made; None when people rejected none
    kappa: float | None  # Cohen's; None when chance agreement is total (both always said the same one thing)


def agreement(pairs: Iterable[dict[str, Any]]) -> list[Agreement]:
    """Per (stage, judge), from rows with ``stage``, ``judge``, ``llm`` and ``human`` decisions."""
    tables: dict[tuple[str, str], dict[str, dict[str, int]]] = {}
    for row in pairs:
        table = tables.setdefault(
            (row["stage"], row["judge"]), {a: {b: 0 for b in (PASS, REJECT)} for a in (PASS, REJECT)}
        )
        table[row["llm"]][row["human"]] += 1
    return [_figures(stage, judge, table) for (stage, judge), table in sorted(tables.items())]


def _figures(stage: str, judge: str, table: dict[str, dict[str, int]]) -> Agreement:
    n = sum(sum(row.values()) for row in table.values())
    both, llm_only, human_only = table[REJECT][REJECT], table[REJECT][PASS], table[PASS][REJECT]
    observed = (both + table[PASS][PASS]) / n
    llm_rejects, human_rejects = (both + llm_only) / n, (both + human_only) / n
    chance = llm_rejects * human_rejects + (1 - llm_rejects) * (1 - human_rejects)
    return Agreement(
        stage=stage,
        judge=judge,
        items=n,
        confusion=table,
        accuracy=observed,
        precision=both / (both + llm_only) if both + llm_only else None,
        recall=both / (both + human_only) if both + human_only else None,
        kappa=(observed - chance) / (1 - chance) if chance < 1 else None,
    )
