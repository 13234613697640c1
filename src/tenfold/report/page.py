"""One self-contained HTML file: Plotly's JavaScript inlined, charts as Plotly JSON, tables as HTML.

Nothing is fetched when the file is opened (no CDN, no fonts, no images): plotly.js comes from the plotly
package's offline bundle (`plotly.offline.get_plotlyjs()`), so the report opens on an air-gapped laptop.
Every chart is a `Chart`: a title, a one-line reading of what it shows, and the Plotly figure (axis titles
carry the units). The web app sends the same `Chart` objects as JSON and draws them with the same bundle.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tenfold.report.format import json_clean


@dataclass(frozen=True, kw_only=True)
class Chart:
    """One chart of a report or a web response.

    Fields:
        key: a short identifier (the HTML element id; `step_breakdown`, `memory`, ...).
        title: what is drawn, with the unit in the axis titles of `figure`.
        reading: one sentence saying what the chart shows (the number a reader should take away).
        figure: a Plotly figure as plain JSON data: {"data": [traces], "layout": {...}}.
    """

    key: str
    title: str
    reading: str
    figure: dict[str, Any]

    def __post_init__(self) -> None:
        if not self.key or not self.key.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"chart key must be a non-empty identifier, got {self.key!r}")
        if not self.title.strip() or not self.reading.strip():
            raise ValueError(f"chart {self.key!r} needs a title and a reading")
        if "data" not in self.figure or "layout" not in self.figure:
            raise ValueError(
                f"chart {self.key!r}: figure needs 'data' and 'layout', has {sorted(self.figure)}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "reading": self.reading,
            "figure": json_clean(self.figure),
        }


@dataclass(frozen=True, kw_only=True)
class HtmlTable:
    """A plain table for the report (the side-by-side numbers next to the charts)."""

    caption: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for r in self.rows:
            if len(r) != len(self.columns):
                raise ValueError(
                    f"table {self.caption!r}: row has {len(r)} cells for {len(self.columns)} columns"
                )


def plotly_js() -> str:
    """The plotly.js bundle shipped inside the plotly package (no network)."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _script_json(obj: Any) -> str:
    """JSON that is safe inside a <script> element (no `</script>` can close it early)."""
    return json.dumps(json_clean(obj), allow_nan=False).replace("</", "<\\/")


CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 72rem;
       padding: 0 1rem; color: #1d2330; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.15rem; margin: 1.6rem 0 .2rem; }
.sub { color: #5a6272; margin-top: 0; }
.reading { margin: .1rem 0 .4rem; color: #34405a; }
table { border-collapse: collapse; margin: .6rem 0 1rem; font-size: .9rem; }
th, td { border-bottom: 1px solid #d8dce4; padding: .25rem .6rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
caption { text-align: left; font-weight: 600; padding-bottom: .3rem; }
.note { color: #5a6272; font-size: .85rem; }
.chart { min-height: 420px; }
"""

DRAW = """
for (const c of TENFOLD_CHARTS) {
  Plotly.newPlot("chart-" + c.key, c.figure.data, c.figure.layout, {responsive: true, displaylogo: false});
}
"""


def render_html(
    *,
    title: str,
    subtitle: str = "",
    charts: list[Chart] | tuple[Chart, ...] = (),
    tables: list[HtmlTable] | tuple[HtmlTable, ...] = (),
    notes: list[str] | tuple[str, ...] = (),
    created: datetime | None = None,
) -> str:
    """The whole report as one HTML string: tables first, then each chart with its title and reading."""
    keys = [c.key for c in charts]
    if len(set(keys)) != len(keys):
        raise ValueError(f"chart keys must be unique, got {keys}")
    when = (created or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    e = html.escape
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(title)}</title>",
        f"<style>{CSS}</style>",
        f"<script>{plotly_js()}</script>",
        "</head><body>",
        f"<h1>{e(title)}</h1>",
        f'<p class="sub">{e(subtitle)} · made by tenfold, {when}</p>' if subtitle else "",
    ]
    for t in tables:
        parts.append("<table>")
        parts.append(f"<caption>{e(t.caption)}</caption>")
        parts.append("<tr>" + "".join(f"<th>{e(c)}</th>" for c in t.columns) + "</tr>")
        for r in t.rows:
            parts.append("<tr>" + "".join(f"<td>{e(v)}</td>" for v in r) + "</tr>")
        parts.append("</table>")
        parts.extend(f'<p class="note">{e(n)}</p>' for n in t.notes)
    for c in charts:
        parts.append(f'<section id="section-{e(c.key)}">')
        parts.append(f"<h2>{e(c.title)}</h2>")
        parts.append(f'<p class="reading">{e(c.reading)}</p>')
        parts.append(f'<div class="chart" id="chart-{e(c.key)}"></div>')
        parts.append("</section>")
    parts.extend(f'<p class="note">{e(n)}</p>' for n in notes)
    parts.append(
        f"<script>const TENFOLD_CHARTS = {_script_json([c.to_dict() for c in charts])};{DRAW}</script>"
    )
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p)


def write_html(path: str | Path, **kwargs: Any) -> Path:
    """`render_html(**kwargs)` written to `path` (parent folders created)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(render_html(**kwargs), encoding="utf-8")
    return p
