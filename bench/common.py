"""What the benchmarks share: the loopback fake in its own process, a JSON line out, load figures."""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.helpers import query, synthetic_beir

REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def fake_server(*args: str, port: int = 0) -> Iterator[str]:
    """`python -m tests.fake_openai` on a loopback port (a free one by default), in its own process (its CPU is
    not ours)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_openai", "--port", str(port), *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        if not base_url.startswith("http"):
            raise RuntimeError("the fake OpenAI server did not start")
        yield base_url
    finally:
        process.terminate()
        process.wait(timeout=10)


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages: figures measured on a busy machine say so."""
    return [round(x, 2) for x in os.getloadavg()]


def emit(figures: dict[str, Any]) -> None:
    print(json.dumps({**figures, "load": load(), "cpus": os.cpu_count()}), flush=True)


# Every seed eligible and every item kept, so each stage carries its full volume of requests.
FULL_VOLUME = ["query_length_percentiles=[0,100]", "passage_length_percentiles=[0,100]", "passage_band=inside",
               "q1_min_score=1", "min_group_size=1"]  # fmt: skip


@functools.cache
def prefect_home() -> str:
    """A Prefect home of this benchmark process's own: its commands share the local Prefect server kept there
    (as a user's commands do), never the user's, and it is stopped when the benchmark ends."""
    return _own_folder("PREFECT_HOME", ("prefect-server", "--stop"), prefix="ifsynth-bench-prefect-")


@functools.cache
def runtime_dir() -> str:
    """A folder of warm processes of this benchmark process's own (flows/cli/warm.py), short enough for a
    socket's address: the warm processes its commands start are its own, and stopped when it ends."""
    return _own_folder("XDG_RUNTIME_DIR", ("warm", "--stop"), prefix="ifsb-", under="/tmp")


def _own_folder(variable: str, stop: tuple[str, ...], *, prefix: str, under: str | None = None) -> str:
    """A new folder that the benchmark's commands are given as ``variable``; at the benchmark's end, the
    ifsynth command ``stop`` stops what they started there, and the folder goes."""
    folder = tempfile.mkdtemp(prefix=prefix, dir=under)
    atexit.register(_stop_in, folder, variable, stop)
    return folder


def _stop_in(folder: str, variable: str, stop: tuple[str, ...]) -> None:
    command = [sys.executable, "-m", "ifsynth.flows.cli", *stop]
    subprocess.run(command, env={**os.environ, variable: folder}, capture_output=True, check=False)
    shutil.rmtree(folder, ignore_errors=True)


def cli(
    warehouse: Path, *args: str, env: dict[str, str] | None = None, python: str = sys.executable, warm: bool = False
) -> subprocess.Popen[str]:
    """`ifsynth --warehouse W ...` as a child process in its own process group (killing the group is what a
    crash of the machine does to the command; the local Prefect server runs in a session of its own).
    ``python``: the interpreter of another checkout's venv, to run that checkout's ifsynth. ``warm``: a run
    goes through the warm process, as a user's does; else each command is a process of its own, whose CPU,
    memory and process group are the command's."""
    return subprocess.Popen(
        [python, "-m", "ifsynth.flows.cli", "--warehouse", str(warehouse), *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=command_env(warehouse, env, warm=warm),
        start_new_session=True,
    )


def command_env(warehouse: Path, env: dict[str, str] | None = None, *, warm: bool = False) -> dict[str, str]:
    """The environment of a benchmark's command: the bench's own Prefect home and warm-process folder, and
    no warm process unless ``warm`` (else the command would hand its run to one, and a figure read from the
    command's process would be the thin client's)."""
    defaults = {
        "IR_DATASETS_HOME": str(warehouse.parent / "irds"),
        "PREFECT_HOME": prefect_home(),
        "IFSYNTH_WARM": "1" if warm else "0",
        "XDG_RUNTIME_DIR": runtime_dir(),
    }
    return {**os.environ, **defaults, **(env or {})}


def run_args(seeds: Path, base_url: str, concurrency: int, *extra: str, k: int = 10) -> list[str]:
    sets = [*FULL_VOLUME, f"instructions_per_query={k}"]
    return [
        "run", "instructir", "--seeds", f"beir:{seeds}", "--base-url", base_url, "--model", "bench-model",
        "--concurrency", str(concurrency), "--json", *[a for s in sets for a in ("--set", s)], *extra,
    ]  # fmt: skip


def finish(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, errors = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"ifsynth exited {process.returncode}: {errors.strip()[-500:]}")
    return json.loads(out)


def warm_up(base_url: str, root: Path, env: dict[str, str] | None = None, *, warm: bool = False) -> float:
    """One tiny run first: Prefect creates and migrates its database on the first run of a machine, a cost
    no later run pays; with ``warm``, the run starts the warm process, which is then waited for, as a
    user's second command would find it. Returns the run's wall time."""
    started = time.perf_counter()
    seeds = synthetic_beir(root / "warm-seeds", 2)
    finish(cli(root / "warm.duckdb", *run_args(seeds, base_url, 4, "--limit", "1", k=1), env=env, warm=warm))
    wall = time.perf_counter() - started
    if warm:
        serving(1)
    return wall


def serving(count: int) -> None:
    """Wait until ``count`` warm processes take commands (each interpreter, that is each checkout, has one)."""
    deadline = time.monotonic() + 120
    while len(list(Path(runtime_dir()).glob("ifsynth-warm-*/*.sock"))) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"the warm process did not start (its log is in {runtime_dir()})")
        time.sleep(0.1)


