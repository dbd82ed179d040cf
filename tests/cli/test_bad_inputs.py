"""Bad inputs a user can give are refused in one line before any request reaches the endpoint, and before
the warehouse is touched: faulty seed folders, prompt overlays and config values."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from ifsynth.warehouse.store import Warehouse
from tests.conftest import REPO, cli, invoke
from tests.fake_openai import FakeOpenAI

DEMO = REPO / "flows" / "demo_seeds"
Run = subprocess.CompletedProcess[str]


def seeds(tmp_path: Path, change: Callable[[Path], object]) -> list[str]:
    root = tmp_path / "seeds"
    shutil.copytree(DEMO, root, ignore=shutil.ignore_patterns("infosearch"))
    change(root)
    return ["--seeds", f"beir:{root}"]


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_rows(path: Path, data: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in data))


def edit_first(name: str, **fields: object) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        data = rows(root / name)
        data[0].update(fields)
        write_rows(root / name, data)

    return change


def duplicate_passage(root: Path) -> None:
    data = rows(root / "corpus.jsonl")
    write_rows(root / "corpus.jsonl", [*data, data[3]])


def overlay(tmp_path: Path, files: dict[str, str | Path], encoding: str = "utf-8") -> list[str]:
    root = tmp_path / "prompts"
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            os.symlink(content, path)
        else:
            path.write_text(content, encoding=encoding)
    return ["--prompts-dir", str(root)]


REWRITE = (REPO / "prompts" / "instructir" / "rewrite.j2").read_text()
SYSTEM = "{% block system %}x{% endblock %}"
TARGET = "instructir/rewrite.j2"


def user(block: str) -> str:
    """A template whose user block is ``block``."""
    return SYSTEM + "{% block user %}" + block + "{% endblock %}"


QRELS = Path("qrels") / "test.tsv"
CASES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "duplicate passage id": (lambda t: seeds(t, duplicate_passage), "_id `dp004` appears twice"),
    "null passage text": (
        lambda t: seeds(t, edit_first("corpus.jsonl", text=None)),
        "corpus.jsonl line 1: the passage `dp001` has no text",
    ),
    "null query id": (
        lambda t: seeds(t, edit_first("queries.jsonl", _id=None)),
        "queries.jsonl line 1: the query has no _id",
    ),
    "id with a tab": (lambda t: seeds(t, edit_first("queries.jsonl", _id="dq\t01")), "holds whitespace"),
    "empty corpus": (
        lambda t: seeds(t, lambda r: (r / "corpus.jsonl").write_text("")),
        "corpus.jsonl holds no passage",
    ),
    "qrels to an unknown passage": (
        lambda t: seeds(t, lambda r: (r / QRELS).open("a").write("dq01\tnope\t1\n")),
        "line 50 names passage `nope`, which the corpus does not hold",
    ),
    "qrels without header": (
        lambda t: seeds(t, lambda r: (r / QRELS).write_text("dq01\tdp001\t1\n")),
        "line 1 is not the header",
    ),
    "no queries": (
        lambda t: seeds(t, lambda r: (r / "queries.jsonl").write_text("")),
        "queries.jsonl holds no query",
    ),
    "qrels with only the header": (
        lambda t: seeds(t, lambda r: (r / QRELS).write_text("query-id\tcorpus-id\tscore\n")),
        "qrels/test.tsv holds no judgement",
    ),
    "every score 0": (
        lambda t: seeds(t, lambda r: (r / QRELS).write_text((r / QRELS).read_text().replace("\t1\n", "\t0\n"))),
        "judges no passage relevant",
    ),
    "every query text empty": (
        lambda t: seeds(
            t, lambda r: write_rows(r / "queries.jsonl", [{**q, "text": " "} for q in rows(r / "queries.jsonl")])
        ),
        "every query in queries.jsonl has an empty text",
    ),
    "qrels scored nan": (
        lambda t: seeds(t, lambda r: (r / QRELS).open("a").write("dq01\tdp002\tnan\n")),
        "line 50 has the score `nan`",
    ),
    "qrels scored inf": (
        lambda t: seeds(t, lambda r: (r / QRELS).open("a").write("dq01\tdp002\tinf\n")),
        "line 50 has the score `inf`",
    ),
    "seeds not UTF-8": (
        lambda t: seeds(t, lambda r: (r / "queries.jsonl").open("ab").write(b'{"_id": "x", "text": "\xff"}\n')),
        "queries.jsonl line 49 is not UTF-8 text",
    ),
    "misspelt overlay": (
        lambda t: overlay(t, {"instructir/rewrte.j2": REWRITE}),
        "`instructir/rewrte.j2` replaces no built-in",
    ),
    "empty user block": (
        lambda t: overlay(t, {TARGET: SYSTEM + "{% block user %} {% endblock %}"}),
        "its `user` block renders to nothing",
    ),
    "missing block": (
        lambda t: overlay(t, {TARGET: "{% block user %}{{ query }}{% endblock %}"}),
        "has no `{% block system %}`",
    ),
    "syntax error": (lambda t: overlay(t, {TARGET: SYSTEM + "{% block user %}{{ query {% endblock %}"}), TARGET),
    "undefined name": (lambda t: overlay(t, {TARGET: user("{{ nosuch }}")}), "UndefinedError: 'nosuch' is undefined"),
    "division by zero": (lambda t: overlay(t, {TARGET: user("{{ 1/0 }}")}), "ZeroDivisionError"),
    "self-include": (lambda t: overlay(t, {TARGET: user(f'{{% include "{TARGET}" %}}')}), "includes itself"),
    "range too big": (
        lambda t: overlay(t, {TARGET: user("{% for i in range(10**9) %}.{% endfor %}")}),
        "Range too big",
    ),
    "template not UTF-8": (lambda t: overlay(t, {TARGET: user("caf\xe9")}, encoding="latin-1"), "is not UTF-8 text"),
    "symlink out of the overlay": (lambda t: overlay(t, {TARGET: Path("/etc/hostname")}), "points outside the folder"),
    "endpoint not a section": (lambda t: ["--set", "endpoint=3"], "setting `endpoint` must be a section"),
    "config that never ends": (lambda t: ["--config", "/dev/zero"], "is not a regular file"),
    "name that is a path": (lambda t: ["--name", "../../x"], "setting `name`"),
    "shards with a call budget": (lambda t: ["--shards", "2", "--max-calls", "5"], "--max-calls bounds one process"),
    "a work pool that does not exist": (
        lambda t: ["--shards", "2", "--work-pool", "nowhere"],
        "`nowhere` does not exist",
    ),
    "credentials in a sharded run's URL": (
        lambda t: ["--shards", "2", "--base-url", "http://u:pa55w0rd@127.0.0.1:9/v1"],
        "never reach a shard's",
    ),
    "a pool in batch mode": (lambda t: ["--base-url", "http://127.0.0.1:9/v1", "--batch"], "does not go with a pool"),
}


def refuse(case: str, tmp_path: Path, request: pytest.FixtureRequest, command: Callable[..., Run]) -> str:
    """Run ``case`` with ``command`` (in this process or a child); its one line, once checked that nothing was
    sent and no warehouse was made."""
    build, said = CASES[case]
    extra = build(tmp_path)
    if "--work-pool" in extra:
        request.getfixturevalue("prefect")  # a work pool is looked up on the Prefect server its workers poll
    if "--seeds" not in extra:
        extra = ["--seeds", "demo", *extra]
    warehouse = tmp_path / "w.duckdb"
    with FakeOpenAI() as fake:
        proc = command("--warehouse", str(warehouse), "run", "instructir", "--base-url", fake.base_url, "--model",
                       "m", *extra)  # fmt: skip
        sent = fake.stats()["requests"]
    lines = [line for line in proc.stderr.strip().splitlines() if not line.endswith("checking inputs")]
    assert proc.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-1500:]
    assert said in lines[0]
    assert sent == 0 and not warehouse.exists() and not warehouse.with_name("w.duckdb.shards").exists()
    return lines[0]


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_before_any_request(case: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    refuse(case, tmp_path, request, invoke)


@pytest.mark.parametrize("case", ["duplicate passage id", "misspelt overlay"])
def test_a_refusal_is_the_same_line_from_the_command_in_its_own_process(
    case: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The cases above run the command in the test's process; the real process says the same, nothing more."""
    assert refuse(case, tmp_path / "child", request, cli) == refuse(case, tmp_path / "here", request, invoke).replace(
        str(tmp_path / "here"), str(tmp_path / "child")
    )


