"""Sharded runs on local processes: the merged release is the one-process run's, byte for byte; a shard killed
mid-run is continued alone; the merge refuses shards that do not make one run."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ifsynth.flows.run.shards import ShardRun, watched
from ifsynth.schemas.config import Shard
from ifsynth.schemas.errors import RunFailed, WarehouseError
from ifsynth.warehouse import live
from ifsynth.warehouse.store import Warehouse
from tests.conftest import REPO, cli, invoke
from tests.fake_openai import FakeOpenAI
from tests.helpers import export_files, synthetic_beir
from tests.recipes.test_infir import sensible as infir_answers
from tests.recipes.test_infosearch import sensible as infosearch_answers
from tests.servers import descendants, work_pool, worker_log

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server

SEEDS = 50
CONCURRENCY = 4
EVERY_SEED = ["query_length_percentiles=[0,100]", "passage_length_percentiles=[0,100]", "passage_band=inside"]
SETTINGS = [*EVERY_SEED, "instructions_per_query=3", "q1_min_score=1", "min_group_size=1"]


def run_args(seeds: Path, base_url: str, *extra: str) -> list[str]:
    sets = [a for s in SETTINGS for a in ("--set", s)]
    return ["run", "instructir", "--seeds", f"beir:{seeds}", "--limit", "40", "--base-url", base_url,
            "--model", "m", "--concurrency", str(CONCURRENCY), "--json", *sets, *extra]  # fmt: skip


def exported(warehouse: Path, out: Path) -> dict[str, bytes]:
    done = invoke("--warehouse", str(warehouse), "export", "--format", "beir", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return {name: data for name, data in export_files(out).items() if not name.endswith("README.md")}


def groups(warehouse: Path, stage: str) -> set[str]:
    with duckdb.connect(str(warehouse), read_only=True) as db:
        rows = db.execute("SELECT DISTINCT group_id FROM items WHERE stage = ? AND status = 'ok'", [stage]).fetchall()
    return {row[0] for row in rows}


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_beir(tmp_path_factory.mktemp("seeds") / "beir", SEEDS)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    """The endpoint of the module's shared runs: one URL, so a test can continue a run a fixture made."""
    with FakeOpenAI(latency=0.01) as fake:
        yield fake


def shared_run(root: Path, seeds: Path, fake: FakeOpenAI, *extra: str) -> dict[str, Any]:
    """A run against the module's fake into ``root``: its funnel, export, requests sent and warehouse."""
    before = fake.stats()["requests"]
    done = cli("--warehouse", str(root / "w.duckdb"), *run_args(seeds, fake.base_url, *extra))
    assert done.returncode == 0, done.stderr
    sent = fake.stats()["requests"] - before
    return {"funnel": json.loads(done.stdout), "export": exported(root / "w.duckdb", root / "out"),
            "sent": sent, "warehouse": root / "w.duckdb", "shards": root / "w.duckdb.shards"}  # fmt: skip


