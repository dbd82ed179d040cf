"""The funnel's books: every input of a stage is counted once, whoever decided it."""

from __future__ import annotations

from pathlib import Path

from ifsynth.flows.run.config import resolve
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter
from ifsynth.warehouse.store import Warehouse
from tests.conftest import INSTRUCTIR_SEEDS
from tests.helpers import item, query


def test_a_persons_decision_counts_once_in_the_funnel_whatever_kind_of_stage_they_overrule(tmp_path: Path) -> None:
    """A judge passes its input on (its count is given, not its items'); a stage that rejects keeps a record of
    what it rejected; one that makes several items counts them. People overrule each: the columns still add up."""
    config = resolve("instructir", seeds=f"beir:{INSTRUCTIR_SEEDS}", base_url="http://127.0.0.1:9", model="m")
    record = item("s", "seed", "q3").model_copy(update={"status": "rejected"})
    made = [item("s", "rewrite", "q4", n) for n in range(3)]
    decided = {  # input -> (the stage's outcome, the person's decision)
        "judged-out": (Outcome("reject", n_out=0), "pass"),
        "judged-in": (Outcome("pass", n_out=1), "reject"),
        "recorded-out": (Outcome("reject", items=[record], n_out=0), "pass"),
        "made-three": (Outcome("pass", items=made), "reject"),
        "agreed": (Outcome("pass", n_out=1), "pass"),
    }
    with Warehouse(tmp_path / "w.duckdb") as warehouse:
        ctx = RunContext.build("instructir-run", config, warehouse)
        ctx.humans = {(input_id, "s"): human for input_id, (_, human) in decided.items()}
        writer = StageWriter(ctx, "s", 1, len(decided))
        for input_id, (outcome, _) in decided.items():
            writer.add(input_id, outcome)
        counts = writer.close()
        written = {row["item_id"] for row in query(warehouse, "SELECT item_id FROM items")}
    assert (counts.n_in, counts.n_out, counts.rejected) == (5, 3, 2), "accepted: judged-out, recorded-out, agreed"
    assert counts.n_in == counts.n_out + counts.set_aside + counts.rejected + counts.parse_error + counts.failed
    assert ctx.overruled == {(input_id, "s") for input_id in decided} - {("agreed", "s")}
    assert written == {record.item_id}, "a person's reject drops what the stage made"