@pytest.mark.parametrize(("args", "message"), [
    (["export", "--bogus"], "No such option: --bogus"),
    (["export", "--format", "nope"], "--format must be one of beir"),
    (["review", "export", "--status", "nope"], "--status must be one of rejected, ok, all"),
    (["run"], "Missing argument"),
    (["audit", "--limit", "-1"], "Invalid value for '--limit'"),
])  # fmt: skip
def test_a_wrong_flag_or_value_is_one_line_with_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    done = invoke("--warehouse", str(tmp_path / "w.duckdb"), *args)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "unexpected" not in done.stderr


@pytest.mark.parametrize("args", [[], ["review"]])
def test_no_subcommand_prints_the_help_and_no_error_line(args: list[str]) -> None:
    done = invoke(*args)
    assert done.returncode == 2 and "Usage:" in done.stdout and "error" not in done.stderr, done.stderr


@pytest.mark.parametrize("args", [["review", "import", "{file}"], ["review", "serve"]])
def test_a_mistyped_warehouse_is_said_and_not_created(tmp_path: Path, args: list[str]) -> None:
    review = tmp_path / "review.csv"
    review.write_text("item_id,stage,decision\n")
    missing = tmp_path / "nope.duckdb"
    done = invoke("--warehouse", str(missing), *(arg.format(file=review) for arg in args))
    assert (
        done.returncode == 1 and done.stderr.strip() == f"error: no warehouse at `{missing}`; `ifsynth run` creates one"
    )
    assert not list(tmp_path.glob("nope*"))


