"""The `ifsynth` command: a thin shell over the runner and the warehouse.

Inspection commands read the warehouse directly; only `run` and `demo` import the runner (and Prefect).
Any IfsynthError becomes one line on stderr and a non-zero exit code.

Annotations here are evaluated as the module loads (no ``from __future__ import annotations``): typer reads
every command's signature at every command, and annotations kept as strings were compiled again each time,
45-110 ms of each command (bench/README.md, fourteenth round).
"""

import atexit
import contextlib
import functools
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar, get_args

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from ifsynth.flows.cli.tables import Col, fitted
from ifsynth.schemas.errors import (
    BudgetExhausted,
    ConfigError,
    IfsynthError,
    Interrupted,
    RunInterrupted,
)
from ifsynth.schemas.records import ItemStatus
from ifsynth.warehouse import audit as audit_queries
from ifsynth.warehouse import live
from ifsynth.warehouse.export import GENERIC, release_for, replaceable
from ifsynth.warehouse.review import Status as ReviewStatusValue
from ifsynth.warehouse.store import Warehouse, skip_pandas_probe

DEFAULT_WAREHOUSE = "warehouse/ifsynth.duckdb"

app = typer.Typer(
    help="Synthesize instruction-following retrieval datasets with LLMs, auditable end to end.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
RunArg = Annotated[str | None, typer.Argument(help="Run id or name; the newest run by default.")]
CardEndpoints = Annotated[
    bool, typer.Option("--card-endpoints", help="Name the endpoints' URLs in the card (default: their kind only).")
]
LocalModel = Annotated[str | None, typer.Option(help="Run this GGUF file offline with the embedded llama.cpp server.")]
LocalThreads = Annotated[int | None, typer.Option(help="CPU threads of the embedded model (default: all).")]
LocalParallel = Annotated[int | None, typer.Option(help="Requests the embedded model decodes at once.")]
LocalCtx = Annotated[int | None, typer.Option(help="Context tokens of the embedded model, shared by its slots.")]


@dataclass(frozen=True)
class WarehouseChoice:
    path: str
    memory_limit: str | None


@app.callback()
def main_options(
    ctx: typer.Context,
    warehouse: Annotated[
        str, typer.Option("--warehouse", envvar="IFSYNTH_WAREHOUSE", help="The DuckDB warehouse file.")
    ] = DEFAULT_WAREHOUSE,
    memory_limit: Annotated[
        str | None,
        typer.Option(
            "--memory-limit",
            envvar="IFSYNTH_MEMORY_LIMIT",
            help="Cap on the warehouse's memory (DuckDB's buffer pool), e.g. 1GB. Default: 80% of RAM.",
        ),
    ] = None,
    debug: Annotated[
        bool, typer.Option("--debug", envvar="IFSYNTH_DEBUG", help="Show tracebacks and Prefect's own logs.")
    ] = False,
) -> None:
    if debug:
        os.environ["IFSYNTH_DEBUG"] = "1"
    ctx.obj = WarehouseChoice(warehouse, memory_limit)


Choice = TypeVar("Choice", bound=str)


def _choice(value: str, choices: tuple[Choice, ...], option: str) -> Choice:
    """``value`` as one of ``choices`` (a Literal's values), or the one line that lists them."""
    for choice in choices:
        if value == choice:
            return choice
    raise typer.BadParameter(f"{option} must be one of {', '.join(choices)}")


def _open(ctx: typer.Context, *, read_only: bool = True, create: bool = False) -> Warehouse:
    """The warehouse, which only a command that fills one from nothing (an import) may create."""
    return Warehouse(ctx.obj.path, read_only=read_only, memory_limit=ctx.obj.memory_limit, create=create)


def _read(ctx: typer.Context, query: str, **args: Any) -> Any:
    """A read query (runs, funnel, audit, show) on the warehouse file, or, while a run holds the file, on the
    process that writes it."""
    return live.read(ctx.obj.path, query, memory_limit=ctx.obj.memory_limit, **args)


def _json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False, default=_jsonable))


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, tuple):
        return list(value)
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return str(value)


