"""How numbers leave tenfold: one cell formatter and one JSON cleaner, shared by the CLI tables, the HTML
report and the web API, so that a missing number looks the same everywhere ("-" in a table, null in JSON).

Plain Python (no torch, no plotly): the CLI imports it for its tables.
"""

from __future__ import annotations

import math
from typing import Any


def fmt_number(x: Any, spec: str, suffix: str = "") -> str:
    """`format(x, spec) + suffix` for a finite number; "-" for None, NaN, infinity and anything that is
    not a number (a table cell the model could not fill)."""
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return "-"
    return format(x, spec) + suffix


def json_clean(obj: Any) -> Any:
    """`obj` with every NaN and infinity replaced by None, through dicts, lists and tuples (tuples become
    lists). JSON has no NaN: `json.dumps` would write a bare `NaN` that browsers reject; null is what
    Plotly draws as a gap and what a reader of `--json` can test for."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_clean(v) for v in obj]
    return obj


def usd(x: float) -> str:
    """$1.2B, $43.5M, $812k, $950: money at a readable scale ("-" when not a finite number)."""
    if not math.isfinite(x):
        return "-"
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"${x / scale:,.1f}{unit}"
    return f"${x:,.0f}"


def fmt_range(x: Any, interval: Any, spec: str, suffix: str = "", *, level: str = "", sep: str = " ") -> str:
    """`fmt_number(x, spec, suffix)` followed by `sep` and its range, "3.70x (3.10-4.30)", or with `level`
    "1,234 (1,050-1,450, 80 %)"; the bare number when `interval` is None or not finite."""
    cell = fmt_number(x, spec, suffix)
    if cell == "-" or not interval or any(fmt_number(v, spec) == "-" for v in interval):
        return cell
    lo, hi = (format(v, spec) for v in interval)
    return f"{cell}{sep}({lo}-{hi}{', ' + level if level else ''})"