def test_an_output_path_the_system_refuses_is_one_line_naming_it(tmp_path: Path) -> None:
    wh = tmp_path / "w.duckdb"
    Warehouse(wh).close()
    folder = tmp_path / "a-folder"
    folder.mkdir()
    done = invoke("--warehouse", str(wh), "review", "import", str(folder))
    assert done.returncode == 1 and done.stderr.strip() == f"error: `{folder}`: Is a directory", done.stderr


@pytest.mark.parametrize("url", ["not-a-url", "ftp://host/v1", "http:///v1", "localhost:8000/v1"])
def test_a_base_url_that_is_no_http_url_is_one_line_that_does_not_echo_it(tmp_path: Path, url: str) -> None:
    warehouse = tmp_path / "w.duckdb"
    done = invoke(
        "--warehouse", str(warehouse), "run", "instructir", "--seeds", "demo", "--base-url", url, "--model", "m"
    )
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: setting `endpoint.base_url`: must start with http:// or https:// and name a host, such as "
        "http://localhost:8000/v1"
    ], done.stderr
    assert not warehouse.exists()


def test_a_memory_limit_too_small_to_open_the_warehouse_is_one_line(tmp_path: Path) -> None:
    wh = tmp_path / "w.duckdb"
    Warehouse(wh).close()
    done = invoke("--warehouse", str(wh), "--memory-limit", "1KB", "runs")
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert (
        done.stderr.startswith("error: the warehouse ran out of memory")
        and "give --memory-limit a larger" in done.stderr
    )


def test_a_review_page_port_out_of_range_is_one_line(tmp_path: Path) -> None:
    done = invoke("--warehouse", str(tmp_path / "w.duckdb"), "review", "serve", "--port", "99999")
    assert done.returncode == 2 and "Invalid value for '--port'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_serving_without_a_prefect_server_says_so_before_it_says_it_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    done = invoke("serve", "instructir")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: serving needs a Prefect server that outlives this process: set PREFECT_API_URL"
    ], done.stderr
