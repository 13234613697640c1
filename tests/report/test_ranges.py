"""The report shows the 80 % ranges: table cells and footnote, asymmetric error bars on the days, cost,
speedup and step-time bars; nothing of it without a measured uncertainty."""

import dataclasses

import pytest

from tenfold.cost.compare import compare_training
from tenfold.cost.workloads import TrainingWorkload
from tenfold.perf.calibration import load_calibration
from tenfold.report.compare import comparison_charts, comparison_report_html, comparison_table
from tenfold.report.format import fmt_range
from tenfold.report.ranges import RANGE_NOTE
from tests.measured import UNCERTAINTY

W = TrainingWorkload(model="llama3-8b", tokens=1e12, seq_len=8192, global_batch=256)


def run(uncertainty):
    cal = dataclasses.replace(load_calibration(), uncertainty=uncertainty)
    return compare_training(W, ["h100-sxm", "b200"], num_gpus=64, calibration=cal)


@pytest.fixture(scope="module")
def comp():
    return run(UNCERTAINTY)


@pytest.fixture(scope="module")
def bare():
    return run(None)


def test_fmt_range():
    assert fmt_range(3.7, (3.1, 4.3), ".1f", "x") == "3.7x (3.1-4.3)"
    assert fmt_range(1234.0, (1050.0, 1450.0), ",.0f", level="80 %") == "1,234 (1,050-1,450, 80 %)"
    assert fmt_range(3.7, None, ".1f", "x") == "3.7x"
    assert fmt_range(float("nan"), (1.0, 2.0), ".1f") == "-"


def test_table_cells_and_note(comp, bare):
    t = comparison_table(comp)
    col = {c: i for i, c in enumerate(t.columns)}
    b200 = comp.row("b200")
    lo, hi = b200.interval("speedup")
    cell = t.rows[1][col["speedup vs h100-sxm"]]
    assert cell == f"{b200.speedup:.2f}x ({lo:.2f}-{hi:.2f})"
    assert "(" in t.rows[1][col["days"]] and "(" in t.rows[1][col["own cost"]]
    assert RANGE_NOTE in t.notes
    tb = comparison_table(bare)
    assert RANGE_NOTE not in tb.notes
    assert not any("(" in c for r in tb.rows for c in r[:-1])


def bars_of(chart):
    return [tr["error_y"] for tr in chart.figure["data"] if "error_y" in tr]


def test_error_bars_follow_the_ranges(comp, bare):
    charts = {c.key.split("_", 1)[1]: c for c in comparison_charts(comp, curves=False)}
    speed = charts["speedup"]
    (bars,) = bars_of(speed)
    b200 = comp.row("b200")
    lo, hi = b200.interval("speedup")
    i = speed.figure["data"][0]["x"].index("b200")
    assert bars["symmetric"] is False
    assert bars["array"][i] == pytest.approx(hi - b200.speedup)
    assert bars["arrayminus"][i] == pytest.approx(b200.speedup - lo)
    assert bars["array"][i] > bars["arrayminus"][i] > 0  # a log-symmetric range is longer upward
    (days,) = bars_of(charts["days"])
    assert all(x > 0 for x in days["array"] + days["arrayminus"])
    assert len(bars_of(charts["cost"])) == 2 and len(bars_of(charts["step"])) == 1
    plain = comparison_charts(bare, curves=False)
    assert not any(bars_of(c) for c in plain)


def test_html_report_carries_the_note(comp):
    html = comparison_report_html(comp)
    assert "leave-one-source-out" in html and "error_y" in html
