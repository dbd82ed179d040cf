"""The Prefect side of a run: what reaches Prefect before a flow run ends."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from ifsynth.flows.run.tasks import send_logs

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
