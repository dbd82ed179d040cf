"""Prefect's API for a run (a configured server, or the local one ifsynth's commands share), and the
deployments through which a work pool's workers run a sharded run's shards.

Prefect would start a temporary server itself, in ifsynth's process group and for one process only: a
terminal's Ctrl-C then reaches the server first, and every command pays its start. ifsynth's commands share a
local server instead, in a session of its own (flows/run/local_prefect.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ifsynth.flows.run.local_prefect import answers, local_prefect, plain_http_bundle, recorded_server
from ifsynth.schemas.errors import ConfigError


@contextmanager
def prefect_api(notify: Callable[[str], None] = lambda _: None) -> Iterator[None]:
    """Within the block Prefect talks to a configured server (``PREFECT_API_URL``), checked once to answer, or
    to the local one that ifsynth's commands share (flows/run/local_prefect.py).

    The flow runs of this process send no heartbeats unless ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` asks for
    them: only an automation a user sets up reads them (Prefect's zombie-flow detection), and the flow run's
    end waits for the heartbeat thread's next second-long sleep to pass, up to a second of every command."""
    configured = os.environ.get("PREFECT_API_URL")
    if configured:
        _check_configured(configured)
    from prefect.context import SettingsContext, get_settings_context

    with contextlib.ExitStack() as stack:
        local = None if configured else stack.enter_context(local_prefect(notify))
        current = get_settings_context()
        stack.enter_context(SettingsContext(profile=current.profile, settings=_settings(current.settings, local)))
        yield


def prepare() -> bool:
    """The settings a run takes, made ahead for the local server recorded now: the warm process calls this
    between commands, so that the runs it forks find them made. Whether they are (False: no local server is
    recorded yet)."""
    from prefect.context import get_settings_context

    configured = bool(os.environ.get("PREFECT_API_URL"))
    server = None if configured else recorded_server()
    if server is None and not configured:
        return False
    _settings(get_settings_context().settings, None if server is None else server.url)
    return True


_MADE: dict[tuple[Any, ...], tuple[Any, Any]] = {}


def _settings(base: Any, local: str | None) -> Any:
    """``base`` (Prefect's settings) with no heartbeats unless asked for and, when the local server is used,
    its API URL and its clients' one-certificate bundle (``plain_http_bundle``, whatever bundle the environment
    names: no certificate of that server is ever checked), as Prefect's ``temporary_settings`` makes them. Made
    once for each base, URL, bundle and set of ``PREFECT_*`` variables (Prefect reads them again as it makes
    them): making them costs a fifth of a second of every command (bench/README.md, fourteenth round)."""
    from prefect.settings import PREFECT_API_SSL_CERT_FILE, PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY

    bundle = plain_http_bundle() if local is not None else None  # made again if it went missing
    read = tuple(sorted((name, value) for name, value in os.environ.items() if name.startswith("PREFECT_")))
    key = (id(base), local, bundle, read)
    made = _MADE.get(key)
    if made is None or made[0] is not base:  # the base kept with its settings: its id is never another's
        updates: dict[Any, Any] = {}
        if not os.environ.get("PREFECT_FLOWS_HEARTBEAT_FREQUENCY"):
            updates[PREFECT_FLOWS_HEARTBEAT_FREQUENCY] = None
        if local is not None:
            updates[PREFECT_API_URL] = local
        if bundle is not None:
            updates[PREFECT_API_SSL_CERT_FILE] = str(bundle)
        if len(_MADE) >= 8:  # the local server's port changes only as it is started again
            _MADE.clear()
        made = _MADE[key] = (base, base.copy_with_update(updates=updates))
    return made[1]


def start_reporting() -> None:
    """Prefect's event and log workers started now, from a thread of their own, once the run is open. Each
    starts on Prefect's loop thread, and its first step there makes an API client (reading a certificate
    bundle, 0.03-0.14 s for a whole one, even for a plain-HTTP server); started by the run's first task instead,
    the task waited for that loop (0.085 s of every command, bench/README.md, fourteenth round). Whatever fails
    here, the first task that reports starts them again and says why."""
    from prefect.events.worker import EventsWorker, should_emit_events
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_LOGGING_TO_API_ENABLED

    starts: list[Callable[[], object]] = []
    if should_emit_events():
        starts.append(EventsWorker.instance)
    if PREFECT_LOGGING_TO_API_ENABLED.value():
        starts.append(APILogWorker.instance)
    run = contextvars.copy_context()  # the run's settings: the workers' clients take the API's URL from them

    def start() -> None:
        for instance in starts:
            with contextlib.suppress(BaseException):  # Prefect's cancellation too: no traceback from this thread
                run.run(instance)

    threading.Thread(target=start, name="prefect-reporting", daemon=True).start()


def _check_configured(url: str) -> None:
    """A configured server that does not answer is one line that says what to do, before anything is run
    (Prefect's own client would retry, then fail with a RuntimeError)."""
    if not answers(url.rstrip("/") + "/health", any_status=True):
        raise ConfigError(
            f"no Prefect server answers at PREFECT_API_URL={url}: start it, or unset PREFECT_API_URL to use "
            "the local server ifsynth starts"
        )


def api_url() -> str:
    """The API that flow runs of this process report to (inside ``prefect_api``)."""
    from prefect.settings import PREFECT_API_URL

    return str(PREFECT_API_URL.value())


DEPLOYMENT = "ifsynth"  # each recipe flow's deployment on a work pool, as prefect.yaml names it too
SERVED = "served"  # each recipe flow's deployment while `ifsynth serve` runs
POLL_SECONDS = 1.0
GONE_AFTER = 15.0  # seconds a flow run must have been running before its process may be judged gone
FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
UNFINISHED = ("SCHEDULED", "PENDING", "RUNNING", "CANCELLING")


def serve(flows: list[Any], limit: int | None, ready: Callable[[], None] = lambda: None) -> None:
    """Serve the flows from this process until Ctrl-C: each is a deployment ``<recipe>/served`` whose flow runs
    (from Prefect's UI, ``prefect deployment run``, an automation) run here, ``limit`` at a time. Serving needs
    a Prefect server of the user's, which outlives this process, and that answers; ``ready`` is called once it
    does, before serving."""
    if not os.environ.get("PREFECT_API_URL"):
        raise ConfigError("serving needs a Prefect server that outlives this process: set PREFECT_API_URL")
    _check_configured(os.environ["PREFECT_API_URL"])
    ready()
    from prefect import serve as serve_deployments

    serve_deployments(*(flow.to_deployment(SERVED) for flow in flows), limit=limit, print_starting_message=False)


def run_on_pool(
    flow: Any,
    pool: str,
    runs: list[dict[str, Any]],
    notify: Callable[[str], None],
    abandoned: Callable[[dict[str, Any]], bool],
) -> None:
    """One flow run of ``flow``'s deployment on ``pool`` per entry of ``runs`` (its name, run id and warehouse),
    then wait until each has ended; Ctrl-C cancels those still going.

    A worker that dies takes its flow run's process with it, and Prefect goes on showing the flow run as
    running: ``abandoned(run)`` tells when no process holds the run any more, and the flow run is then marked
    crashed, here or, when the coordinator was gone too, as the run's shard is sent again."""
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelled, Cancelling

    with get_client(sync_client=True) as client:
        deployment_id = _deploy(flow, pool)
        started = {_submit(client, deployment_id, flow.name, run): run for run in runs}
        notify(f"{len(started)} flow runs sent to work pool {pool}; waiting for its workers")
        states: dict[str, str] = {}
        try:
            _wait(client, started, states, notify, abandoned)
        except KeyboardInterrupt:
            for flow_run_id, kind in states.items():
                if kind in ("SCHEDULED", "PENDING"):  # no process to finish a cancel: it is cancelled now
                    client.set_flow_run_state(flow_run_id, Cancelled(message="ifsynth was interrupted"), force=True)
                elif kind not in FINAL:  # its worker stops its process
                    client.set_flow_run_state(flow_run_id, Cancelling(message="ifsynth was interrupted"), force=True)
            raise


def check_work_pool(pool: str) -> None:
    """The pool exists on the configured server (before any shard is prepared for it)."""
    _check_configured(os.environ["PREFECT_API_URL"])
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(pool)
        except ObjectNotFound:
            raise ConfigError(
                f"work pool `{pool}` does not exist: `prefect work-pool create {pool} --type process`, then start "
                f"workers with `prefect worker start --pool {pool}`"
            ) from None


def _deploy(flow: Any, pool: str) -> Any:
    """The flow's deployment on ``pool``, created or updated to run the installed package's flow (a module
    entry point: a worker needs ifsynth installed, not a copy of the code)."""
    from prefect.deployments.runner import EntrypointType

    deployment = flow.to_deployment(DEPLOYMENT, work_pool_name=pool, entrypoint_type=EntrypointType.MODULE_PATH)
    return deployment.apply(work_pool_name=pool)


def _submit(client: Any, deployment_id: Any, flow_name: str, run: dict[str, Any]) -> str:
    """A flow run for ``run``, once any earlier one left unfinished is marked crashed: the caller found the
    run's warehouse free, so no process runs that one any more."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.filters import FlowRunFilterTags as Tags
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    tag = f"ifsynth-run:{run['run_id']}"
    unfinished = FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType[name] for name in UNFINISHED]))
    for old in client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=Tags(all_=[tag]), state=unfinished)):
        client.set_flow_run_state(old.id, Crashed(message="no process runs it; its shard was sent again"), force=True)
    flow_run = client.create_flow_run_from_deployment(
        deployment_id,
        parameters={"warehouse": run["warehouse"], "run_id": run["run_id"]},
        name=f"{flow_name}/{run['name']}",
        tags=["ifsynth", tag, *run.get("tags", ())],
    )
    return str(flow_run.id)


def _wait(
    client: Any,
    started: dict[str, dict[str, Any]],
    states: dict[str, str],
    notify: Callable[[str], None],
    abandoned: Callable[[dict[str, Any]], bool],
) -> None:
    """Poll the flow runs until each has ended, saying every change of state; ``states`` holds the latest."""
    from prefect.states import Crashed

    suspect: dict[str, float] = {}  # flow run -> when it was first found abandoned
    while len(states) < len(started) or not set(states.values()) <= FINAL:
        for flow_run_id, run in started.items():
            state = client.read_flow_run(flow_run_id).state
            kind = state.type.value if state is not None else "SCHEDULED"
            now = time.time()
            if kind == "RUNNING" and now - state.timestamp.timestamp() > GONE_AFTER:
                if not abandoned(run):
                    suspect.pop(flow_run_id, None)
                elif now - suspect.setdefault(flow_run_id, now) > 5 * POLL_SECONDS:  # twice, seconds apart
                    client.set_flow_run_state(flow_run_id, Crashed(message="its process is gone"), force=True)
                    kind = "CRASHED"
            if states.get(flow_run_id) != kind:
                states[flow_run_id] = kind
                notify(f"{run['name']}: {kind.lower()}")
        time.sleep(POLL_SECONDS)


def free_port() -> int:
    """A loopback port free now, for a server that cannot be told to pick its own."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