@pytest.fixture(scope="module")
def one_process(seeds: Path, fake: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return shared_run(tmp_path_factory.mktemp("one"), seeds, fake)


@pytest.fixture(scope="module")
def two_shards(seeds: Path, fake: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return shared_run(tmp_path_factory.mktemp("two"), seeds, fake, "--shards", "2")


def test_two_shards_make_the_one_process_release(one_process: dict[str, Any], two_shards: dict[str, Any]) -> None:
    assert two_shards["export"] == one_process["export"]
    assert len(one_process["export"]) >= 3 and one_process["funnel"]["accepted"] > 10
    # every request was sent once, by the shard that holds its seed; the merge answered all from the cache
    assert two_shards["sent"] == one_process["sent"]
    merged = {row["stage"]: row for row in two_shards["funnel"]["stages"]}
    assert sum(row["sent"] for row in merged.values()) == 0
    assert merged["instructions"]["cached"] == 40
    # the shards' seeds are disjoint, fall where their hash says, and together are the selection
    seeds = groups(one_process["warehouse"], "select")
    shard_seeds = [groups(two_shards["shards"] / f"{i}-of-2.duckdb", "select") for i in (1, 2)]
    assert shard_seeds[0].isdisjoint(shard_seeds[1]) and shard_seeds[0] | shard_seeds[1] == seeds
    assert all(Shard(index=1, count=2).holds(seed) for seed in shard_seeds[0]) and all(shard_seeds)
    # the merged warehouse holds the shards' runs beside the merged one, with their own funnels
    with Warehouse(two_shards["warehouse"], read_only=True) as warehouse:
        runs = warehouse.query("SELECT config, status FROM runs")
    shards = sorted((s["index"], s["count"]) for r in runs if (s := json.loads(r["config"])["shard"]))
    assert shards == [(1, 2), (2, 2)] and len(runs) == 3 and {r["status"] for r in runs} == {"completed"}


def test_a_killed_shard_is_continued_alone(seeds: Path, one_process: dict[str, Any], tmp_path: Path) -> None:
    """SIGKILL one shard's process mid-run: the run fails in one line naming it; the same command again runs
    that shard alone, from its cache, and the release is the one-process run's."""
    warehouse = tmp_path / "w.duckdb"
    args = ["--warehouse", str(warehouse), *run_args(seeds, "", "--shards", "2")]
    with FakeOpenAI(latency=0.2) as fake:
        args[args.index("--base-url") + 1] = fake.base_url
        parent = subprocess.Popen([sys.executable, "-m", "ifsynth.flows.cli", *args], cwd=REPO, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())  # fmt: skip
        deadline = time.monotonic() + 120
        while fake.stats()["requests"] < 40:
            assert time.monotonic() < deadline and parent.poll() is None, parent.stderr.read() if parent.stderr else ""
            time.sleep(0.05)
        fake.configure(latency=1.0)  # the rest slower: shard 2 is still running when it is looked at and killed
        wait_running(warehouse.with_name("w.duckdb.shards") / "2-of-2.duckdb", deadline)  # its process took it
        os.kill(shard_process(parent.pid, "2-of-2.duckdb"), signal.SIGKILL)
        fake.configure(latency=0.01)  # killed: shard 1 need not stay slow to the end
        _, stderr = parent.communicate(timeout=120)
        assert parent.returncode == RunFailed.exit_code
        last = stderr.strip().splitlines()[-1]
        assert last.startswith("error: shard 2 of 2 died (its process ended without recording how)")
        assert "run the same command again" in last
        before = fake.stats()["requests"]
        shard_1 = warehouse.with_name("w.duckdb.shards") / "1-of-2.duckdb"
        stamp = shard_1.stat().st_mtime_ns

        again = cli(*args)
        assert again.returncode == 0, again.stderr
        assert "1 to run on local processes, 1 complete" in again.stderr
        assert shard_1.stat().st_mtime_ns == stamp  # the complete shard was not opened for writing again
        # only the killed shard's requests in flight were lost: at most its concurrency sent twice
        assert one_process["sent"] <= fake.stats()["requests"] <= one_process["sent"] + CONCURRENCY
        assert fake.stats()["requests"] > before
    assert exported(warehouse, tmp_path / "out") == one_process["export"]


def test_ctrl_c_stops_every_shard_cleanly_and_a_shard_can_be_watched(seeds: Path, tmp_path: Path) -> None:
    """While shards run, another shell reads a shard's funnel; Ctrl-C then stops the run and every shard's
    process, each recording that it was interrupted, in one line with exit 130."""
    warehouse = tmp_path / "w.duckdb"
    with FakeOpenAI(latency=0.2) as fake:
        args = ["--warehouse", str(warehouse), *run_args(seeds, fake.base_url, "--shards", "2")]
        parent = subprocess.Popen([sys.executable, "-m", "ifsynth.flows.cli", *args], cwd=REPO, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())  # fmt: skip
        deadline = time.monotonic() + 120
        while fake.stats()["requests"] < 20:
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.05)
        fake.configure(latency=1.0)  # the rest slower: a shard is still running when it is looked at and stopped
        shard = warehouse.with_name("w.duckdb.shards") / "1-of-2.duckdb"
        for path in (shard, shard.with_name("2-of-2.duckdb")):  # from another shell, answered by its process
            wait_running(path, deadline)
        # the line the run prints every half minute, from each shard's process
        running = [
            ShardRun(Shard(index=i, count=2), shard.with_name(f"{i}-of-2.duckdb"), "", "", False) for i in (1, 2)
        ]
        line = watched(running)
        stages = r"(\w+ \d+/\d+(, \w+ \d+/\d+)*|\d stages done)"  # the stages under way, or how many are done
        assert re.fullmatch(rf"shards of 2 running: 1: {stages}; 2: {stages}", line)
        children = descendants(parent.pid)
        parent.send_signal(signal.SIGINT)
        _, stderr = parent.communicate(timeout=120)
    assert parent.returncode == 130, stderr[-2000:]
    assert (
        stderr.strip().splitlines()[-1] == "interrupted; run the same command again to continue from where it stopped"
    )
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()]  # no shard process outlives the run
    for index in (1, 2):
        with Warehouse(warehouse.with_name("w.duckdb.shards") / f"{index}-of-2.duckdb", read_only=True) as store:
            run = store.run()
            assert run.status == "interrupted", run.error


