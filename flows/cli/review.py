"""`ifsynth review export|import`: the review round trip for people who review in a spreadsheet or a notebook.

The file holds one row per LLM verdict with the texts a person needs (the query, the instruction, the text the
judge read and the one it was written from) and empty human columns; importing it writes each filled row as a
``human:<reviewer>`` verdict.
"""

from __future__ import annotations

import csv
import getpass
import json
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from ifsynth.schemas.errors import ConfigError
from ifsynth.schemas.records import VerdictRecord
from ifsynth.warehouse import review
from ifsynth.warehouse.store import Warehouse

COLUMNS = (
    "run_id", "item_id", "stage", "judge", "kind", "query", "instruction", "text", "source",
    "llm_decision", "score", "threshold", "reason", "human_decision", "note", "reviewer",
)  # fmt: skip
# what a person may write in human_decision, and the verdict it becomes
HUMAN_DECISIONS: dict[str, Literal["pass", "reject"]] = {
    "accept": "pass",
    "pass": "pass",
    "keep": "pass",
    "reject": "reject",
    "remove": "reject",
}
_TEXT_KEYS = ("revised_passage", "passage", "text", "document", "positive")


def default_reviewer() -> str:
    return getpass.getuser()


class ReviewRow(BaseModel):
    """One filled row of an imported review file."""

    run_id: str
    item_id: str
    stage: str
    human_decision: str
    note: str = ""
    reviewer: str = ""


def rows_for(
    warehouse: Warehouse, run_id: str, stage: str | None, status: review.Status, sample: int | None
) -> list[dict[str, Any]]:
    """The verdicts to review as file rows: a stratified sample, the texts drawn from the item and its parents."""
    chosen = review.stratified(review.machine_verdicts(warehouse, run_id, stage=stage, status=status), sample)
    out = []
    for row in chosen:
        payloads = [json.loads(row["payload"] or "{}"), *(json.loads(p) for p in row["parents"] or [])]
        text = _first(payloads, _TEXT_KEYS)
        out.append({
            "run_id": run_id, "item_id": row["item_id"], "stage": row["stage"], "judge": row["judge"],
            "kind": row["kind"], "query": _first(payloads, ("query", "original_query")),
            "instruction": _first(payloads, ("instruction",)), "text": text, "source": _source(payloads, text),
            "llm_decision": row["decision"], "score": row["score"], "threshold": row["threshold"],
            "reason": row["reason"], "human_decision": "", "note": "", "reviewer": "",
        })  # fmt: skip
    return out


def _first(payloads: list[dict[str, Any]], keys: tuple[str, ...]) -> str:
    for payload in payloads:
        for key in keys:
            if isinstance(payload.get(key), str) and payload[key]:
                return payload[key]
    return ""


def _source(payloads: list[dict[str, Any]], text: str) -> str:
    """The text the one under review was written from: a rewrite's original passage, else the first other
    passage of its parents (a document generated from a seed's)."""
    own = payloads[0].get("original_passage")
    if isinstance(own, str) and own:
        return own
    return next((p for p in (_first([payload], _TEXT_KEYS) for payload in payloads[1:]) if p and p != text), "")


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    """JSONL, or CSV when the name ends in .csv."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as file:
        if path.suffix == ".csv":
            writer = csv.DictWriter(file, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        else:
            file.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def read(path: Path, reviewer: str) -> list[VerdictRecord]:
    """Every row with a human decision, as verdicts; the first bad row stops the import in one line, before
    anything is written."""
    try:
        with path.open(encoding="utf-8", newline="") as file:
            raw = (
                list(csv.DictReader(file))
                if path.suffix == ".csv"
                else [json.loads(line) for line in file if line.strip()]
            )
    except FileNotFoundError:
        raise ConfigError(f"review file `{path}` does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"review file `{path}` does not parse: {' '.join(str(exc).split())}") from None
    verdicts = []
    for number, data in enumerate(raw, start=2 if path.suffix == ".csv" else 1):
        try:
            row = ReviewRow.model_validate({k: v for k, v in data.items() if v is not None})
        except ValidationError as exc:
            error = exc.errors()[0]
            raise ConfigError(f"{path}:{number}: {'.'.join(map(str, error['loc']))}: {error['msg']}") from None
        decision = row.human_decision.strip().lower()
        if not decision:
            continue
        if decision not in HUMAN_DECISIONS:
            raise ConfigError(
                f"{path}:{number}: human_decision `{row.human_decision}` must be one of accept, reject (or empty)"
            )
        verdicts.append(
            VerdictRecord(
                run_id=row.run_id,
                item_id=row.item_id,
                stage=row.stage,
                judge=review.human_judge(row.reviewer or reviewer),
                decision=HUMAN_DECISIONS[decision],
                reason=row.note,
                created_at=datetime.now(),
            )
        )
    return verdicts
