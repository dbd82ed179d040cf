"""`ifsynth report`: one self-contained HTML file about a run and its release, to open offline or attach.

Charts are plotly figures with plotly.js inlined once (no CDN, no request when the file is opened); tables are
plain HTML. The figures come from the warehouse (the ``Warehouse``'s named queries, ``audit.py``, ``stats.py``).
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from ifsynth.schemas.errors import ConfigError
from ifsynth.warehouse import audit
from ifsynth.warehouse.cards import markdown
from ifsynth.warehouse.stats import release_meta
from ifsynth.warehouse.store import Warehouse

SAMPLES_PER_STAGE = 3
REASON_ROWS = 40
_ONE = {"instructions": "instruction", "queries": "query", "passages": "passage"}
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.6rem 0; }
td, th { border: 1px solid #ddd; padding: 0.25rem 0.5rem; vertical-align: top; text-align: left; }
td.n { text-align: right; } pre { background: #f6f6f6; padding: 1rem; overflow-x: auto; font-size: 0.8rem; }
.chart { margin: 0.5rem 0 1.5rem; }
"""


def build(warehouse: Warehouse, release: str, compare: str | None = None) -> str:
    """The report of ``release`` (and of the run that made it, if one did), as one HTML document."""
    meta = release_meta(warehouse, release)
    card = json.loads(meta["card"])
    run_id = meta["run_id"]
    sections = [f"<h1>{_e(release)}: {_e(meta['recipe'])} release</h1>"]
    if run_id:
        sections += _run_sections(warehouse, run_id)
    sections += ["<h2>Lengths</h2>", _lengths(warehouse, release, compare)]
    if compare:
        sections += ["<h2>Systems on both releases</h2>", _validity(warehouse.latest_validity(release, compare))]
    sections += ["<h2>Card</h2>", f"<pre>{_e(markdown(card))}</pre>"]
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>ifsynth report: {_e(release)}</title><style>{_STYLE}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>{''.join(sections)}</body></html>"
    )


def _run_sections(warehouse: Warehouse, run_id: str) -> list[str]:
    funnel = audit.funnel(warehouse, run_id)
    stages = [s["stage"] for s in funnel["stages"]]
    figure = go.Figure(
        [
            go.Bar(name="in", x=stages, y=[s["in"] for s in funnel["stages"]]),
            go.Bar(name="out", x=stages, y=[s["out"] for s in funnel["stages"]]),
            go.Bar(name="rejected", x=stages, y=[s["rejected"] for s in funnel["stages"]]),
        ],
        # log scale: selection sees the whole seed set, the later stages a few of it
        layout={
            "barmode": "group",
            "title": f"Funnel of run {run_id}: {funnel['accepted']} accepted",
            "yaxis": {"type": "log", "title": "items (log scale)"},
        },
    )
    sections = ["<h2>Funnel</h2>", _chart(figure)]
    sections += ["<h2>Judges' scores</h2>", *_score_charts(warehouse.scored_verdicts(run_id))]
    sections += ["<h2>Rejection reasons</h2>", _reasons(warehouse, run_id)]
    sections += ["<h2>Samples per stage</h2>"]
    for stage in stages:
        rows = audit.audit(warehouse, run_id, stage=stage, status=None, limit=SAMPLES_PER_STAGE)
        if rows:
            columns: tuple[str, ...] = (
                "item_id",
                "kind",
                "status",
                "decided_by",
                "judge",
                "decision",
                "score",
                "reason",
            )
            sections += [f"<h3>{_e(stage)}</h3>", _table(rows, columns)]
    usage = warehouse.usage_by_stage(run_id)
    if usage:
        figure = go.Figure(
            [
                go.Bar(name="prompt tokens", x=[u["stage"] for u in usage], y=[u["prompt_tokens"] for u in usage]),
                go.Bar(
                    name="completion tokens", x=[u["stage"] for u in usage], y=[u["completion_tokens"] for u in usage]
                ),
            ],
            layout={"barmode": "stack", "title": "Tokens per stage"},
        )
        columns = ("stage", "requests", "prompt_tokens", "completion_tokens", "cost")
        sections += ["<h2>Tokens and cost per stage</h2>", _chart(figure), _table(usage, columns)]
    return sections


