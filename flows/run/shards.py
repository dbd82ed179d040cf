"""A run split into shards, and the merge that makes one run of them again.

``--shards N`` splits a run's seeds into N disjoint parts by a stable hash of each seed's id (``Shard.holds``).
Each part is a run of its own (its config names its shard), in a warehouse file of its own beside the run's
(``<warehouse>.shards/<i>-of-<N>.duckdb``), driven as one Prefect flow run: on a work pool's workers when one
is named, else in local processes. A shard's run selects from every seed, as the whole run would (length bands
and the ``--limit`` sample are computed over all of them), keeps its own, and stops before the first stage
that needs every seed at once (``Stage.whole``).

The merge copies the shards' runs, items, verdicts, LLM calls and stage counts into the run's warehouse and
then runs the whole recipe there, in one process, as any continued run does: every answer a shard got is a
cache hit, and what needs every seed (noise passages, distractor pools, InfoSearch's panel and the stages
after it) is computed over all of them. The release is therefore the one a single process would have made.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ifsynth.flows.llm.local_model import LOCAL_BASE_URL
from ifsynth.flows.llm.route import url_secrets
from ifsynth.flows.run.context import Progress, in_progress
from ifsynth.flows.run.prefect_api import api_url, check_work_pool, prefect_api, run_on_pool
from ifsynth.flows.run.registry import recipe
from ifsynth.flows.run.runner import Started, checked, execute, fingerprint, open_run
from ifsynth.flows.run.signals import stoppable
from ifsynth.prompts.registry import Prompts
from ifsynth.schemas.config import RunConfig, Shard
from ifsynth.schemas.errors import ConfigError, RunFailed, WarehouseError, WarehouseInUse
from ifsynth.warehouse import live
from ifsynth.warehouse.store import Warehouse

STOP_SECONDS = 30.0  # how long a stopped shard process may take to record how it ended
WATCH_SECONDS = 30.0  # between two lines on the running shards' progress


@dataclass(frozen=True)
class ShardRun:
    """A shard's run as its warehouse holds it before it is driven."""

    shard: Shard
    path: Path
    run_id: str
    name: str
    complete: bool

    @property
    def log(self) -> Path:
        return self.path.with_suffix(".log")


def shard_paths(warehouse: str | Path, count: int) -> list[Path]:
    """Where the shards of a run in ``warehouse`` keep their warehouses."""
    folder = Path(warehouse).resolve().with_name(Path(warehouse).name + ".shards")
    return [folder / f"{index}-of-{count}.duckdb" for index in range(1, count + 1)]


def execute_sharded(
    config: RunConfig,
    warehouse_path: str | Path,
    count: int,
    progress: Progress,
    *,
    work_pool: str | None = None,
    memory_limit: str | None = None,
) -> Started:
    """Run each shard that is not complete yet (all of them the first time, only the others on a rerun), then
    merge every shard into ``warehouse_path``."""
    for flag, value in (("--max-calls", config.max_calls), ("--max-cost", config.max_cost), ("--batch", config.batch)):
        if value:
            raise ConfigError(f"{flag} bounds one process; it does not go with --shards")
    for endpoint in {config.endpoint_for("generator"), config.endpoint_for("judge")}:
        if endpoint.local_model is not None or endpoint.base_url == LOCAL_BASE_URL:
            raise ConfigError("the embedded model runs in one process; --shards needs an endpoint the shards share")
        if any(url_secrets(url) for url in [endpoint.base_url, *(m.base_url for m in endpoint.members)]):
            raise ConfigError(
                "credentials in --base-url stay in this process and never reach a shard's; give the key in "
                f"{endpoint.api_key_env} instead"
            )
    if work_pool and not os.environ.get("PREFECT_API_URL"):
        raise ConfigError("--work-pool needs the Prefect server its workers poll: set PREFECT_API_URL")
    live.check_free(warehouse_path)  # the warehouse the shards are merged into, before any shard is run
    prompts, templates = checked(config, progress)
    if work_pool:
        check_work_pool(work_pool)
    paths = shard_paths(warehouse_path, count)
    shards = [
        prepare(config.model_copy(update={"shard": Shard(index=index, count=count)}), path, prompts, templates)
        for index, path in enumerate(paths, 1)
    ]
    todo = [shard for shard in shards if not shard.complete]
    where = f"work pool {work_pool}" if work_pool else "local processes"
    progress.note(f"{count} shards in {paths[0].parent}: {len(todo)} to run on {where}, {count - len(todo)} complete")
    if todo:
        with stoppable(), prefect_api(progress.note):
            if work_pool:
                flow_runs = [_flow_run(shard, config) for shard in todo]
                run_on_pool(recipe(config.recipe).flow(), work_pool, flow_runs, progress.note, _abandoned)
            else:
                _run_locally(todo, progress, memory_limit)
    ended = [_ended(shard) for shard in todo]
    failed = [f"{shard.shard} {why}" for shard, why in zip(todo, ended, strict=True) if why]
    if failed:
        logs = "the workers' output" if work_pool else str(todo[0].log.parent)
        raise RunFailed(
            f"{'; '.join(failed)} (logs: {logs}); run the same command again: complete shards are "
            "kept, the others continue"
        )
    runs = [shard.run_id for shard in shards]
    return merge(paths, warehouse_path, progress, memory_limit=memory_limit, run_ids=runs)


