"""Self-contained HTML reports and the charts they share with the web UI (Plotly, JavaScript inlined).

Never imports torch: run directories are read as JSON. Public API:

* `Chart`, `HtmlTable`, `render_html`, `write_html`, `plotly_js`: the page
* `training_breakdown_chart`, `training_memory_chart`, `search_charts`, `inference_breakdown_chart`,
  `inference_memory_chart`, `inference_curve_chart`: planning results as charts
"""

from tenfold.report.charts import (
    inference_breakdown_chart,
    inference_curve_chart,
    inference_memory_chart,
    search_charts,
    training_breakdown_chart,
    training_memory_chart,
)
from tenfold.report.page import Chart, HtmlTable, plotly_js, render_html, write_html

__all__ = [
    "Chart",
    "HtmlTable",
    "inference_breakdown_chart",
    "inference_curve_chart",
    "inference_memory_chart",
    "plotly_js",
    "render_html",
    "search_charts",
    "training_breakdown_chart",
    "training_memory_chart",
    "write_html",
]
