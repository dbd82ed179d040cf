"""The house's rules, checked on the source: imports run one way, Prefect stays in the recipe flows and the
task that runs a stage, SQL stays in warehouse/ (run by its Warehouse alone), and every package is installed;
and, checked in a process of its own, the openai SDK loads only when a request is sent, and pandas never."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.fake_openai import FakeOpenAI
from tests.servers import free_port

TOP = ("flows", "prompts", "schemas", "warehouse")
# package -> what it must never import (prefixes of ``ifsynth.`` module names)
FORBIDDEN = {
    "schemas": ("flows", "prompts", "warehouse"),
    "prompts": ("flows", "warehouse"),
    "warehouse": ("flows", "prompts"),
    "flows.llm": ("flows.run", "flows.stages", "flows.recipes", "flows.cli", "flows.evaluation"),
    "flows.evaluation": ("flows.run", "flows.stages", "flows.recipes", "flows.cli"),
    "flows.stages": ("flows.recipes", "flows.cli"),
    "flows.recipes": ("flows.cli",),
    "flows.run": ("flows.cli", "flows.recipes", "flows.stages"),
}
# the stage task, the server a run without PREFECT_API_URL talks to, and each recipe's flow
PREFECT_ALLOWED = {"flows/run/tasks.py", "flows/run/prefect_api.py", "flows/run/flows.py", "flows/run/local_prefect.py"}
SQL = re.compile(r"\b(SELECT|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+TABLE)\b")


def modules() -> list[tuple[str, Path, ast.Module]]:
    """(dotted name below ``ifsynth``, path, tree) of every module of the package."""
    found = []
    for top in TOP:
        for path in sorted((REPO / top).rglob("*.py")):
            dotted = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            found.append((dotted, path, ast.parse(path.read_text(), str(path))))
    return found


def imported(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


@pytest.mark.parametrize(("package", "forbidden"), FORBIDDEN.items())
def test_imports_run_one_way(package: str, forbidden: tuple[str, ...]) -> None:
    wrong = [
        f"{name} imports ifsynth.{target}"
        for name, _, tree in modules()
        if name == package or name.startswith(f"{package}.")
        for target in forbidden
        for module in imported(tree)
        if module == f"ifsynth.{target}" or module.startswith(f"ifsynth.{target}.")
    ]
    assert wrong == []


def test_nothing_imports_the_cli() -> None:
    wrong = [name for name, _, tree in modules() if not name.startswith("flows.cli") and
             any(m.startswith("ifsynth.flows.cli") for m in imported(tree))]  # fmt: skip
    assert wrong == []


def at_run_time(tree: ast.Module) -> ast.Module:
    """The module without its ``if TYPE_CHECKING:`` blocks: what importing it loads."""
    body = [node for node in tree.body if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")]
    return ast.Module(body=body, type_ignores=[])


def test_prefect_is_imported_only_by_the_recipe_flows_the_stage_task_and_its_server() -> None:
    """Loaded, that is: a type-only import (a signature naming Prefect's Flow) costs a reading command nothing."""
    users = {str(path.relative_to(REPO)) for _, path, tree in modules()
             if any(m == "prefect" or m.startswith("prefect.") for m in imported(at_run_time(tree)))}  # fmt: skip
    assert users == PREFECT_ALLOWED


def test_a_run_loads_the_openai_sdk_only_to_send_a_request(fake: FakeOpenAI) -> None:
    """A run whose every answer is cached sends nothing: its command imports every module a run uses and looks
    at the endpoint (``GET /models``), and the SDK and aiohttp, half a second of imports, stay unloaded."""
    script = f"""
import sys
import ifsynth.flows.cli.app, ifsynth.flows.run.runner, ifsynth.flows.run.flows
from ifsynth.flows.llm.route import preflight
from ifsynth.flows.run.registry import recipes
from ifsynth.schemas.config import Endpoint
from ifsynth.schemas.errors import EndpointDown
for declared in recipes().values():
    declared.stage_list(declared.settings())  # every stage module, and through them the gateway
preflight(Endpoint(base_url="{fake.base_url}"))
try:
    preflight(Endpoint(base_url="http://127.0.0.1:{free_port()}/v1"))  # the look is real: nothing listens
except EndpointDown as down:
    print(down)
print(sorted(name for name in sys.modules if name.split(".")[0] in ("openai", "aiohttp")
             and type(sys.modules[name]).__name__ != "_LazyModule"))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    refused, loaded = done.stdout.strip().splitlines()
    assert "cannot be reached" in refused and loaded == "[]"


def test_a_run_never_loads_pandas_and_pyarrow_still_converts_it(fake: FakeOpenAI, tmp_path: Path) -> None:
    """pyarrow would import pandas (a quarter of a second) at the warehouse's first write, to ask whether its
    rows are pandas objects: a run's process writes without it, and asked for pandas later, pyarrow serves."""
    script = f"""
import sys
from ifsynth.flows.cli.app import main
sys.argv = ["ifsynth", "--warehouse", {str(tmp_path / "w.duckdb")!r}, "run", "instructir", "--seeds", "demo",
            "--limit", "3", "--base-url", "{fake.base_url}", "--model", "m", "--json"]
try:
    main()
except SystemExit as stop:
    print(stop.code, "pandas" in sys.modules, file=sys.stderr)
import pandas as pd, pyarrow as pa
print(pa.Table.from_pylist([{{"x": 1.5}}]).to_pandas().shape, pa.array(pd.Series([1, None], dtype="Int64")).null_count,
      file=sys.stderr)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.stderr.strip().splitlines()[-2:] == ["0 False", "(1, 1) 1"], done.stderr[-2000:]
    assert json.loads(done.stdout)["status"] == "completed"


def test_sql_lives_only_in_the_warehouse() -> None:
    """And inside it, only the Warehouse runs a query: the other modules ask its named methods."""
    wrong = []
    for name, path, tree in modules():
        if name.startswith("warehouse"):
            wrong += [
                f"{path.relative_to(REPO)}:{node.lineno} calls Warehouse.{node.attr}"
                for node in ast.walk(tree)
                if name != "warehouse.store" and isinstance(node, ast.Attribute) and node.attr in ("_sql", "_execute")
            ]
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value):
                wrong.append(f"{path.relative_to(REPO)}:{node.lineno} holds SQL")
            if isinstance(node, ast.Attribute) and node.attr in ("sql", "execute", "_sql", "_execute"):
                wrong.append(f"{path.relative_to(REPO)}:{node.lineno} calls .{node.attr}")
    assert wrong == []


def test_flows_top_level_stays_small_and_every_package_is_installed() -> None:
    assert len(list((REPO / "flows").glob("*.py"))) <= 12
    packages = [f"ifsynth.{name}" for name, path, _ in modules() if path.name == "__init__.py"]
    found = {package: importlib.util.find_spec(package) for package in packages}  # setup.py derives the list
    assert [package for package, spec in found.items() if spec is None or not spec.origin] == []


def test_every_module_says_what_it_is_for() -> None:
    assert [str(path.relative_to(REPO)) for _, path, tree in modules() if not ast.get_docstring(tree)] == []
