"""The recipe flows as Prefect deployments: `prefect deploy --all` with the repository's prefect.yaml puts them on
a work pool whose worker runs one from a run's config, and `ifsynth serve` serves them from its own process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ifsynth.flows.run.config import resolve
from ifsynth.flows.run.registry import recipe
from ifsynth.flows.run.runner import start
from ifsynth.schemas.config import RunConfig
from ifsynth.schemas.errors import ConfigError
from ifsynth.warehouse.store import Warehouse
from tests.conftest import REPO
from tests.fake_openai import FakeOpenAI
from tests.helpers import BUILTIN, as_from_a_shell, synthetic_beir
from tests.servers import work_pool

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_beir(tmp_path_factory.mktemp("seeds") / "beir", 12)


def run_config(seeds: Path, base_url: str) -> dict[str, Any]:
    """A run's config as a flow run takes it: settings, with the endpoint's key left to the environment."""
    sets = ["instructions_per_query=2", "min_group_size=1", "q1_min_score=1"]
    config = resolve("instructir", seeds=f"beir:{seeds}", limit=6, base_url=[base_url], model="m", sets=sets)
    return config.model_dump(mode="json")


def finished(deployment: str, parameters: dict[str, Any], seconds: float = 120) -> Any:
    """Start a flow run of ``deployment`` and wait until it has ended."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        found = client.read_deployment_by_name(deployment)
        flow_run = client.create_flow_run_from_deployment(found.id, parameters=parameters)
        deadline = time.monotonic() + seconds
        while True:
            flow_run = client.read_flow_run(flow_run.id)
            if flow_run.state is not None and flow_run.state.is_final():
                return flow_run
            assert time.monotonic() < deadline, f"flow run {flow_run.name} did not end"
            time.sleep(0.5)


def deployments() -> dict[str, Any]:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return {f"{client.read_flow(d.flow_id).name}/{d.name}": d for d in client.read_deployments()}


STAGES = {"select", "instructions", "rewrite", "judge_relevance", "judge_specificity", "assemble"}


