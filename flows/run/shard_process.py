"""``python -m ifsynth.flows.run.shard_process RUN_ID WAREHOUSE [WATCH_FD]``: drive one shard's run, recorded in
its own warehouse, as a flow run of its recipe, in this process; what a work pool's worker does with the
deployment.

Its output goes to the shard's log file; how the run ended is in its warehouse, which the parent reads.
``WATCH_FD`` is the read end of a pipe the parent holds open: when it closes, the parent is gone (killed, say),
and the shard stops as on SIGTERM, so it neither works on for nobody nor keeps its warehouse locked."""

from __future__ import annotations

import os
import signal
import sys
import threading

from ifsynth.flows.run.registry import recipe
from ifsynth.flows.run.runner import quiet_prefect
from ifsynth.flows.run.shards import STOP_SECONDS
from ifsynth.schemas.errors import IfsynthError
from ifsynth.warehouse.store import Warehouse, skip_pandas_probe


def stop_with_parent(fd: int) -> None:
    """Stop this process when the parent's end of the pipe ``fd`` closes: SIGTERM first, so the run records
    that it was interrupted; if that has not ended it in STOP_SECONDS (a call stuck retrying a Prefect server
    that died with the parent), exit: the journal keeps every answer received."""

    def watch() -> None:
        try:
            while os.read(fd, 64):
                pass  # the parent writes nothing: only end-of-file is read
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Event().wait(STOP_SECONDS)
        os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    run_id, warehouse, *watch = argv
    if watch:
        stop_with_parent(int(watch[0]))
    quiet_prefect()
    skip_pandas_probe()
    try:
        with Warehouse(warehouse, read_only=True) as store:
            run = store.run(run_id)
        # the flow names and tags its run itself (flows/run/tasks.py)
        recipe(run.recipe).flow().named(f"{run.recipe}/{run.name}")(warehouse, run_id)
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