def fake_requests(base_url: str) -> int:
    """Requests the loopback fake has answered so far (any outcome)."""
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/_stats", timeout=10) as response:
        return int(json.load(response)["requests"])


def covered(spans: list[tuple[float, float]]) -> float:
    """The time inside at least one of the (start, end) spans: of stages that may overlap, how long any ran."""
    total, reach = 0.0, -float("inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def stage_times(warehouse: Path, run_id: str) -> list[dict[str, Any]]:
    """Per stage: requests sent, the wall time from the first request's start to the last answer (``first_s``
    and ``last_s``, epoch seconds), the mean latency the client saw (the server's latency plus its own time
    and the network's), and the seconds since the previous LLM stage's last answer (``idle_before_s``: no
    request in flight, the barrier between them; negative where stages run together)."""
    from ifsynth.warehouse.store import Warehouse

    with Warehouse(warehouse, read_only=True) as wh:
        stages = query(
            wh,
            "SELECT stage, count(*) AS calls, epoch(min(created_at - to_milliseconds(latency_ms))) AS first_s, "
            "epoch(max(created_at)) AS last_s, round(avg(latency_ms), 1) AS mean_latency_ms "
            "FROM llm_calls WHERE run_id = ? GROUP BY stage ORDER BY min(created_at)",
            [run_id],
        )
    last = None
    for stage in stages:
        stage["wall_s"] = stage["last_s"] - stage["first_s"]
        stage["idle_before_s"] = None if last is None else round(stage["first_s"] - last, 3)
        last = stage["last_s"]
    return stages


def slot_budget(warehouse: Path, run_id: str, concurrency: int, latency: float) -> dict[str, Any]:
    """Where the LLM stages' span goes, in place-seconds (C places over the span): the server's L for every
    request, what each request took beyond it as the client saw it (``over_latency_s``: its own CPU, the
    event loop's queue, the server's queue), and the places with no request between its send and its reply,
    before the bound was first full (``ramp_s``), after it was last full (``tail_s``) and between
    (``steady_s``): a place is held a moment longer, as its answer is journaled, and its next request waits
    for the loop. Each figure is divided by C, so they add up to the span in seconds."""
    from ifsynth.warehouse.store import Warehouse

    with Warehouse(warehouse, read_only=True) as wh:
        rows = query(
            wh,
            "SELECT epoch(created_at) - latency_ms / 1000 AS s, epoch(created_at) AS e, latency_ms FROM llm_calls "
            "WHERE run_id = ? AND latency_ms IS NOT NULL",
            [run_id],
        )
    if not rows:
        raise SystemExit(f"run {run_id} sent no request: no span to split")
    moments = sorted([(r["s"], 1) for r in rows] + [(r["e"], -1) for r in rows])
    first, last = moments[0][0], moments[-1][0]
    full: list[tuple[float, float]] = []  # the stretches with every place taken
    in_flight, since = 0, None
    for at, step in moments:
        in_flight += step
        if in_flight >= concurrency and since is None:
            since = at
        elif in_flight < concurrency and since is not None:
            full.append((since, at))
            since = None
    start_full, end_full = (full[0][0], full[-1][1]) if full else (last, last)
    served = sum(r["latency_ms"] for r in rows) / 1000

    def empty(a: float, b: float) -> float:
        """Place-seconds left empty between a and b."""
        taken = sum(max(0.0, min(r["e"], b) - max(r["s"], a)) for r in rows)
        return (concurrency * (b - a) - taken) / concurrency

    percentiles = [0.5, 0.9, 0.99]
    ranked = sorted(r["latency_ms"] for r in rows)
    return {
        "span_s": round(last - first, 3),
        "latency_s": round(len(rows) * latency / concurrency, 3),
        "over_latency_s": round((served - len(rows) * latency) / concurrency, 3),
        "ramp_s": round(empty(first, start_full), 3),
        "steady_s": round(empty(start_full, end_full), 3),
        "tail_s": round(empty(end_full, last), 3),
        "client_latency_ms": {f"p{round(p * 100)}": round(ranked[int(p * (len(ranked) - 1))], 1) for p in percentiles},
    }


def stage_seconds(flow_run_name: str, stages: int, wait: float = 30.0) -> float:
    """The seconds in which any of the flow run's tasks (its stages, one task each; some run together) ran,
    as the local Prefect server the benchmark's commands share recorded them: in a fully cached rerun, the
    time to read its answers and write its rows. Task runs reach the server as events, shortly after the
    command ends: waited for."""
    from ifsynth.flows.run.local_prefect import running

    server = running(Path(prefect_home()) / "ifsynth-server")
    if server is None:
        raise RuntimeError("the benchmark's local Prefect server is not running")
    url = server.url

    def post(path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)

    flow_runs = post("/flow_runs/filter", {"flow_runs": {"name": {"any_": [flow_run_name]}}})
    if len(flow_runs) != 1:
        raise RuntimeError(f"{len(flow_runs)} flow runs named {flow_run_name} on the benchmark's Prefect server")
    deadline = time.monotonic() + wait
    while True:
        tasks = post("/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_runs[0]["id"]]}}})
        if (len(tasks) == stages and all(t["state_type"] == "COMPLETED" for t in tasks)) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if len(tasks) != stages:
        raise RuntimeError(f"Prefect recorded {len(tasks)} task runs of {flow_run_name}, not {stages}")
    return covered([(_epoch(t["start_time"]), _epoch(t["end_time"])) for t in tasks])


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def high_water_kb(pid: int) -> int:
    """VmHWM, the peak resident set the kernel has seen for the process (0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