def assert_named_tagged_and_logged(flow_run_id: Any, warehouse: Path, seeds: Path) -> None:
    """The flow run is named ``<recipe>/<run name>``, tagged, and its stage lines are in Prefect's log; its
    stages' task runs are untagged, so that Prefect asks no tag concurrency limit for each of them."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, LogFilter, LogFilterFlowRunId

    with Warehouse(warehouse, read_only=True) as store:
        name = store.run().name
    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(flow_run_id)
        deadline = time.monotonic() + 30  # log lines are sent in batches, task runs as events, after its state
        while True:
            logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run.id])))
            lines = [log.message for log in logs]
            task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id])))
            stages = {t.name.rsplit("-", 1)[0] for t in task_runs}  # Prefect adds a suffix: `assemble-d3c`
            if any(line.startswith("assemble: done in") for line in lines) and stages >= STAGES:
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
    assert flow_run.name == f"instructir/{name}"
    assert stages >= STAGES  # those run together among them: their task runs are submitted from threads
    assert all(not t.tags for t in task_runs), [(t.name, t.tags) for t in task_runs]
    assert {"instructir", f"seeds:beir:{seeds}", "model:m"} <= set(flow_run.tags)
    for stage in STAGES:
        assert any(line.startswith(f"{stage}: done in") for line in lines), (stage, lines)


def completed_run(warehouse: Path) -> dict[str, Any]:
    with Warehouse(warehouse, read_only=True) as store:
        run = store.run()
        accepted = store.query("SELECT count(*) AS n FROM release_queries")[0]["n"]
    return {"status": run.status, "accepted": accepted, "seeds": run.config["seeds"]}


def test_prefect_yaml_deploys_every_recipe_to_a_pool_whose_worker_runs_a_config(seeds: Path, tmp_path: Path) -> None:
    prefect = str(Path(sys.executable).with_name("prefect"))
    with work_pool(tmp_path, "pool-yaml", workers=1), FakeOpenAI() as fake:
        deployed = subprocess.run(
            [prefect, "--no-prompt", "deploy", "--all", "--prefect-file", str(REPO / "prefect.yaml")],
            capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "IFSYNTH_WORK_POOL": "pool-yaml"},
        )  # fmt: skip
        assert deployed.returncode == 0, deployed.stdout[-2000:] + deployed.stderr[-2000:]
        found = deployments()
        for name in BUILTIN:
            assert found[f"{name}/ifsynth"].work_pool_name == "pool-yaml"
            assert found[f"{name}/ifsynth"].entrypoint == recipe(name).flow_entrypoint
        warehouse = tmp_path / "w.duckdb"
        flow_run = finished(
            "instructir/ifsynth", {"warehouse": str(warehouse), "config": run_config(seeds, fake.base_url)}
        )
        assert flow_run.state.is_completed(), flow_run.state.message
        assert fake.stats()["requests"] > 0
    assert_named_tagged_and_logged(flow_run.id, warehouse, seeds)
    got = completed_run(warehouse)
    assert got["status"] == "completed" and got["accepted"] > 0 and got["seeds"] == f"beir:{seeds}"


def test_ifsynth_serve_runs_a_config_in_its_process_until_ctrl_c(seeds: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    server = subprocess.Popen([sys.executable, "-m", "ifsynth.flows.cli", "serve", "instructir"], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=as_from_a_shell)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "instructir/served" not in deployments():
            assert server.poll() is None and time.monotonic() < deadline, "ifsynth serve did not serve"
            time.sleep(0.5)
        with FakeOpenAI() as fake:
            warehouse = tmp_path / "served.duckdb"
            flow_run = finished(
                "instructir/served", {"warehouse": str(warehouse), "config": run_config(seeds, fake.base_url)}
            )
            assert flow_run.state.is_completed(), flow_run.state.message
        assert_named_tagged_and_logged(flow_run.id, warehouse, seeds)
        got = completed_run(warehouse)
        assert got["status"] == "completed" and got["accepted"] > 0
        # a flow run given neither a run id nor a config fails with a clear reason, and serving goes on
        flow_run = finished("instructir/served", {"warehouse": str(tmp_path / "none.duckdb")})
        assert flow_run.state.is_failed() and server.poll() is None
    finally:
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=60)
    assert server.returncode == 0, stderr[-2000:]
    said = stderr.strip().splitlines()
    assert said[0].startswith("serving instructir/served") and said[-1] == "stopped serving"


def test_a_run_of_ifsynth_run_is_named_tagged_and_logged_in_prefect(seeds: Path, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    warehouse = tmp_path / "cli.duckdb"
    with FakeOpenAI() as fake:
        config = run_config(seeds, fake.base_url)
        sets = [a for s in ("instructions_per_query=2", "min_group_size=1", "q1_min_score=1") for a in ("--set", s)]
        done = subprocess.run(
            [sys.executable, "-m", "ifsynth.flows.cli", "--warehouse", str(warehouse), "run", "instructir",
             "--seeds", config["seeds"], "--limit", "6", "--base-url", fake.base_url, "--model", "m",
             "--name", "named-in-prefect", *sets],
            cwd=REPO, capture_output=True, text=True,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    with get_client(sync_client=True) as client:
        found = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=["instructir/named-in-prefect"]))
        )
    assert len(found) == 1
    assert_named_tagged_and_logged(found[0].id, warehouse, seeds)


def test_a_flow_runs_config_with_credentials_is_refused(seeds: Path, tmp_path: Path) -> None:
    """Prefect records a flow run's parameters: a config whose URL holds a password never starts a run."""
    config = run_config(seeds, "http://user:pa55w0rdXYZ@127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="no credentials in its URLs"):
        start(RunConfig.model_validate(config), tmp_path / "w.duckdb")
    assert not (tmp_path / "w.duckdb").exists()
