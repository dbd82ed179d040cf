"""The Prefect side of a run: what reaches Prefect before a flow run ends."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ifsynth.flows.run import tasks
from ifsynth.flows.run.tasks import send_logs
from ifsynth.schemas.errors import RunFailed
from tests.fake_openai import FakeOpenAI
from tests.helpers import sensible, small_instructir

pytestmark = pytest.mark.usefixtures("prefect")


def test_a_runs_log_lines_reach_prefect_before_its_flow_run_ends_and_its_events_worker_goes_on() -> None:
    """Log lines wait in Prefect's log worker for a batch (up to two seconds); a worker's process may not
    outlive its flow run, so they are sent as the flow ends. Only the log worker is drained: the events worker
    that reports the flow run's end is the one that ran all along, not a new one with a new API client."""
    from prefect import flow, get_run_logger
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.context import FlowRunContext
    from prefect.events.worker import EventsWorker

    marker = f"a stage line {uuid.uuid4()}"

    @flow
    def logs_a_line() -> tuple[Any, Any, list[str]]:
        get_run_logger().info(marker)
        events = EventsWorker.instance()
        send_logs()()
        running = FlowRunContext.get()
        assert running is not None and running.flow_run is not None
        with get_client(sync_client=True) as client:
            logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[running.flow_run.id])))
        return events, EventsWorker.instance(), [log.message for log in logs]

    before, after, lines = logs_a_line()
    assert marker in lines, "sent before the flow run ended"
    assert after is before, "the events worker went on"


@pytest.mark.parametrize("fails", ["", "a stage", "the check"], ids=["completed", "stage-fails", "check-fails"])
def test_a_run_waits_for_its_log_lines_after_publishing_and_when_it_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: str
) -> None:
    """The stages' log lines are sent once they end, while the run's funnel and card are published (both
    wait on Prefect's API), and waited for before the flow run ends, a failed run's too."""
    steps: list[str] = []

    def sending() -> Callable[[], None]:
        steps.append("sending")
        return lambda: steps.append("waited")

    def run_together(*args: Any) -> Any:
        steps.append("stages")
        if fails == "a stage":
            raise RunFailed("a stage failed")
        return together(*args)

    def publish(*args: Any) -> None:
        steps.append("published")
        published(*args)

    def check_failures(*_: Any) -> None:
        steps.append("checked")
        raise RunFailed("every ask failed")

    together, published = tasks._run_together, tasks._publish
    monkeypatch.setattr(tasks, "send_logs", sending)
    monkeypatch.setattr(tasks, "_run_together", run_together)
    monkeypatch.setattr(tasks, "_publish", publish)
    if fails == "the check":
        monkeypatch.setattr(tasks, "check_failures", check_failures)
    with FakeOpenAI(mode="responder", responder=sensible) as fake:
        if fails:
            with pytest.raises(RunFailed):
                small_instructir(tmp_path / "w.duckdb", fake.base_url, limit=2, min_group_size=1)
        else:
            small_instructir(tmp_path / "w.duckdb", fake.base_url, limit=2, min_group_size=1)
    ends = {"": ["published"], "a stage": [], "the check": ["checked"]}[fails]
    assert steps == ["stages", "sending", *ends, "waited"]