def prepare(config: RunConfig, path: Path, prompts: Prompts, templates: list[str]) -> ShardRun:
    """The shard's run in its own warehouse: complete already, continued, or new, and waiting for a process."""
    shard = config.shard
    assert shard is not None
    print_ = fingerprint(config, prompts, templates)
    if config.name is not None:  # unnamed, a shard's run is named by its id, as any run is
        named = f"{config.name}.shard-{shard.index}-of-{shard.count}"
        try:
            config = RunConfig.model_validate({**config.model_dump(), "name": named})
        except ValidationError:
            raise ConfigError(f"--name {config.name} is too long to name its shards; shorten it") from None
    try:
        if path.is_file():  # read first: a complete shard's file is not opened for writing again
            with Warehouse(path, read_only=True) as warehouse:
                done = warehouse.completed_run(print_)
            if done is not None:
                return ShardRun(shard, path, done, config.name or _shown(done, shard), complete=True)
        with Warehouse(path) as warehouse:
            run_id, _, _ = open_run(warehouse, config, print_)
            warehouse.finish_run(run_id, "pending", "waiting for the process that drives it")
    except WarehouseInUse as exc:
        raise ConfigError(
            f"{shard} is still being run ({exc}); wait for it, or stop it, then run this command again"
        ) from None
    return ShardRun(shard, path, run_id, config.name or _shown(run_id, shard), complete=False)


def _shown(run_id: str, shard: Shard) -> str:
    """How an unnamed shard's run is shown (its flow run's name): its id, and which shard it is."""
    return f"{run_id}.shard-{shard.index}-of-{shard.count}"


def _flow_run(shard: ShardRun, config: RunConfig) -> dict[str, Any]:
    """What a shard's flow run is given and labelled with, all of which Prefect may record: no key."""
    models = sorted({config.model_for("generator"), config.model_for("judge")})
    tags = [config.recipe, f"seeds:{config.seeds}", *(f"model:{model}" for model in models)]
    return {"name": shard.name, "run_id": shard.run_id, "warehouse": str(shard.path), "tags": tags}


def _abandoned(flow_run: dict[str, Any]) -> bool:
    """Whether no process holds the shard's warehouse (a running shard's process holds it from its start to its
    end): a read-only open succeeds only then."""
    try:
        with Warehouse(flow_run["warehouse"], read_only=True):
            return True
    except WarehouseInUse:
        return False


def _run_locally(shards: list[ShardRun], progress: Progress, memory_limit: str | None) -> None:
    """One process per shard, each driving its shard's flow run; Ctrl-C stops them all, and each records
    that it was interrupted, as a run in the foreground does."""
    env = {**os.environ, "PREFECT_API_URL": api_url()}
    if memory_limit:
        env["IFSYNTH_MEMORY_LIMIT"] = memory_limit
    running: dict[subprocess.Popen[bytes], ShardRun] = {}
    # Each shard holds the read end of a pipe only this process writes to: if this process dies (kill -9),
    # the shard reads end-of-file and stops itself, releasing its warehouse, instead of working on for nobody.
    watch, alive = os.pipe()
    try:
        for shard in shards:
            with shard.log.open("wb") as log:
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "ifsynth.flows.run.shard_process",
                        shard.run_id,
                        str(shard.path),
                        str(watch),
                    ],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # the terminal's Ctrl-C comes here, and is passed on below
                    pass_fds=(watch,),
                )
            running[process] = shard
        os.close(watch)
        said = time.monotonic()
        while running:
            for process in [p for p in running if p.poll() is not None]:
                shard = running.pop(process)
                progress.note(f"{shard.shard} ended ({'complete' if process.returncode == 0 else 'not complete'})")
            if time.monotonic() - said > WATCH_SECONDS and running:
                said = time.monotonic()
                progress.note(watched(list(running.values())))
            time.sleep(0.2)
    finally:
        _stop(list(running))
        os.close(alive)


