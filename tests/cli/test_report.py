"""`ifsynth report`: one self-contained HTML file, opened in headless Chromium with every chart drawn."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import DATA, invoke
from tests.fake_openai import FakeOpenAI
from tests.helpers import sensible, small_instructir

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server

# what would make the browser fetch something: a script, a style sheet or an image from a URL
EXTERNAL = re.compile(r"<script[^>]+src=|<link[^>]+href=|<img[^>]+src=[\"']?https?:|url\(\s*[\"']?https?:", re.I)


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("report")
    warehouse = str(root / "w.duckdb")
    with FakeOpenAI(mode="responder", responder=sensible) as fake:
        small_instructir(warehouse, fake.base_url, name="mine")
    done = invoke("--warehouse", warehouse, "import", "instructir", str(DATA / "instructir"), "--name", "orig")
    assert done.returncode == 0, done.stderr
    out = root / "r.html"
    done = invoke("--warehouse", warehouse, "report", "mine", "--out", str(out), "--compare", "orig")
    assert done.returncode == 0, done.stderr
    yield {"root": root, "out": out}


def test_the_report_is_one_file_that_fetches_nothing(reported: dict[str, Any]) -> None:
    document = reported["out"].read_text()
    assert not EXTERNAL.search(document), EXTERNAL.search(document)
    for section in (
        "Funnel",
        "Judges' scores",
        "Rejection reasons",
        "Samples per stage",
        "Tokens and cost",
        "Card",
    ):
        assert f"<h2>{section}" in document, section
    assert [p.name for p in reported["root"].iterdir() if p.suffix == ".html"] == ["r.html"]


def test_chromium_draws_every_chart_and_the_lengths_against_the_original(
    reported: dict[str, Any], browser_page: Any
) -> None:
    page = browser_page
    page.goto("about:blank")
    blank = len(page.screenshot(full_page=True))
    page.goto(reported["out"].as_uri())
    page.wait_for_function(
        "document.querySelectorAll('.chart .main-svg').length >= document.querySelectorAll('.chart').length"
    )
    traces = page.evaluate(
        "Array.from(document.querySelectorAll('.chart .js-plotly-plot')).map(g => [g.layout.title.text, g.data.length,"
        " g.querySelectorAll('.point, .bars path, path.point').length])"
    )
    charts = page.evaluate("document.querySelectorAll('.chart').length")
    assert len(traces) == charts >= 6, traces
    lengths = {title: n for title, n, _ in traces if title.startswith("Words per")}
    assert lengths == {"Words per instruction": 2, "Words per query": 2, "Words per passage": 2}, traces
    assert all(drawn > 0 for _, _, drawn in traces), "every chart has drawn marks"
    shot = page.screenshot(full_page=True)
    assert len(shot) > 20 * blank, "the page is not blank"
