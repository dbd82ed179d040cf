"""``python -m ifsynth.flows.run.shard_process RUN_ID WAREHOUSE``: drive one shard's run, recorded in its own
warehouse, as a flow run of its recipe, in this process; what a work pool's worker does with the deployment.

Its output goes to the shard's log file; how the run ended is in its warehouse, which the parent reads."""

from __future__ import annotations

import os
import sys

from ifsynth.flows.run.registry import recipe
from ifsynth.flows.run.runner import quiet_prefect
from ifsynth.schemas.errors import IfsynthError
from ifsynth.warehouse.store import Warehouse


def main(argv: list[str]) -> int:
    run_id, warehouse = argv
    quiet_prefect()
    try:
        with Warehouse(warehouse, read_only=True) as store:
            run = store.run(run_id)
        # the flow names and tags its run itself (flows/run/tasks.py)
        recipe(run.recipe).flow().with_options(flow_run_name=f"{run.recipe}/{run.name}")(warehouse, run_id)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except IfsynthError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # everything is written; Prefect's exit-time drain of its services may otherwise hang