@app.command()
def run(
    ctx: typer.Context,
    recipe: Annotated[str, typer.Argument(help="Recipe to run; `ifsynth recipes` lists those installed.")],
    seeds: Annotated[str | None, typer.Option(help="demo, beir:DIR or irds:ID.")] = None,
    limit: Annotated[int | None, typer.Option(help="Use at most this many seed queries.")] = None,
    base_url: Annotated[
        list[str] | None,
        typer.Option(help="OpenAI-compatible endpoint (vLLM, Ollama, ...); repeat it for a pool of servers."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model of the generation stages.")] = None,
    judge_model: Annotated[str | None, typer.Option(help="Model of the judge stages.")] = None,
    structured_output: Annotated[
        str | None, typer.Option(help="json_schema (OpenAI, vLLM), json_object (llama.cpp) or none.")
    ] = None,
    concurrency: Annotated[int | None, typer.Option(help="Requests in flight at most.")] = None,
    local_model: LocalModel = None,
    local_threads: LocalThreads = None,
    local_parallel: LocalParallel = None,
    local_ctx: LocalCtx = None,
    prompts_dir: Annotated[str | None, typer.Option(help="Templates that overlay the built-in ones.")] = None,
    config: Annotated[str | None, typer.Option("--config", help="TOML or YAML file of settings.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="KEY=VALUE, repeatable.")] = None,
    name: Annotated[str | None, typer.Option(help="A name for the run and its release.")] = None,
    max_calls: Annotated[
        int | None, typer.Option(help="Stop cleanly before sending more requests than this (cache hits free).")
    ] = None,
    max_cost: Annotated[
        float | None, typer.Option(help="Stop cleanly before spending more US dollars than this (needs prices).")
    ] = None,
    batch: Annotated[
        bool | None, typer.Option("--batch", help="Send uncached requests through the OpenAI Batch API.")
    ] = None,
    pool_run: Annotated[
        list[str] | None, typer.Option("--pool-run", help="followir: a TREC run file to pool from, repeatable.")
    ] = None,
    shards: Annotated[
        int, typer.Option(min=1, help="Split the seeds into this many shards, each a flow run; then merge them.")
    ] = 1,
    work_pool: Annotated[
        str | None, typer.Option(help="Run the shards on this Prefect work pool's workers (default: local processes).")
    ] = None,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            help="Then run it again, in this process, each time the recipe's templates or the --config file "
            "change; Ctrl-C stops.",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Run a recipe; an unfinished run with the same settings is continued, from the cache."""
    from ifsynth.flows.run.config import resolve

    settle = functools.partial(
        resolve,
        recipe,
        seeds=seeds,
        config_file=config,
        sets=set_,
        limit=limit,
        base_url=base_url,
        model=model,
        judge_model=judge_model,
        structured_output=structured_output,
        concurrency=concurrency,
        local_model=local_model,
        local_threads=local_threads,
        local_parallel=local_parallel,
        local_ctx=local_ctx,
        prompts_dir=prompts_dir,
        name=name,
        max_calls=max_calls,
        max_cost=max_cost,
        batch=batch,
        pool_runs=pool_run,
    )
    if watch:
        if shards != 1 or work_pool is not None:
            raise ConfigError("--watch runs in this process: not with --shards or --work-pool")
        _watch(ctx, settle, config, as_json=as_json)
        return
    settings = settle()
    if shards == 1 and work_pool is None:
        _run_and_report(ctx, settings, as_json=as_json)
        return
    from ifsynth.flows.run.shards import execute_sharded

    memory = ctx.obj.memory_limit
    _drive_and_report(
        ctx,
        lambda progress: execute_sharded(
            settings, ctx.obj.path, shards, progress, work_pool=work_pool, memory_limit=memory
        ),
        _intro(settings, f", {shards} shards" + (f" on work pool {work_pool}" if work_pool else "")),
        as_json=as_json,
    )


@app.command()
def merge(
    ctx: typer.Context,
    shards: Annotated[list[Path], typer.Argument(help="The shards' warehouse files, one per shard.")],
    into: Annotated[Path, typer.Option("--into", help="The warehouse of the merged run.")],
    as_json: JsonFlag = False,
) -> None:
    """Merge the shards of a sharded run into one warehouse and finish the run there from their answers (what
    `run --shards` does at its end; by hand for shards run elsewhere)."""
    from ifsynth.flows.run.shards import merge as merge_shards

    ctx.obj = WarehouseChoice(str(into), ctx.obj.memory_limit)
    memory = ctx.obj.memory_limit
    _drive_and_report(
        ctx,
        lambda progress: merge_shards(list(shards), into, progress, memory_limit=memory),
        f"merging {len(shards)} shards into {into}",
        as_json=as_json,
    )


@app.command()
def serve(
    names: Annotated[
        list[str] | None, typer.Argument(metavar="RECIPES", help="Recipes whose flows to serve; all by default.")
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Flow runs at a time (default: no bound).")] = None,
) -> None:
    """Serve the recipe flows to a Prefect server (PREFECT_API_URL) until Ctrl-C: a flow run of deployment
    `<recipe>/served` given a warehouse and a run's config (settings, never a key) runs that recipe here."""
    from ifsynth.flows.run.prefect_api import serve as serve_flows
    from ifsynth.flows.run.registry import recipe, recipes
    from ifsynth.flows.run.runner import quiet_prefect

    quiet_prefect()
    chosen = [recipe(name) for name in names or recipes()]
    said = f"serving {', '.join(f'{r.name}/served' for r in chosen)}; Ctrl-C stops"
    # said once the server is found, and Prefect's runner stops cleanly on Ctrl-C, and returns
    serve_flows([r.flow() for r in chosen], limit, lambda: err.print(said, highlight=False))
    err.print("stopped serving", highlight=False)


@app.command("prefect-server")
def prefect_server(
    stop: Annotated[bool, typer.Option("--stop", help="Stop it now (the next command starts it again).")] = False,
) -> None:
    """Where the local Prefect server that commands share runs (used when PREFECT_API_URL is not set): its UI
    shows every run since it started; it stops by itself after IFSYNTH_PREFECT_IDLE seconds (1,800) idle."""
    from ifsynth.flows.run import local_prefect
    from ifsynth.flows.run.runner import quiet_prefect

    quiet_prefect()
    if stop:
        stopped = local_prefect.stop()
        out.print(f"stopped the local Prefect server at {stopped.ui}" if stopped else "no local Prefect server runs")
        return
    server = local_prefect.running()
    if server is None:
        out.print("no local Prefect server runs; the next run starts one", highlight=False)
    else:
        out.print(
            f"local Prefect server: UI at {server.ui}, API at {server.url}, process {server.pid}", highlight=False
        )
    if os.environ.get("PREFECT_API_URL"):
        out.print("runs use the server PREFECT_API_URL names, not this one", highlight=False)


@app.command("warm")
def warm_processes(
    stop: Annotated[bool, typer.Option("--stop", help="Stop them (each once the runs it serves end).")] = False,
) -> None:
    """The warm processes that keep ifsynth loaded for later runs (one per folder and Python), started by a
    run; they stop by themselves after IFSYNTH_WARM_IDLE seconds (1,800) idle. IFSYNTH_WARM=0 turns them off."""
    from ifsynth.flows.cli import warm

    found = warm.stop() if stop else warm.running()
    if not found:
        out.print("no warm process runs", highlight=False)
    for process in found:
        since = datetime.fromtimestamp(process.started).isoformat(" ", "seconds")
        what = "stopping" if stop else "warm process"
        said = f"{what} {process.pid}: runs in {process.folder} with {process.python}, since {since}"
        out.print(said, highlight=False, soft_wrap=True)


def _intro(settings: Any, how: str = "") -> str:
    from ifsynth.flows.llm.route import public_url

    members = settings.endpoint.members
    where = f"a pool of {len(members)}" if members else public_url(settings.endpoint.base_url)
    return f"{settings.recipe}: seeds {settings.seeds}, model {settings.model} at {where}{how}; checking inputs"


def _watch(ctx: typer.Context, settle: Callable[[], Any], config_file: str | None, *, as_json: bool) -> None:
    """Run, then run again at each change of what ``settle`` reads, until Ctrl-C. What a change breaks (a
    template that does not parse, a setting out of range, an endpoint down) is said in its one line and
    waited out: the next change may fix it. Ctrl-C during a run stops the run and the watch, as without
    ``--watch``; between runs it stops the watch."""
    from ifsynth.flows.cli.watch import Watched, file_identity
    from ifsynth.flows.run.prefect_api import prefect_api

    config_read = file_identity(config_file)  # before it is read: a save from here on is a change
    settings: Any = _watchable(settle())  # wrong from the start: its one line and the exit, as without --watch
    watched = Watched(settings, config_file, config_read)
    if not watched.folders and watched.file is None:
        raise ConfigError("--watch found nothing to watch: give --prompts-dir or --config")
    with contextlib.ExitStack() as kept:
        prefect_kept = False
        try:
            while True:
                if settings is not None and _ran(ctx, settings, as_json=as_json) and not prefect_kept:
                    # the Prefect server the run reported to, held for the whole watch: the local one would
                    # stop after its idle while, between two edits, and take its UI along
                    kept.enter_context(prefect_api())
                    prefect_kept = True
                err.print(
                    f"watching {watched.describe()}: a saved change runs it again; Ctrl-C stops",
                    markup=False, highlight=False, soft_wrap=True,
                )  # fmt: skip
                err.print(f"changed: {', '.join(watched.wait())}", markup=False, highlight=False)
                config_read = file_identity(config_file)
                try:
                    settings = _watchable(settle())
                except IfsynthError as exc:
                    err.print(_said(exc), markup=False, highlight=False, soft_wrap=True)
                    settings = None
                else:  # the config file may name another --prompts-dir
                    watched = Watched(settings, config_file, config_read)
        except KeyboardInterrupt:
            err.print("stopped watching", highlight=False)


def _ran(ctx: typer.Context, settings: Any, *, as_json: bool) -> bool:
    """One run of a watch, and whether it ran to its end: a failure is said in its one line, for the next
    change to fix; an interrupted run ends the watch."""
    try:
        _run_and_report(ctx, settings, as_json=as_json)
    except RunInterrupted:
        raise
    except IfsynthError as exc:
        err.print(_said(exc), markup=False, highlight=False, soft_wrap=True)
        return False
    return True


def _watchable(settings: Any) -> Any:
    if settings.name is not None:
        raise ConfigError("--watch starts a new run at each change, and a run name names one run: give none")
    return settings


def _run_and_report(ctx: typer.Context, settings: Any, *, as_json: bool) -> str:
    from ifsynth.flows.run.runner import execute

    memory = ctx.obj.memory_limit
    return _drive_and_report(
        ctx, lambda progress: execute(settings, ctx.obj.path, progress, memory_limit=memory), _intro(settings),
        as_json=as_json,
    )  # fmt: skip


def _drive_and_report(ctx: typer.Context, start: Any, intro: str, *, as_json: bool) -> str:
    """Run ``start(progress)`` under the progress display, then print the run's funnel."""
    from ifsynth.flows.cli.progress import progress_for

    with progress_for(err) as progress:
        progress.note(intro)
        try:
            started = start(progress)
        except KeyboardInterrupt as exc:  # typer would turn it into a bare exit 130
            raise RunInterrupted(exc.signum if isinstance(exc, Interrupted) else signal.SIGINT) from exc
    if as_json:
        _json(started.funnel)
    else:
        verb = "continued" if started.resumed else "ran"
        run = started.record
        out.print(f"[bold]{verb} run {started.run_id}[/bold] ({run.recipe}, seeds {run.config['seeds']})")
        _print_funnel(started.funnel)
    return started.run_id


@app.command()
def demo(
    ctx: typer.Context,
    out_dir: Annotated[Path, typer.Option("--out", help="Where the BEIR export goes.")] = Path("exports/demo"),
    local_model: LocalModel = None,
) -> None:
    """The offline demo: the built-in seeds, the embedded local model, a small sizing; then a BEIR export."""
    from ifsynth.flows.cli.demo import DEMO_SETTINGS, demo_config, export_demo

    settings = demo_config(local_model)
    replaceable(out_dir, "demo")  # before the run, not after it
    out.print(
        f"[bold]ifsynth demo[/bold]: built-in seeds, {settings.model} on the embedded llama.cpp server, "
        "no key, no network"
    )
    for key, value in DEMO_SETTINGS.items():
        out.print(f"  {key} = {value}")
    if local_model is None:
        out.print("  (a 135M model writes weak text: this shows the pipeline working, not benchmark-quality data)")
    run_id = _run_and_report(ctx, settings, as_json=False)
    with _open(ctx) as warehouse:
        written = export_demo(warehouse, run_id, out_dir)
    if written is None:
        small = " (a 135M model judges close to chance)" if local_model is None else ""
        out.print(
            f"export: none, as no query was kept{small}; `ifsynth funnel` shows where the items went, and "
            f"`ifsynth audit` why each filter removed them; nothing is left in {escape(str(out_dir.resolve()))}"
        )
        return
    out.print(f"export: {len(written)} files written to [bold]{escape(str(out_dir.resolve()))}[/bold] (BEIR layout)")


@app.command("recipes")
def list_recipes(
    name: Annotated[
        str | None,
        typer.Argument(help="A recipe: print its fidelity table, where its defaults depart from its authors and why."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List the installed recipes (ifsynth's own and those of other packages), with their papers."""
    from ifsynth.flows.run.registry import recipe, recipes

    if name is not None:
        from ifsynth.warehouse.cards import fidelity_table

        fidelity = recipe(name).fidelity()
        if as_json:
            _json(fidelity)
        else:
            typer.echo("\n".join(fidelity_table(fidelity)))
        return

    rows = [{"recipe": r.name, "summary": r.summary, "paper": r.paper} for r in recipes().values()]
    if as_json:
        _json(rows)
        return
    table = Table(Column("recipe", no_wrap=True), "what it makes (--json: its paper too)")
    for row in rows:
        table.add_row(row["recipe"], row["summary"])
    out.print(table)


@app.command()
def runs(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List the runs in the warehouse."""
    rows = _read(ctx, "runs")
    if as_json:
        _json(rows)
        return
    columns = [Col("run"), Col("name", text=True), Col("recipe", spare=1), Col("status"), Col("started", spare=2),
               Col("accepted", justify="right"), Col("cost", justify="right")]  # fmt: skip
    cells = [
        [
            r["run_id"],
            "" if r["name"] == r["run_id"] else r["name"],
            r["recipe"],
            r["status"],
            f"{r['started_at']:%Y-%m-%d %H:%M}",
            str(r["accepted"]),
            "" if r["cost_usd"] is None else f"${r['cost_usd']:.4f}",
        ]
        for r in rows
    ]
    out.print(fitted(out, columns, cells))


@app.command()
def funnel(
    ctx: typer.Context,
    run_ref: RunArg = None,
    reasons: Annotated[
        bool, typer.Option("--reasons", help="Also why items left: per stage and rule, how many and what it measured.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """How many items each stage took in, kept, rejected, failed to parse or lost."""
    report = _read(ctx, "funnel", ref=run_ref)
    if reasons:
        report["reasons"] = _read(ctx, "reasons", ref=report["run"])
    if as_json:
        _json(report)
    else:
        out.print(f"run {report['run']} ({report['recipe']}, {report['status']})")
        _print_funnel(report)
        now = report.get("in_progress")
        if now:
            from ifsynth.flows.run.context import in_progress

            out.print(f"in progress: {in_progress(now)}")
        if reasons:
            _print_reasons(report["reasons"])


def _print_funnel(report: dict[str, Any]) -> None:
    columns = ("in", "out", "set_aside", "rejected", "parse_error", "failed", "cached", "sent")
    headers = ("in", "out", "aside", "rejected", "unparsed", "failed", "cached", "sent")
    rows: list[list[str]] = []
    for s in report["stages"]:
        rows.append([s["stage"], *(str(s[k]) for k in columns)])
        for j in s.get("judges", []):
            share = "" if j["yield"] is None else f" ({j['yield']:.0%})"
            name = j["judge"].removeprefix("llm:").replace("negative_", "neg. ")
            rows.append([f" {name}", str(j["judged"]), f"{j['passed']}{share}", "", str(j["rejected"]), "", "", "", ""])
        if s.get("judges") and s["in"]:
            rows.append([" all three" if len(s["judges"]) == 3 else " all", str(s["in"]),
                         f"{s['out']} ({s['out'] / s['in']:.0%})", "", "", "", "", "", ""])  # fmt: skip
    spare = {"cached": 1, "sent": 2}  # the line below the table gives their totals
    out.print(fitted(out, [Col("stage"), *(Col(h, spare=spare.get(h, 0), justify="right") for h in headers)], rows))
    calls = report["llm_calls"]
    out.print(
        f"accepted {report['accepted']}; LLM calls: {calls['sent']} sent, {calls['cached']} from cache, "
        f"{calls['failed']} failed attempts ({calls['transient']} transient, {calls['terminal']} terminal); "
        f"tokens {report['tokens']['prompt']} in / {report['tokens']['completion']} out"
        + (f"; cost ${report['cost_usd']:.4f}" if report.get("cost_usd") is not None else "")
    )


@app.command()
def audit(
    ctx: typer.Context,
    run_ref: RunArg = None,
    stage: Annotated[str | None, typer.Option(help="Only items decided (or made) by this stage.")] = None,
    status: Annotated[
        str | None, typer.Option(help="ok, rejected, parse_error, failed or accepted; default: all not kept.")
    ] = None,
    limit: Annotated[int, typer.Option(min=0, help="At most this many rows; 0 for all.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """Items and the verdict that decided each; by default every item that did not make it."""
    if status is not None:
        status = _choice(status, get_args(ItemStatus), "--status")
    rows = _read(ctx, "audit", ref=run_ref, stage=stage, status=status, limit=limit or None)
    if as_json:
        _json(rows)
        return
    columns = [Col("item"), Col("status"), Col("stage", spare=1), Col("judge", spare=2, text=True),
               Col("score", justify="right"), Col("reason", text=True)]  # fmt: skip
    cells = [
        [
            r["item_id"],
            r["status"],
            r["decided_by"] or r["made_by"],
            ", ".join(r["failed_judges"] or []) or r["judge"] or "",
            "" if r["score"] is None else f"{r['score']:g}",
            f"{r['failure']}: {r['reason']}" if r["failure"] else r["reason"] or "",  # may a rerun cure it?
        ]
        for r in rows
    ]
    out.print(fitted(out, columns, cells))
    if status not in ("ok", "accepted"):
        out.print("Why items left, by rule:")
        _print_reasons(_read(ctx, "reasons", ref=run_ref, stage=stage))


def _print_reasons(rows: list[dict[str, Any]]) -> None:
    """Per stage, judge and rule: how many items it removed, the range, median and histogram of what it measured,
    and the threshold it held them to."""
    cells = []
    for r in rows:
        measured, threshold = audit_queries.spread_text(r)
        rule = r["rule"] if r["decision"] == "reject" else f"{r['decision']}: {r['rule']}"
        cells.append([f"{r['stage']}\n{r['judge']}", rule, str(r["n"]), measured.replace(") ", ")\n", 1), threshold])
    columns = [Col("stage, judge"), Col("rule", text=True), Col("n", justify="right"), Col("measured"),
               Col("limit", justify="right")]  # fmt: skip
    out.print(fitted(out, columns, cells))


@app.command()
def show(
    ctx: typer.Context,
    item: Annotated[str, typer.Argument(help="An item id, as `audit` lists them.")],
    run_ref: Annotated[
        str | None, typer.Option("--run", help="Run id or name; default: the newest run with it.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """An item, its lineage, its verdicts and every LLM call behind them."""
    report = _read(ctx, "show", item=item, ref=run_ref)
    if as_json:
        _json(report)
        return
    record = report["item"]
    out.print(f"[bold]{record['item_id']}[/bold] {record['kind']} in run {report['run']}: {record['status']}")
    out.print_json(json.dumps(record["payload"], ensure_ascii=False))
    for parent in report["parents"]:
        out.print(f"  from {parent['item_id']} ({parent['kind']}, {parent['status']})")
    for v in report["verdicts"]:
        score = "" if v["score"] is None else f" score {v['score']:g}"
        out.print(f"  verdict {v['stage']} ({v['judge']}): {v['decision']}{score} - {v['reason']}")
    for child in report.get("used_by", []):
        out.print(f"  used by {child['item_id']} ({child['kind']}, {child['status']})")
        for v in child["verdicts"]:
            out.print(f"    verdict {v['stage']} ({v['judge']}): {v['decision']} - {v['reason']}")
    for call in report["llm_calls"]:
        if call.get("missing"):
            out.print(f"  call {call['key'][:16]}: not in the warehouse")
            continue
        out.print(f"  call {call['key'][:16]} {call['template']} @{call['template_hash']} {call['model']}")
        if call["error"]:
            out.print(f"    failed ({call['failure']}): {call['error']}")
        else:
            out.print(f"    answer: {(call['response'] or '')[:300]}")
        for attempt in call["failed_attempts"]:
            out.print(f"    attempt {attempt['attempt']} failed ({attempt['failure']}): {attempt['error']}")


@app.command()
def export(
    ctx: typer.Context,
    run_ref: RunArg = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help=f"{', '.join(GENERIC)} take any release (hf: the recipe's Hub layout if it has one), or a format "
            "the release's recipe declares (infosearch, followir, ifir, infir, triplets for the built-in ones).",
        ),
    ] = "beir",
    out_dir: Annotated[Path, typer.Option("--out", help="Directory to write.")] = Path("exports"),
    anchor: Annotated[
        str,
        typer.Option(help="InF-IR triplets: the anchor's order, query-instruction (InF-Embed's) or instruction-query."),
    ] = "query-instruction",
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace what the --out folder holds.")] = False,
    card_endpoints: CardEndpoints = False,
) -> None:
    """Write a run's release in a standard layout, or one its recipe declares, with its dataset card."""
    from ifsynth.flows.run.exports import export as export_release
    from ifsynth.flows.run.exports import export_formats

    if fmt not in export_formats():
        raise typer.BadParameter(f"--format must be one of {', '.join(export_formats())}")
    with _open(ctx) as warehouse:
        release = release_for(warehouse, run_ref)
        written = export_release(
            warehouse, release, fmt, out_dir, options={"anchor": anchor}, overwrite=overwrite, endpoints=card_endpoints
        )
    out.print(f"release {release}: {len(written.files)} files written to {out_dir.resolve()} ({fmt})")
    for what in written.left_out:
        out.print(f"left out: {what}", markup=False, highlight=False)


@app.command()
def push(
    ctx: typer.Context,
    release_ref: Annotated[str, typer.Argument(metavar="RELEASE", help="A release name, or a run id or name.")],
    repo: Annotated[str, typer.Option(help="The dataset repository on the Hub, ORG/NAME.")],
    fmt: Annotated[
        str,
        typer.Option(
            "--format", help="hf (as `export --format hf`: the recipe's Hub layout, else Parquet tables), mteb or beir."
        ),
    ] = "hf",
    private: Annotated[bool, typer.Option("--private", help="Create the repository private.")] = False,
    card_endpoints: CardEndpoints = False,
) -> None:
    """Upload a release's export and card to the Hugging Face Hub (token from HF_TOKEN; HF_ENDPOINT for another Hub)."""
    from ifsynth.flows.cli.push import PUSH_FORMATS
    from ifsynth.flows.cli.push import push as push_release

    chosen = _choice(fmt, PUSH_FORMATS, "--format")
    with _open(ctx, read_only=True) as warehouse:
        release = release_for(warehouse, release_ref)
        url, files = push_release(
            warehouse,
            release,
            repo,
            chosen,
            private=private,
            endpoints=card_endpoints,
        )
    out.print(f"release {release}: {files} files pushed to {repo} ({fmt}): {url}")


@app.command("import")
def import_(
    ctx: typer.Context,
    fmt: Annotated[
        str, typer.Argument(metavar="FORMAT", help="beir, or a layout a recipe declares (instructir, infosearch, ...).")
    ],
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="The release's folder (or an InF-IR file).")],
    name: Annotated[str | None, typer.Option(help="Name of the release; default: the folder's name.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Read a published release into the warehouse, to be measured like a generated one."""
    from ifsynth.flows.run.exports import import_release

    with _open(ctx, read_only=False, create=True) as warehouse:
        report = import_release(warehouse, fmt, directory, name)
    if as_json:
        _json(report)
        return
    counts = report["counts"]
    out.print(
        f"release [bold]{report['release']}[/bold] ({report['recipe']}): {counts['queries']} queries, "
        f"{counts['instances']} instances, {counts['corpus']} passages, {counts['qrels']} judgements"
    )
    for missing in report["missing"]:
        err.print(f"missing: {missing} (not imported)", markup=False, highlight=False)


@app.command()
def stats(
    ctx: typer.Context,
    release: Annotated[str, typer.Argument(help="A release name, or a run id or name.")],
    embed_model: Annotated[
        str | None,
        typer.Option(help="InF-IR's APS: embed with this model (OpenAI-compatible) instead of TF-IDF vectors."),
    ] = None,
    embed_base_url: Annotated[
        str | None, typer.Option(help="The endpoint of --embed-model (default OpenAI's, with OPENAI_API_KEY).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Sizes, word lengths, instruction diversity and, for generated releases, yields and cost per kept row;
    for InF-IR releases also the paper's diversity figures, APS and INGF."""
    from ifsynth.flows.evaluation.diversity import diversity, embedder
    from ifsynth.warehouse.stats import find_release
    from ifsynth.warehouse.stats import stats as release_stats

    with _open(ctx, read_only=embed_model is None) as warehouse:  # the embeddings' cache is written
        name = find_release(warehouse, release)
        report = release_stats(warehouse, name)
        if report["recipe"] == "infir":
            report["diversity"] = diversity(warehouse, name, embedder(embed_model, embed_base_url, warehouse, name))
        elif embed_model:
            raise ConfigError(f"APS and INGF are measured on InF-IR releases; `{name}` is {report['recipe']}")
    if as_json:
        _json(report)
        return
    table = Table("figure", Column(report["release"], justify="right"))
    for label, value in _stat_rows(report):
        table.add_row(label, value)
    out.print(table)
    for missing in report.get("missing", []):
        out.print(f"missing from this release: {missing}")


@app.command()
def diff(
    ctx: typer.Context,
    release_a: Annotated[str, typer.Argument(help="A release (or run).")],
    release_b: Annotated[str, typer.Argument(help="Another release (or run).")],
    as_json: JsonFlag = False,
) -> None:
    """Two releases' figures side by side, with the core queries and passages they share."""
    from ifsynth.warehouse.stats import diff as release_diff
    from ifsynth.warehouse.stats import find_release

    with _open(ctx) as warehouse:
        report = release_diff(warehouse, find_release(warehouse, release_a), find_release(warehouse, release_b))
    if as_json:
        _json(report)
        return
    right = dict(_stat_rows(report["b"]))
    names = (report["a"]["release"], report["b"]["release"])
    table = Table("figure", *(Column(name, justify="right") for name in names))
    for label, value in _stat_rows(report["a"]):
        table.add_row(label, value, right.get(label, ""))
    out.print(table)
    for what, o in report["overlap"].items():
        out.print(f"shared {what.replace('_', ' ')}: {o['both']} ({o['a']} vs {o['b']})")


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _stat_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [
        (key.replace("_", " "), _fmt(report[key], 2))
        for key in ("queries", "instances", "instructions_per_query", "corpus", "positives_per_instance")
    ]
    for what, words in report["words"].items():
        rows.append((f"{what} words (mean / median)", f"{_fmt(words['mean'], 2)} / {_fmt(words['median'], 1)}"))
    rows += [(key.replace("_", " "), _fmt(report[key])) for key in ("rouge_l_within_group", "distinct_1", "distinct_2")]
    figures = report.get("diversity")
    if figures:
        for name in ("aps", "ingf"):
            rows += [(f"{name.upper()} {field}", _fmt(value)) for field, value in figures[name].items()]
        rows.append(("diversity sample", f"{figures['sample']} of {figures['of']} ({figures['embedding']})"))
    generation = report.get("generation")
    if generation:
        rows += [(f"yield {stage}", _fmt(value)) for stage, value in generation["yield"].items()]
        rows.append(("tokens per kept row", _fmt(generation["tokens_per_kept"], 0)))
        rows.append(("cost per kept row (USD)", _fmt(generation["cost_per_kept_usd"], 5)))
    return rows


EmbedBaseUrl = Annotated[str | None, typer.Option(help="embed: an OpenAI-compatible /embeddings endpoint.")]
EmbedFormat = Annotated[
    str,
    typer.Option(
        help="embed: how a query carries its instruction: instruct (Instruct: ...\\nQuery: ...), plain, "
        "or a pattern with {instruction} and {query}."
    ),
]
EmbedKeyEnv = Annotated[str, typer.Option(help="embed: the environment variable holding the endpoint's key.")]
EmbedBatch = Annotated[int, typer.Option(help="embed: texts per /embeddings request.")]


@app.command()
def evaluate(
    ctx: typer.Context,
    release: Annotated[
        str | None, typer.Argument(help="A release name, or a run id or name; the newest run's by default.")
    ] = None,
    retriever: Annotated[
        str | None,
        typer.Option(help="bm25: the built-in BM25 (bm25s); embed:MODEL: an embedding model at --embed-base-url."),
    ] = None,
    run_file: Annotated[
        Path | None, typer.Option("--run", help="Score this TREC run (qid Q0 docid rank score tag) instead.")
    ] = None,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Where BM25 writes its run; default runs/<release>.bm25[-rerank].trec.")
    ] = None,
    depth: Annotated[int, typer.Option(min=1, help="Documents BM25 retrieves per query.")] = 1000,
    rerank: Annotated[
        bool | None,
        typer.Option(
            "--rerank/--no-rerank",
            help="Rank only each query's top_ranked pool (the default when the release has one, as FollowIR's "
            "p-MRR is defined), or the full corpus.",
            show_default=False,
        ),
    ] = None,
    reference: Annotated[
        list[str] | None,
        typer.Option(
            help="Compute a reference implementation's variant instead of the paper's: infosearch-wheel, "
            "infosearch-source (WISE, SICR) or ifir (nDCG, INSTFOL). Repeatable."
        ),
    ] = None,
    instfol: Annotated[
        bool,
        typer.Option("--instfol", help="Also INSTFOL@20: an LLM judge grades the top 20, instructed vs bare."),
    ] = False,
    query_run: Annotated[
        Path | None, typer.Option(help="With --run and --instfol: your model's run over the bare queries.")
    ] = None,
    base_url: Annotated[str | None, typer.Option(help="INSTFOL judge: an OpenAI-compatible endpoint.")] = None,
    local_model: Annotated[
        str | None, typer.Option(help="INSTFOL judge: this GGUF file on the embedded llama.cpp server.")
    ] = None,
    judge_model: Annotated[str | None, typer.Option(help="INSTFOL judge: the model (default gpt-4o-mini).")] = None,
    structured_output: Annotated[
        str, typer.Option(help="INSTFOL judge: json_schema, json_object or none.")
    ] = "json_schema",
    as_json: JsonFlag = False,
    embed_base_url: EmbedBaseUrl = None,
    embed_format: EmbedFormat = "instruct",
    embed_key_env: EmbedKeyEnv = "OPENAI_API_KEY",
    embed_batch: EmbedBatch = 64,
    max_calls: Annotated[int | None, typer.Option(help="embed: at most this many /embeddings requests.")] = None,
) -> None:
    """Retrieve with BM25 or an embedding model (writing a TREC run) or score your own run, with the metrics of
    the release's recipe."""
    from ifsynth.flows.evaluation import scoring as evaluation
    from ifsynth.flows.evaluation.evaluate_release import EvaluateOptions
    from ifsynth.flows.evaluation.evaluate_release import evaluate as evaluate_release
    from ifsynth.flows.run.registry import metrics_of

    options = EvaluateOptions.model_validate(
        {
            "retriever": retriever,
            "run_file": run_file,
            "out_file": out_file,
            "depth": depth,
            "rerank": rerank,
            "references": tuple(reference or ()),
            "instfol": instfol,
            "query_run": query_run,
            "base_url": base_url,
            "local_model": local_model,
            "judge_model": judge_model,
            "structured_output": structured_output,
            "embed_base_url": embed_base_url,
            "embed_format": embed_format,
            "embed_key_env": embed_key_env,
            "embed_batch": embed_batch,
            "max_calls": max_calls,
        }
    )
    with _open(ctx, read_only=not instfol and options.system_kind != "embed") as warehouse:
        report = evaluate_release(
            warehouse, release, options, metrics_of, notify=lambda line: err.print(line, markup=False)
        )
    if as_json:
        _json(report)
        return
    table = Table("metric", Column(report["release"], justify="right"))
    for label, value in evaluation.headline(report):
        table.add_row(label, _fmt(value, 4))
    out.print(table)
    out.print(f"setting: {report['setting']}")
    if report["queries_without_results"]:
        out.print(f"{report['queries_without_results']} queries have no result in the run (scored as 0)")
    if report["unknown_queries_in_run"]:
        out.print(
            f"{report['unknown_queries_in_run']} query ids of the run are not in the release "
            "(a release of several modes names them <query id>-<mode>)"
        )


ReviewStage = Annotated[str | None, typer.Option(help="Only this stage's verdicts.")]
ReviewStatus = Annotated[str, typer.Option(help="rejected (what judges removed), ok (what they kept) or all.")]
review_app = typer.Typer(
    help="The review round trip: export LLM verdicts with their texts, import people's decisions.",
    no_args_is_help=True,
)
app.add_typer(review_app, name="review")


@review_app.command("serve")
def review_serve(
    ctx: typer.Context,
    run_ref: RunArg = None,
    stage: ReviewStage = None,
    status: ReviewStatus = "rejected",
    sample: Annotated[int | None, typer.Option(help="At most N items, spread over stages and decisions.")] = None,
    port: Annotated[int, typer.Option(min=1, max=65535, help="The loopback port of the page.")] = 8765,
    reviewer: Annotated[str | None, typer.Option(help="Whose decisions these are (default: you).")] = None,
) -> None:
    """A local page to review verdicts one at a time (a accept, r reject, s skip, u undo, n note); every
    decision is a human verdict the moment it is made."""
    from ifsynth.flows.cli.review import default_reviewer
    from ifsynth.flows.cli.review_page import serve

    chosen = _choice(status, get_args(ReviewStatusValue), "--status")
    with _open(ctx, read_only=False) as warehouse, live.LiveServer(warehouse, holder="a review page"):
        run_id = warehouse.run(run_ref).run_id  # `runs`, `funnel`, `audit`, `show` answer from this page meanwhile
        serve(
            warehouse,
            run_id,
            stage=stage,
            status=chosen,
            sample=sample,
            reviewer=reviewer or default_reviewer(),
            port=port,
            ready=lambda line: err.print(line, markup=False),
        )


@review_app.command("export")
def review_export(
    ctx: typer.Context,
    run_ref: RunArg = None,
    out_file: Annotated[Path, typer.Option("--out", help="JSONL, or CSV when the name ends in .csv.")] = Path(
        "review.jsonl"
    ),
    stage: ReviewStage = None,
    status: ReviewStatus = "rejected",
    sample: Annotated[int | None, typer.Option(help="At most N rows, spread over stages and decisions.")] = None,
) -> None:
    """Write LLM verdicts with their texts and empty human columns (human_decision: accept or reject; note)."""
    from ifsynth.flows.cli import review

    chosen = _choice(status, get_args(ReviewStatusValue), "--status")
    with _open(ctx) as warehouse:
        run_id = warehouse.run(run_ref).run_id
        rows = review.rows_for(warehouse, run_id, stage, chosen, sample)
    review.write(out_file, rows)
    out.print(f"run {run_id}: {len(rows)} verdicts to review written to {out_file}")


@review_app.command("import")
def review_import(
    ctx: typer.Context,
    in_file: Annotated[Path, typer.Argument(metavar="FILE", help="A file written by `review export`, filled in.")],
    reviewer: Annotated[
        str | None, typer.Option(help="Whose decisions these are, where a row names no reviewer (default: you).")
    ] = None,
) -> None:
    """Record the file's filled rows as human verdicts (importing it again replaces them)."""
    from ifsynth.flows.cli import review
    from ifsynth.warehouse.review import record

    verdicts = review.read(in_file, reviewer or review.default_reviewer())
    with _open(ctx, read_only=False) as warehouse:
        for run_id in sorted({v.run_id for v in verdicts}):
            record(warehouse, [v for v in verdicts if v.run_id == run_id])
    out.print(f"{len(verdicts)} human verdicts recorded from {in_file}")


@app.command()
def release(
    ctx: typer.Context,
    run_ref: RunArg = None,
    name: Annotated[str, typer.Option(help="The new release's name (and its run's).")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Reassemble a run's release with people's verdicts in place of its judges', from the cache alone: no
    request is sent, and an input people let through counts as far as later stages answered it before."""
    from pydantic import ValidationError

    from ifsynth.schemas.config import RunConfig
    from ifsynth.warehouse.stats import release_meta

    if not name:
        raise typer.BadParameter("give --name NAME for the new release")
    with _open(ctx) as warehouse:
        source = warehouse.run(run_ref)
    try:
        settings = RunConfig.model_validate(
            {**source.config, "name": name, "humans_from": source.run_id, "cache_only": True,
             "max_failure_share": 1.0, "max_calls": None, "max_cost": None, "batch": False}
        )  # fmt: skip
    except ValidationError as exc:
        raise ConfigError(f"--name {name}: {exc.errors()[0]['msg']}") from None
    run_id = _run_and_report(ctx, settings, as_json=as_json)
    with _open(ctx) as warehouse:
        card = json.loads(release_meta(warehouse, release_for(warehouse, run_id))["card"])
    reviewed = card.get("reviewed") or {"human_verdicts": 0, "overruled": 0}
    if not as_json:
        out.print(
            f"release {name}: {reviewed['overruled']} decisions overruled by people "
            f"({reviewed['human_verdicts']} human verdicts on run {source.run_id})"
        )


@app.command("report")
def report_(
    ctx: typer.Context,
    ref: Annotated[
        str | None, typer.Argument(metavar="[RUN|RELEASE]", help="A run or a release; the newest run.")
    ] = None,
    out_file: Annotated[Path, typer.Option("--out", help="The HTML file to write.")] = Path("report.html"),
    compare: Annotated[
        str | None, typer.Option(help="Overlay this release's text lengths (an imported original, say).")
    ] = None,
) -> None:
    """One self-contained HTML file: funnel, judges' scores, lengths, rejection reasons, samples, tokens, card."""
    from ifsynth.flows.cli import report

    with _open(ctx) as warehouse:
        release = release_for(warehouse, ref)
        if compare is not None:
            compare = release_for(warehouse, compare)
        document = report.build(warehouse, release, compare)
    path = report.write(out_file, document)
    out.print(f"report of {release} written to {path.resolve()} ({len(document) // 1024} kB)")


@app.command()
def agreement(ctx: typer.Context, run_ref: RunArg = None, as_json: JsonFlag = False) -> None:
    """How far each LLM judge agrees with people on the items both decided (rejection is the positive class)."""
    from ifsynth.flows.evaluation.agreement import agreement as measure
    from ifsynth.warehouse.review import pairs

    with _open(ctx) as warehouse:
        run_id = warehouse.run(run_ref).run_id
        figures = measure(pairs(warehouse, run_id))
    if as_json:
        _json({"run_id": run_id, "judges": [f.model_dump() for f in figures]})
        return
    if not figures:
        out.print(
            f"run {run_id}: no item was decided by both an LLM judge and a person yet "
            "(`ifsynth review serve`, or `review export` and `review import`)"
        )
        return
    table = Table(
        "stage", "judge", "items", "accuracy", "precision", "recall", "kappa", "llm reject / human reject, pass"
    )
    for f in figures:
        rejects, passes = f.confusion["reject"], f.confusion["pass"]
        confusion = f"R: {rejects['reject']}/{rejects['pass']}  P: {passes['reject']}/{passes['pass']}"
        table.add_row(
            f.stage,
            f.judge,
            str(f.items),
            _fmt(f.accuracy),
            _fmt(f.precision),
            _fmt(f.recall),
            _fmt(f.kappa),
            confusion,
        )
    out.print(table)


@app.command()
def validity(
    ctx: typer.Context,
    original: Annotated[str, typer.Argument(help="The original release (an imported one, say).")],
    regenerated: Annotated[str, typer.Argument(help="The release regenerated from it.")],
    system: Annotated[
        list[str],
        typer.Option(
            help="A system to rank, twice or more: bm25, bm25:k1=K,b=B,bare (any of them), embed:MODEL, "
            "run:NAME=ORIGINAL.trec,REGENERATED.trec."
        ),
    ],
    metric: Annotated[
        str | None,
        typer.Option(help="The headline metric (default: the recipe's first, e.g. ndcg@10; or p-mrr, wise, sicr)."),
    ] = None,
    reference: Annotated[list[str] | None, typer.Option(help="As evaluate's --reference. Repeatable.")] = None,
    depth: Annotated[int, typer.Option(help="Documents each retriever returns per query.")] = 1000,
    samples: Annotated[int, typer.Option(help="Bootstrap resamplings of the queries.")] = 1000,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap.")] = 0,
    embed_base_url: EmbedBaseUrl = None,
    embed_format: EmbedFormat = "instruct",
    embed_key_env: EmbedKeyEnv = "OPENAI_API_KEY",
    embed_batch: EmbedBatch = 64,
    as_json: JsonFlag = False,
) -> None:
    """Does REGENERATED rank retrieval systems as ORIGINAL does? Each system's score on both, Kendall's tau
    and Spearman's rho of the two rankings with a bootstrap interval over queries, and per-metric agreement."""
    from ifsynth.flows.evaluation import validity as checks
    from ifsynth.flows.evaluation.evaluate_release import EvaluateOptions
    from ifsynth.flows.run.registry import metrics_of

    def dense(model: str) -> Any:
        options = {
            "retriever": f"embed:{model}",
            "embed_base_url": embed_base_url,
            "embed_format": embed_format,
            "embed_key_env": embed_key_env,
            "embed_batch": embed_batch,
        }
        return EvaluateOptions.model_validate(options).system(warehouse, f"{original}~{regenerated}")

    checked = EvaluateOptions.model_validate({"retriever": "bm25", "references": tuple(reference or ())})
    with _open(ctx, read_only=False) as warehouse:
        systems = [checks.parse_system(spec, dense) for spec in system]
        report = checks.validity(
            warehouse,
            original,
            regenerated,
            systems,
            metrics_of,
            metric=metric,
            references=checked.references,
            depth=depth,
            samples=samples,
            seed=seed,
        )
        warehouse.add_validity(report)
    for counts in report.get("embeddings", []):
        err.print(f"{counts['system']}: {counts['requests']} requests sent, {counts['cached']} texts cached")
    if as_json:
        _json(report)
        return
    modes = " / ".join(dict.fromkeys(report["modes"]))  # the mode scored on each release, once when the same
    columns = (Column(report[side], justify="right") for side in ("original", "regenerated"))
    table = Table("system", *columns, Column("rank", justify="right"), title=f"{report['metric']} ({modes})")
    for row in report["systems"]:
        ranks = f"{row['original_rank']} -> {row['regenerated_rank']}"
        table.add_row(row["system"], _fmt(row["original"], 4), _fmt(row["regenerated"], 4), ranks)
    out.print(table)
    interval = report["bootstrap"]
    for name, label in (("kendall_tau", "Kendall's tau-b"), ("spearman_rho", "Spearman's rho")):
        bounds = interval[name]
        said = f"[{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else "[-]"
        out.print(f"{label}: {_fmt(report[name])} {said} ({interval['samples']} resamplings of queries)")
    agreement = Table("metric", Column("tau-b", justify="right"), Column("rho", justify="right"), title="per metric")
    for row in report["per_metric"]:
        agreement.add_row(row["metric"], _fmt(row["kendall_tau"]), _fmt(row["spearman_rho"]))
    out.print(agreement)


def main() -> None:
    import click

    skip_pandas_probe()
    try:
        # not click's standalone mode, which reports an IfsynthError as "Aborted!" or a traceback
        code = app(standalone_mode=False)
    except (click.ClickException, typer.TyperException) as exc:  # typer raises its own copy of click's errors
        message = exc.format_message()
        if not message:  # no arguments: the help has been printed, and is the answer
            sys.exit(exc.exit_code)
        _exit_after_error(f"error: {message} (--help lists the options)", exc.exit_code)
    except (click.exceptions.Abort, typer.Abort):
        sys.exit(1)
    except IfsynthError as exc:
        _exit_after_error(_said(exc), exc.exit_code)
    except OSError as exc:
        if exc.filename is None:  # a library's network error, say: unexpected
            _exit_unexpected(exc)
        else:  # a path a command was given and cannot use (read-only, a folder, missing): which, and why
            _exit_after_error(f"error: `{exc.filename}`: {exc.strerror or exc}", 1)
    except Exception as exc:
        _exit_unexpected(exc)
    sys.exit(code if isinstance(code, int) else 0)


def _exit_unexpected(exc: Exception) -> None:
    from ifsynth.flows.llm.secrets import scrubbed

    message = scrubbed(" ".join(str(exc).split()))[:300]
    _exit_after_error(f"error: unexpected {type(exc).__name__}: {message} (--debug shows the traceback)", 1)


def script() -> NoReturn:
    """The ``ifsynth`` command's process: ``main``, then an exit that skips the interpreter's clearing of its
    ~3,000 modules, half a second of a fully cached rerun. What an exit must do still happens, in the
    interpreter's order: threads joined and the hooks registered for that run (Prefect drains its event and
    log queues there), then the ``atexit`` hooks."""
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    sys.stdout.flush()
    sys.stderr.flush()
    join_threads: Callable[[], None] = vars(threading)["_shutdown"]  # what Py_FinalizeEx calls first
    join_threads()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _said(exc: IfsynthError) -> str:
    from ifsynth.flows.llm.secrets import scrubbed

    clean_stop = isinstance(exc, BudgetExhausted | RunInterrupted)  # not failures: each says how to continue
    return f"{'' if clean_stop else 'error: '}{scrubbed(str(exc))}"  # a stage's error may quote a reply


def _exit_after_error(message: str, code: int) -> None:
    """One line, then exit without the interpreter's teardown: an exception that stopped a run still holds
    DuckDB objects through its frames, and their bindings report each one as leaked at shutdown (dozens of
    lines). Everything that must be written already was, by the context managers the exception unwound.
    ``--debug`` adds the traceback, without the endpoints' secrets (an error may have echoed the key)."""
    if os.environ.get("IFSYNTH_DEBUG"):
        import traceback

        from ifsynth.flows.llm.secrets import scrubbed

        sys.stderr.write(scrubbed(traceback.format_exc()))
    err.print(message, markup=False, highlight=False, soft_wrap=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    script()