def _reasons(warehouse: Warehouse, run_id: str) -> str:
    """One row per rule a stage applied, with how often it removed an item and the spread of what it measured."""
    found = audit.reasons(warehouse, run_id)
    rows = []
    for row in found[:REASON_ROWS]:
        measured, threshold = audit.spread_text(row)
        rows.append({**row, "measured": measured, "threshold": threshold})
    table = _table(rows, ("stage", "judge", "decision", "rule", "n", "measured", "threshold"))
    # a run an older ifsynth made has no rules: its reasons group by their text, one row per measured value
    return table + (f"<p>The {REASON_ROWS} most frequent of {len(found)}.</p>" if len(found) > REASON_ROWS else "")


def _score_charts(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One histogram per (stage, judge), with the threshold the judge was held to."""
    by_judge: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        by_judge.setdefault((row["stage"], row["judge"]), []).append(row)
    charts = []
    for (stage, judge), judged in by_judge.items():
        figure = go.Figure(go.Histogram(x=[r["score"] for r in judged], name="score"))
        threshold = next((r["threshold"] for r in judged if r["threshold"] is not None), None)
        if threshold is not None:
            figure.add_vline(x=threshold, line_dash="dash", line_color="firebrick", annotation_text="threshold")
        figure.update_layout(title=f"{stage} ({judge}): {len(judged)} scores", bargap=0.1)
        charts.append(_chart(figure))
    return charts or ["<p>No judge gave scores in this run.</p>"]


def _lengths(warehouse: Warehouse, release: str, compare: str | None) -> str:
    """Words per text, overlaid on another release's (an imported original) with ``compare``."""
    mine = warehouse.release_word_counts(release)
    theirs = warehouse.release_word_counts(compare) if compare else None
    charts = []
    for what, values in mine.items():
        figure = go.Figure(go.Histogram(x=values, name=release, opacity=0.6, histnorm="probability"))
        if theirs is not None:
            figure.add_trace(go.Histogram(x=theirs[what], name=compare, opacity=0.6, histnorm="probability"))
        figure.update_layout(barmode="overlay", title=f"Words per {_ONE[what]}", xaxis_title="words")
        charts.append(_chart(figure))
    return "".join(charts)


def _validity(report: dict[str, Any] | None) -> str:
    """The newest `ifsynth validity` result of the two releases: each system's score on one against the
    other, the diagonal where they agree, and the rank correlations."""
    if report is None:
        return "<p>No validity result yet: <code>ifsynth validity ORIGINAL REGENERATED --system ...</code></p>"
    rows = report["systems"]
    low = min(min(r["original"], r["regenerated"]) for r in rows)
    high = max(max(r["original"], r["regenerated"]) for r in rows)
    figure = go.Figure(
        [
            go.Scatter(
                x=[r["original"] for r in rows],
                y=[r["regenerated"] for r in rows],
                text=[r["system"] for r in rows],
                mode="markers+text",
                textposition="top center",
                name="systems",
            ),
            go.Scatter(x=[low, high], y=[low, high], mode="lines", line={"dash": "dot"}, name="same score"),
        ]
    )
    tau, rho = (report[name] for name in ("kendall_tau", "spearman_rho"))
    interval = report["bootstrap"]["kendall_tau"]
    said = f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""
    figure.update_layout(
        title=f"{report['metric']}: Kendall's tau-b {_number(tau)}{said}, Spearman's rho {_number(rho)}",
        xaxis_title=report["original"],
        yaxis_title=report["regenerated"],
    )
    columns = ("metric", "kendall_tau", "spearman_rho")
    return _chart(figure) + "<h3>Agreement per metric</h3>" + _table(report["per_metric"], columns)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _chart(figure: go.Figure) -> str:
    figure.update_layout(height=360, margin={"t": 50, "b": 40, "l": 50, "r": 20})
    div = figure.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False})
    return f"<div class='chart'>{div}</div>"


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    if not rows:
        return "<p>None.</p>"
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_cell(row.get(c)) for c in columns) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"<td class='n'>{value:.4g}</td>" if isinstance(value, float) else f"<td class='n'>{value}</td>"
    return f"<td>{_e('' if value is None else str(value)[:400])}</td>"


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def write(path: Path, document: str) -> Path:
    """Write the report to ``path``, or to ``report.html`` inside it when it is a folder."""
    if path.is_dir():
        path = path / "report.html"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(document, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the report to `{path}` ({exc.strerror or exc}); give another --out") from exc
    return path