def test_the_watch_line_tells_a_shard_starting_from_one_that_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live, "TIMEOUT", 0.5)
    paths = [tmp_path / f"{i}-of-2.duckdb" for i in (1, 2)]
    with socket.create_server(("127.0.0.1", 0)) as mute:  # the second shard's process: accepts, never replies
        live.live_file(paths[1]).write_text(json.dumps({"pid": 1, "port": mute.getsockname()[1], "token": "t"}))
        running = [ShardRun(Shard(index=i, count=2), paths[i - 1], "", "", False) for i in (1, 2)]
        assert watched(running) == "shards of 2 running: 1: starting; 2: no answer"


def test_shards_stop_when_their_coordinator_is_killed(seeds: Path, tmp_path: Path) -> None:
    """SIGKILL of the coordinating process, which cannot pass anything on: its shard processes see it gone,
    stop, record that they were interrupted and release their warehouses, so the same command continues."""
    warehouse = tmp_path / "w.duckdb"
    with FakeOpenAI(latency=0.2) as fake:
        args = ["--warehouse", str(warehouse), *run_args(seeds, fake.base_url, "--shards", "2")]
        command = [sys.executable, "-m", "ifsynth.flows.cli", *args]
        parent = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while fake.stats()["requests"] < 20:
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.05)
        fake.configure(latency=1.0)  # the rest slower: a shard is still running when it is looked at and stopped
        paths = [warehouse.with_name("w.duckdb.shards") / f"{i}-of-2.duckdb" for i in (1, 2)]
        for path in paths:
            wait_running(path, deadline)
        shards = [shard_process(parent.pid, path.name) for path in paths]
        parent.kill()
        parent.wait()
        while alive := [pid for pid in shards if running(pid)]:  # bounded by their stop's grace, 30 s
            assert time.monotonic() < deadline + 60, f"shard processes {alive} outlive their coordinator"
            time.sleep(0.2)
        for path in paths:
            with Warehouse(path) as store:  # released: it opens for writing
                assert store.run().status == "interrupted"
        fake.configure(latency=0.01)
        again = cli(*args)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["status"] == "completed"


def running(pid: int) -> bool:
    """Whether the process lives (a zombie no one has reaped yet has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_running(shard: Path, deadline: float) -> None:
    """Until the shard's process has taken its run: its funnel, read from another process, says running."""
    while (funnel := invoke("--warehouse", str(shard), "funnel", "--json")).returncode == 0:
        if json.loads(funnel.stdout)["status"] == "running":
            return
        assert json.loads(funnel.stdout)["status"] == "pending" and time.monotonic() < deadline
        time.sleep(1)  # a reader holds the file while it reads: leave the shard's process room to take it
    raise AssertionError(funnel.stderr)


