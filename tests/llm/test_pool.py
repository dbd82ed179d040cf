"""Endpoint pools: requests spread by free capacity and weight, a member that fails rests and its requests go to
the others, and the cache does not care which member answered."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import duckdb
import httpx2
import openai
import pytest

from ifsynth.flows.llm.pool import GIVE_UP, MAX_REST, POOL_KEY, REST, STRIKES, Pool
from ifsynth.flows.llm.retry import ReplyRejected
from ifsynth.flows.llm.route import Route
from ifsynth.flows.run.config import resolve
from ifsynth.flows.run.exports import export
from ifsynth.flows.run.runner import execute
from ifsynth.schemas.config import Endpoint, Member, RunConfig
from ifsynth.schemas.errors import EndpointDown
from ifsynth.warehouse.export import release_for
from ifsynth.warehouse.store import Warehouse
from tests.fake_openai import FakeOpenAI
from tests.helpers import FakeClock, export_files, synthetic_beir


def pool(*weights: float, clock: FakeClock | None = None, concurrency: int = 4) -> Pool:
    members = tuple(Member(base_url=f"http://10.0.0.{i}:8000/v1", weight=w) for i, w in enumerate(weights, 1))
    return Pool(Endpoint.model_validate({"members": members, "concurrency": concurrency}), clock=clock or FakeClock())


def pick(members: Pool) -> Route:
    return asyncio.run(members.pick())


def refused(url: str) -> openai.APIConnectionError:
    return openai.APIConnectionError(message="Connection error: refused", request=httpx2.Request("POST", url))


def server_error(url: str) -> openai.APIStatusError:
    response = httpx2.Response(503, request=httpx2.Request("POST", url))
    return openai.InternalServerError("busy", response=response, body=None)


def test_attempts_go_where_there_is_most_room_for_the_weight() -> None:
    spread = pool(1, 3)
    assert [route.limit.maximum for route in spread.routes] == [4, 12]
    assert spread.capacity == 16 and spread.key_url == POOL_KEY
    taken = []
    for _ in range(16):  # fill both as a run would: each pick holds a slot
        route = pick(spread)
        route.limit.in_flight += 1
        taken.append(spread.routes.index(route))
    assert taken.count(0) == 4 and taken.count(1) == 12


def test_a_member_that_refuses_rests_and_comes_back() -> None:
    clock = FakeClock()
    notes: list[str] = []
    members = pool(1, 1, clock=clock)
    members.notify = notes.append
    a, b = members.routes
    members.failed(a, refused(a.base_url))
    assert notes == [f"{a.base_url} cannot be reached: out of rotation for {REST:.0f} s, its requests go to the other"]
    assert {id(pick(members)) for _ in range(5)} == {id(b)}  # b gets everything while a rests
    clock.now += REST
    b.limit.in_flight = 3
    assert pick(members) is a  # back in rotation, with the most room
    members.failed(a, refused(a.base_url))  # failing again doubles its rest
    assert notes[-1].endswith(f"out of rotation for {2 * REST:.0f} s, its requests go to the other")
    members.succeeded(a)
    clock.now += 2 * REST
    members.failed(a, refused(a.base_url))
    assert notes[-1].endswith(f"out of rotation for {REST:.0f} s, its requests go to the other")  # answered: reset


def test_a_pool_whose_every_member_keeps_failing_stops_the_run() -> None:
    clock = FakeClock()
    members = pool(1, 1, clock=clock)
    for round_ in range(1, GIVE_UP + 1):
        for route in members.routes:
            members.failed(route, refused(route.base_url))
        if round_ < GIVE_UP:
            clock.now += MAX_REST  # both back in rotation, and failing again
    with pytest.raises(EndpointDown, match="no member of the pool answers"):
        pick(members)
    members.succeeded(members.routes[0])  # an answer in between: the pool waits for it instead
    clock.now += MAX_REST
    assert pick(members) is members.routes[0]


def test_5xx_take_a_member_out_only_in_a_row_and_a_bad_key_still_stops_the_run() -> None:
    clock = FakeClock()
    members = pool(1, 1, clock=clock)
    a, b = members.routes
    for _ in range(STRIKES - 1):
        members.failed(a, server_error(a.base_url))
    members.succeeded(a)
    members.failed(a, server_error(a.base_url))
    b.limit.in_flight = 1
    assert pick(members) is a  # 2 + 1 with a success between: still in rotation
    for _ in range(STRIKES):
        members.failed(b, server_error(b.base_url))
    a.limit.in_flight = 3
    assert pick(members) is a  # b rests, though a is busier
    unauthorized = openai.AuthenticationError(
        "no", response=httpx2.Response(401, request=httpx2.Request("POST", a.base_url)), body=None
    )
    with pytest.raises(Exception, match="answered 401"):
        members.failed(a, unauthorized)


def test_a_pool_is_given_by_its_members_and_does_not_batch() -> None:
    endpoint = Endpoint.model_validate({"members": [{"base_url": "http://a/v1"}, {"base_url": "http://b/v1"}]})
    assert endpoint.base_url == "http://a/v1"
    with pytest.raises(ValueError, match="first member's"):
        Endpoint.model_validate({"base_url": "http://b/v1", "members": [{"base_url": "http://a/v1"}]})
    with pytest.raises(ValueError, match="does not go with a pool"):
        RunConfig(recipe="instructir", seeds="demo", model="m", endpoint=endpoint, batch=True)


def base_urls(warehouse: Path) -> dict[str, int]:
    with duckdb.connect(str(warehouse), read_only=True) as db:
        rows = db.execute("SELECT base_url, count(*) FROM llm_calls WHERE error IS NULL GROUP BY 1").fetchall()
    return dict(rows)


@pytest.mark.usefixtures("prefect")  # runs a flow: on the session's Prefect server
def test_a_member_stopped_mid_run_hands_its_share_to_the_other(tmp_path: Path) -> None:
    seeds = synthetic_beir(tmp_path / "seeds", 24)
    settings = ["query_length_percentiles=[0,100]", "passage_length_percentiles=[0,100]", "passage_band=inside",
                "instructions_per_query=3", "min_group_size=1", "max_attempts=4"]  # fmt: skip

    def run(warehouse: Path, *urls: str) -> dict[str, bytes]:
        """The run in this process (as `ifsynth run` with a --base-url per member), and its BEIR export."""
        config = resolve("instructir", seeds=f"beir:{seeds}", model="m", concurrency=4, base_url=list(urls),
                         sets=settings)  # fmt: skip
        run_id = execute(config, warehouse).run_id
        folder = warehouse.with_suffix(".export")
        with Warehouse(warehouse, read_only=True) as opened:
            assert opened.run(run_id).status == "completed"
            export(opened, release_for(opened, run_id), "beir", folder)
        return {k: v for k, v in export_files(folder).items() if not k.endswith("README.md")}

    with FakeOpenAI(latency=0.01) as alone:
        expected = run(tmp_path / "one" / "w.duckdb", alone.base_url)
        total = alone.stats()["requests"]

    stopped_at: list[int] = []
    with FakeOpenAI(latency=0.02) as a, FakeOpenAI(latency=0.02) as b:

        def stop_a() -> None:
            while a.stats()["requests"] < total // 4:
                time.sleep(0.01)
            a.stop()
            stopped_at.append(a.stats()["requests"])

        stopper = threading.Thread(target=stop_a, daemon=True)
        stopper.start()
        pooled = tmp_path / "pool" / "w.duckdb"
        assert run(pooled, a.base_url, b.base_url) == expected
        stopper.join(timeout=5)
        served = base_urls(pooled)
        # a answered until it stopped, b everything after: far more than its half
        assert stopped_at and served.get(a.base_url, 0) <= stopped_at[0]
        assert served[b.base_url] > total * 0.6
        assert served.get(a.base_url, 0) + served[b.base_url] == total

        # the cache is the pool's, not a member's: the same run against another pool sends nothing
        with FakeOpenAI() as c:
            again = pooled.with_name("again.duckdb")
            again.write_bytes(pooled.read_bytes())
            assert run(again, c.base_url, b.base_url) == expected
            assert c.stats()["requests"] == 0


def test_a_reply_refused_here_is_the_breakers_not_a_rest() -> None:
    members = pool(1, 1)
    a, _ = members.routes
    refusal = openai.APIConnectionError(message="Reply refused: too large", request=httpx2.Request("POST", a.base_url))
    refusal.__cause__ = ReplyRejected("a reply of 20 MB")
    for _ in range(9):
        members.failed(a, refusal)
    members.routes[1].limit.in_flight = 3
    assert pick(members) is a  # still in rotation: it answers, only not with completions
    with pytest.raises(EndpointDown, match="sent replies ifsynth refuses"):
        members.failed(a, refusal)  # the tenth in a row trips its breaker, as for a single endpoint


def test_a_member_that_is_not_a_mapping_is_a_settings_error() -> None:
    with pytest.raises(ValueError, match="members"):
        Endpoint.model_validate({"members": ["http://a/v1", "http://b/v1"]})