def watched(shards: list[ShardRun]) -> str:
    """One line on the shards still running, from each one's process: the stage it is in and how far."""
    parts = []
    for shard in shards:
        try:
            report = live.ask(shard.path, "funnel")
        except WarehouseError:  # too busy to answer in time, or a killed process's file, its port since taken
            parts.append(f"{shard.shard.index}: no answer")
            continue
        now = (report or {}).get("in_progress")
        if now:
            parts.append(f"{shard.shard.index}: {in_progress(now)}")
        else:
            done = len((report or {}).get("stages", []))
            parts.append(f"{shard.shard.index}: {'starting' if report is None else f'{done} stages done'}")
    return f"shards of {shards[0].shard.count} running: " + "; ".join(parts)


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + STOP_SECONDS
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _ended(shard: ShardRun) -> str:
    """How the shard's run ended when it did not complete ('' when it did)."""
    try:
        with Warehouse(shard.path, read_only=True) as warehouse:
            run = warehouse.run(shard.run_id)
    except WarehouseInUse:
        return "is still held by a process that outlived its flow run"
    if run.status == "completed":
        return ""
    if run.status == "died":
        return "died (its process ended without recording how)"
    if run.status == "pending":
        return "never started (its process ended before it took the run)"
    return {"interrupted": "was interrupted", "stopped": "stopped"}.get(run.status, run.status) + (
        f": {run.error}" if run.error else ""
    )


def merge(
    paths: list[Path],
    into: str | Path,
    progress: Progress,
    *,
    memory_limit: str | None = None,
    run_ids: list[str] | None = None,
) -> Started:
    """Absorb every shard of one run into ``into``, then run the whole recipe there from the merged cache. The
    shards' runs are ``run_ids``, or each file's newest run."""
    wanted: Sequence[str | None] = run_ids or [None] * len(paths)
    runs = [_shard_run(Path(path), run_id) for path, run_id in zip(paths, wanted, strict=True)]
    first_path, first = paths[0], runs[0]
    count = first[1].count
    for path, (config, shard) in zip(paths, runs, strict=True):
        differs = _differs(first[0], config)
        if differs or shard.count != count:
            what = differs or "shard count"
            raise ConfigError(f"{path} and {first_path} are shards of different runs (their {what} differ)")
    indices = sorted(shard.index for _, shard in runs)
    if indices != list(range(1, count + 1)):
        missing = sorted(set(range(1, count + 1)) - set(indices))
        doubled = sorted({i for i in indices if indices.count(i) > 1})
        said = [
            f"{what}: {', '.join(map(str, which))}" for what, which in (("missing", missing), ("given twice", doubled))
        ]
        raise ConfigError(
            f"a merge takes each of the {count} shards once ({'; '.join(s for s in said if not s.endswith(': '))})"
        )
    progress.note(f"merging {count} shards into {into}")
    with Warehouse(into, memory_limit=memory_limit) as warehouse:
        for path in paths:
            warehouse.absorb(path)
    whole = first[0].model_copy(update={"shard": None})
    return execute(whole, into, progress, memory_limit=memory_limit)


def _shard_run(path: Path, run_id: str | None) -> tuple[RunConfig, Shard]:
    """The complete shard run in ``path`` (``run_id``, or the newest), its config with the whole run's name."""
    if not path.is_file():
        raise ConfigError(f"no shard warehouse at `{path}`")
    with Warehouse(path, read_only=True) as warehouse:  # a complete run was flushed by the process that ran it
        run = warehouse.run(run_id)
    config = RunConfig.model_validate(run.config)
    if config.shard is None:
        raise ConfigError(f"`{path}` holds no shard's run (its newest run, {run.run_id}, is a whole run)")
    if run.status != "completed":
        raise ConfigError(f"{config.shard} in `{path}` is {run.status}, not complete: run it again first")
    suffix = f".shard-{config.shard.index}-of-{config.shard.count}"
    base = None if config.name is None else config.name.removesuffix(suffix)
    return config.model_copy(update={"name": base}), config.shard


def _differs(one: RunConfig, other: RunConfig) -> str:
    """The first setting in which two shard configs differ, beyond the shard itself."""
    left, right = one.model_dump(exclude={"shard"}), other.model_dump(exclude={"shard"})
    for key in left:
        if left[key] != right[key]:
            inner = left[key], right[key]
            if isinstance(inner[0], dict) and isinstance(inner[1], dict):
                keys = [k for k in inner[0].keys() | inner[1].keys() if inner[0].get(k) != inner[1].get(k)]
                return f"{key}.{sorted(keys)[0]}"
            return key
    return ""
