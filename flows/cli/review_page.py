"""`ifsynth review serve`: a local page to review LLM verdicts one at a time, keyboard first.

The server holds the warehouse open for writing and records each decision the moment it is made, as a
``human:<reviewer>`` verdict (flushed at once), so closing the browser or killing the server loses nothing
already decided. The page is one HTML document with its script and style inline: it works offline.
"""

from __future__ import annotations

import difflib
import json
import re
import socket
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import uvicorn
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

from ifsynth.flows.cli.review import rows_for
from ifsynth.schemas.errors import ConfigError
from ifsynth.schemas.records import VerdictRecord
from ifsynth.warehouse import audit, review
from ifsynth.warehouse.store import Warehouse

PAGE = Path(__file__).with_name("review_page.html")
Change = Literal["same", "del", "ins"]


def word_diff(before: str, after: str) -> list[tuple[Change, str]]:
    """``before`` turned into ``after`` word by word: runs of kept, deleted and inserted text (whitespace kept
    with its word), so the page marks what a rewrite changed beside the passage it rewrote."""
    old, new = re.findall(r"\S+\s*", before), re.findall(r"\S+\s*", after)
    runs: list[tuple[Change, str]] = []
    matcher = difflib.SequenceMatcher(None, [w.strip() for w in old], [w.strip() for w in new], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            runs.append(("same", "".join(new[j1:j2])))
            continue
        if i2 > i1:
            runs.append(("del", "".join(old[i1:i2])))
        if j2 > j1:
            runs.append(("ins", "".join(new[j1:j2])))
    return runs


class Decision(BaseModel):
    """What the page posts for the item at ``index``: accept, reject, or (``undo``) take the verdict back."""

    index: int
    decision: str
    note: str = ""


def app(warehouse: Warehouse, run_id: str, rows: list[dict[str, Any]], reviewer: str) -> Starlette:
    judge = review.human_judge(reviewer)

    async def page(_: Request) -> HTMLResponse:
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    shown = [{**row, "diff": word_diff(row["source"], row["text"]) if row["source"] else []} for row in rows]

    async def items(_: Request) -> JSONResponse:
        return JSONResponse({"run_id": run_id, "reviewer": judge, "items": shown})

    async def details(request: Request) -> JSONResponse:
        """The item's lineage, siblings, verdicts and calls (rendered prompts, raw answers), on demand."""
        item_id = request.path_params["item_id"]
        shown = {**audit.show(warehouse, item_id, run_id), "siblings": review.siblings(warehouse, run_id, item_id)}
        return JSONResponse(json.loads(json.dumps(shown, default=str)))

    async def decide(request: Request) -> JSONResponse:
        posted = Decision.model_validate(await request.json())
        if not 0 <= posted.index < len(rows):
            return JSONResponse({"error": "no such item"}, status_code=404)
        row = rows[posted.index]
        if posted.decision == "undo":
            review.forget(warehouse, run_id, row["item_id"], row["stage"], judge)
        elif posted.decision in ("accept", "reject"):
            verdict = VerdictRecord(
                run_id=run_id,
                item_id=row["item_id"],
                stage=row["stage"],
                judge=judge,
                decision="pass" if posted.decision == "accept" else "reject",
                reason=posted.note,
                created_at=datetime.now(),
            )
            review.record(warehouse, [verdict])
        else:
            return JSONResponse({"error": "decision must be accept, reject or undo"}, status_code=400)
        return JSONResponse({"ok": True, "index": posted.index, "decision": posted.decision})

    return Starlette(
        routes=[
            Route("/", page),
            Route("/api/items", items),
            Route("/api/items/{item_id}", details),
            Route("/api/decide", decide, methods=["POST"]),
        ]
    )


def serve(
    warehouse: Warehouse,
    run_id: str,
    *,
    stage: str | None,
    status: review.Status,
    sample: int | None,
    reviewer: str,
    port: int,
    ready: Any = print,
) -> None:
    """Serve the review of ``run_id`` on 127.0.0.1:``port`` until interrupted."""
    rows = rows_for(warehouse, run_id, stage, status, sample)
    listening = socket.socket()
    try:  # bound here, so a port in use is one line before anything is said to be served
        listening.bind(("127.0.0.1", port))
    except OSError as exc:
        listening.close()
        raise ConfigError(f"--port {port}: {exc.strerror or exc}; give another port") from None
    config = uvicorn.Config(app(warehouse, run_id, rows, reviewer), log_level="warning")
    ready(f"reviewing {len(rows)} verdicts of run {run_id} at http://127.0.0.1:{port}/ (Ctrl-C to stop)")
    uvicorn.Server(config).run(sockets=[listening])