def shard_process(parent: int, marker: str) -> int:
    """The pid of ``parent``'s child process whose command line names ``marker``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat[1]) == parent and marker in command:
            return int(entry.name)
    raise AssertionError(f"no child of {parent} runs {marker}")


def test_merge_refuses_shards_of_different_runs(two_shards: dict[str, Any], tmp_path: Path) -> None:
    shards = two_shards["shards"]
    other = tmp_path / "2-of-2.duckdb"
    other.write_bytes((shards / "2-of-2.duckdb").read_bytes())
    with duckdb.connect(str(other)) as db:  # the same shard, made with another seed setting
        row = db.execute("SELECT config FROM runs").fetchone()
        assert row is not None
        (config,) = row
        changed = json.loads(config)
        changed["params"]["seed"] = 7
        db.execute("UPDATE runs SET config = ?", [json.dumps(changed)])
    into = tmp_path / "merged.duckdb"

    def merge(*paths: Path) -> subprocess.CompletedProcess[str]:
        return invoke("merge", *map(str, paths), "--into", str(into))

    done = merge(shards / "1-of-2.duckdb", other)
    said = done.stderr.strip().splitlines()
    assert done.returncode == 2 and said[-1].startswith("error: ") and not any("Traceback" in s for s in said)
    assert said[-1].endswith("are shards of different runs (their params.seed differ)")
    done = merge(shards / "1-of-2.duckdb")
    assert done.returncode == 2 and "each of the 2 shards once (missing: 2)" in done.stderr
    done = merge(shards / "1-of-2.duckdb", shards / "1-of-2.duckdb")
    assert done.returncode == 2 and "(missing: 2; given twice: 1)" in done.stderr
    done = merge(two_shards["warehouse"], shards / "1-of-2.duckdb")
    assert done.returncode == 2 and "holds no shard's run" in done.stderr
    assert not into.exists()  # nothing was written by a refused merge


def flow_runs(pool: str) -> list[Any]:
    """The pool's flow runs, chosen by the server: a page of all the session's runs may leave them out."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import WorkPoolFilter, WorkPoolFilterName

    with get_client(sync_client=True) as client:
        return client.read_flow_runs(work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[pool])))


def serving(warehouse: str) -> bool:
    """Whether a process has taken the run in ``warehouse`` (it marks it running, then answers from it)."""
    try:
        return live.ask(warehouse, "funnel") is not None
    except WarehouseError:  # there, but too busy to answer in time
        return True


def test_shards_run_on_a_work_pools_workers(seeds: Path, one_process: dict[str, Any], tmp_path: Path) -> None:
    warehouse = tmp_path / "w.duckdb"
    with work_pool(tmp_path, "pool-a"), FakeOpenAI(latency=0.01) as fake:
        done = cli("--warehouse", str(warehouse), *run_args(seeds, fake.base_url, "--shards", "2", "--work-pool",
                                                            "pool-a"))  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert fake.stats()["requests"] == one_process["sent"]
        runs = flow_runs("pool-a")
        logs = worker_log(tmp_path, "pool-a", 1) + worker_log(tmp_path, "pool-a", 2)
    assert sorted(run.name.rsplit(".", 1)[1] for run in runs) == ["shard-1-of-2", "shard-2-of-2"]
    assert all(run.state is not None and run.state.is_completed() and run.infrastructure_pid for run in runs)
    for run in runs:  # each was taken by one of the pool's workers, which started its process
        assert re.search(rf"Worker 'pool-a-w[12]' submitting flow run '{run.id}'", logs)
    assert exported(warehouse, tmp_path / "out") == one_process["export"]


def test_a_killed_worker_is_made_up_for_by_a_rerun(seeds: Path, one_process: dict[str, Any], tmp_path: Path) -> None:
    """SIGKILL a worker and its flow run's process mid-run: the run notices the process is gone and fails in one
    line; the same command again sends that shard alone to the worker left, and the release is the same."""
    warehouse = tmp_path / "w.duckdb"
    with work_pool(tmp_path, "pool-b") as workers, FakeOpenAI(latency=0.2) as fake:
        args = [
            "--warehouse",
            str(warehouse),
            *run_args(seeds, fake.base_url, "--shards", "2", "--work-pool", "pool-b"),
        ]
        parent = subprocess.Popen([sys.executable, "-m", "ifsynth.flows.cli", *args], cwd=REPO, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())  # fmt: skip
        deadline, victim = time.monotonic() + 120, None
        # A worker whose flow run is running (one killed while pending is never noticed) and whose process has
        # taken its shard's run: Prefect's "running" comes before the flow opens its warehouse, and a process
        # killed in between is reported as one that never started. It has taken the run once it answers.
        while victim is None:
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.05)
            if fake.stats()["requests"] >= 40:
                running = {int(r.infrastructure_pid) for r in flow_runs("pool-b") if r.state and r.state.is_running()
                           and r.infrastructure_pid and serving(r.parameters["warehouse"])}  # fmt: skip
                victim = next((w for w in workers if running & set(descendants(w.pid))), None)
        for pid in [victim.pid, *descendants(victim.pid)]:
            os.kill(pid, signal.SIGKILL)
        fake.configure(latency=0.01)  # killed: the other shard need not stay slow to the end
        _, stderr = parent.communicate(timeout=180)
        assert parent.returncode == RunFailed.exit_code, stderr
        assert re.search(r"error: shard [12] of 2 died \(its process ended without recording how\)", stderr)
        assert "crashed" in stderr  # the flow run the dead worker left running was marked so

        again = cli(*args)
        assert again.returncode == 0, again.stderr
        assert "1 to run on work pool pool-b, 1 complete" in again.stderr
        assert one_process["sent"] <= fake.stats()["requests"] <= one_process["sent"] + CONCURRENCY
    assert exported(warehouse, tmp_path / "out") == one_process["export"]


@pytest.mark.parametrize("name", ["infosearch", "infir"])
def test_recipes_with_steps_over_every_seed_shard_to_the_same_release(name: str, tmp_path: Path) -> None:
    """InfoSearch's retrieval panel sits between LLM stages and InF-IR's validation draws distractors from the
    whole seed corpus: sharded, each still releases what one process does."""
    responder = {"infosearch": infosearch_answers, "infir": infir_answers}[name]
    exports = {}
    with FakeOpenAI(mode="responder", responder=responder) as fake:
        for shards, command in (("1", invoke), ("2", cli)):  # one process: the test's own
            warehouse = tmp_path / f"{shards}.duckdb"
            args = ["run", name, "--seeds", "demo", "--base-url", fake.base_url, "--model", "m", "--shards", shards]
            done = command("--warehouse", str(warehouse), *args, "--json")
            assert done.returncode == 0, done.stderr[-2000:]
            assert json.loads(done.stdout)["accepted"] > 0
            out = invoke("--warehouse", str(warehouse), "export", "--format", "jsonl", "--out", str(tmp_path / shards))
            assert out.returncode == 0, out.stderr
            exports[shards] = {k: v for k, v in export_files(tmp_path / shards).items() if not k.endswith("README.md")}
    assert exports["2"] == exports["1"] and exports["1"]


def test_a_second_sharded_run_beside_the_first_and_the_first_again(
    seeds: Path, fake: FakeOpenAI, one_process: dict[str, Any], two_shards: dict[str, Any], tmp_path: Path
) -> None:
    """Other settings with the same shard files make runs of their own; the first command again merges its own
    shards' runs, not the newest ones in their files."""
    warehouse = str(tmp_path / "w.duckdb")
    shutil.copy(two_shards["warehouse"], warehouse)  # the first command's warehouse and shards, made once above
    shutil.copytree(two_shards["shards"], tmp_path / "w.duckdb.shards")
    args = run_args(seeds, fake.base_url, "--shards", "2")
    other = [*args[: args.index("--limit")], "--limit", "20", *args[args.index("--limit") + 2 :]]
    done = cli("--warehouse", warehouse, *other)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stages"][0]["out"] == 20
    again = cli("--warehouse", warehouse, *args)
    assert again.returncode == 0, again.stderr
    assert "0 to run on local processes, 2 complete" in again.stderr
    assert exported(tmp_path / "w.duckdb", tmp_path / "out") == one_process["export"]
