"""The HTML report: self-contained (plotly.js inlined, no external script), every chart titled with a
reading and valid Plotly JSON; charts built from real planning results; run folders read without torch."""

import json
import math
import re

import plotly.graph_objects as go
import pytest

from tenfold.cost.compare_serving import compare_serving
from tenfold.cost.workloads import ServingWorkload
from tenfold.perf import Deployment, estimate_inference, inference_curve
from tenfold.perf.training.search import search_training
from tenfold.report import (
    Chart,
    inference_breakdown_chart,
    inference_curve_chart,
    inference_memory_chart,
    plotly_js,
    render_html,
    search_charts,
)
from tenfold.report.charts import throughput_at
from tenfold.report.compare import comparison_charts, comparison_report_html
from tenfold.report.runs import (
    load_runs,
    loss_chart,
    run_charts,
    runs_report_html,
    smooth,
    sqnr_heatmap_chart,
)


def charts_in(html: str) -> list[dict]:
    m = re.search(r"const TENFOLD_CHARTS = (\[.*?\]);\n", html, re.S)
    assert m, "chart data missing"
    return json.loads(m.group(1).replace("<\\/", "</"))


def assert_valid(chart: Chart) -> None:
    d = chart.to_dict()
    go.Figure(d["figure"])  # plotly validates every trace and layout attribute
    lay = d["figure"]["layout"]
    assert lay["title"]["text"] and lay["xaxis"]["title"]["text"] and lay["yaxis"]["title"]["text"]
    assert d["reading"].endswith(".") and len(d["reading"]) > 30


@pytest.fixture(scope="module")
def search():
    return search_training("llama3-70b", "h100-sxm", 64, seq_len=8192, global_batch=128, top_k=3)


def test_page_is_self_contained(search):
    charts = search_charts(search)
    html = render_html(title="t <b>", subtitle="s", charts=charts)
    assert plotly_js()[:2000] in html  # the bundle itself, inlined
    assert not re.search(r"<script[^>]+src=", html)  # no external script
    outside = html.replace(plotly_js(), "")
    assert "http://" not in outside and "https://" not in outside  # nothing outside the bundle fetches
    assert "t &lt;b&gt;" in html  # titles are escaped
    data = charts_in(html)
    assert [c["key"] for c in data] == ["step_breakdown", "memory"]
    for c in charts:
        assert f"<h2>{c.title}" in html and c.reading in html


def test_search_charts_match_the_estimates(search):
    step, mem = search_charts(search)
    for c in (step, mem):
        assert_valid(c)
    # the stacked parts add up to each plan's step time and memory total
    for i, e in enumerate(search.top):
        assert sum(t["y"][i] for t in step.figure["data"]) == pytest.approx(e.step_time_s, rel=1e-9)
        bars = [t for t in mem.figure["data"] if t["type"] == "bar"]
        assert sum(t["y"][i] for t in bars) == pytest.approx(e.memory.total_GiB, rel=1e-9)
        cap = next(t for t in mem.figure["data"] if t["name"] == "HBM capacity")
        assert cap["y"][i] == pytest.approx(80.0, abs=1.0)
    assert f"{search.top[-1].step_time_s:.2f} s" in step.reading


def test_log_ticks_step_1_2_5_and_label_in_full():
    from tenfold.report.charts import log_ticks

    t = log_ticks([1.5, 130.0])
    assert t["tickvals"] == [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0]
    assert t["ticktext"] == ["1", "2", "5", "10", "20", "50", "100", "200"]
    assert log_ticks([900.0, 4000.0])["ticktext"] == ["500", "1k", "2k", "5k", "10k"]
    assert log_ticks([]) == {} and log_ticks([0.0]) == {}


def test_inference_charts():
    kw = dict(input_len=1024, output_len=1024)
    e = estimate_inference("llama3-70b", "b200", Deployment(tp=2), precision="nvfp4", **kw)
    fast = inference_curve("llama3-70b", "b200", Deployment(tp=2), precision="nvfp4", **kw)
    slow = inference_curve("llama3-70b", "h100-sxm", Deployment(tp=4), precision="fp8", **kw)
    for c in (inference_breakdown_chart([e]), inference_memory_chart([e])):
        assert_valid(c)
    ch = inference_curve_chart([fast, slow], ["b200", "h100"], target_per_user=20.0)
    assert_valid(ch)
    y_fast, y_slow = throughput_at(fast, 20.0), throughput_at(slow, 20.0)
    assert y_fast > y_slow > 0
    assert f"{y_fast / y_slow:.1f}x" in ch.reading
    line = ch.figure["layout"]["shapes"][0]  # the target line, at the data value on the log x axis
    assert ch.figure["layout"]["xaxis"]["type"] == "log" and line["x0"] == line["x1"] == 20.0
    # the log axis is labelled in full at 1-2-5 steps (plotly's default labels 20 as a bare "2")
    xaxis = ch.figure["layout"]["xaxis"]
    xs = [x for tr in ch.figure["data"] for x in tr["x"]]
    assert "20" in xaxis["ticktext"] and len(xaxis["tickvals"]) == len(xaxis["ticktext"])
    assert min(xaxis["tickvals"]) <= min(xs) and max(xaxis["tickvals"]) >= max(xs)
    # interpolation stays between the neighbouring points; None beyond the curve; the peak below it
    assert throughput_at(fast, 1e9) is None
    assert throughput_at(fast, 1e-3) == max(
        p.output_tokens_per_s_per_gpu for p in fast.points if not p.saturated
    )
    pts = sorted((p.output_tokens_per_s_per_user, p.output_tokens_per_s_per_gpu) for p in fast.points)
    lo, hi = pts[1], pts[2]
    mid = throughput_at(fast, math.sqrt(lo[0] * hi[0]))
    assert min(lo[1], hi[1]) <= mid <= max(lo[1], hi[1])


def test_chart_rules():
    with pytest.raises(ValueError, match="title and a reading"):
        Chart(key="a", title="x", reading=" ", figure={"data": [], "layout": {}})
    c = Chart(key="a", title="x", reading="y.", figure={"data": [{"y": [float("nan")]}], "layout": {}})
    assert c.to_dict()["figure"]["data"][0]["y"] == [None]
    with pytest.raises(ValueError, match="unique"):
        render_html(title="t", charts=[c, c])
    evil = Chart(key="b", title="x", reading="y.", figure={"data": [{"name": "</script><i>"}], "layout": {}})
    html = render_html(title="t", charts=[evil])
    assert "</script><i>" not in html and charts_in(html)[0]["figure"]["data"][0]["name"] == "</script><i>"


def test_comparison_report():
    w = ServingWorkload(
        model="llama3-70b",
        input_len=1024,
        output_len=1024,
        output_tokens_per_s=1e5,
        min_tokens_per_s_per_user=20.0,
        max_ttft_s=5.0,
    )
    c = compare_serving(w, ["h100-sxm", "b200"])
    charts = comparison_charts(c)
    assert [x.key for x in charts] == ["c0_cost", "c0_days", "c0_energy", "c0_curve", "c0_tornado"]
    for x in charts:
        assert_valid(x)
    html = comparison_report_html(c)
    assert "<td>h100-sxm</td>" in html and "<td>b200</td>" in html
    tornado = next(x for x in charts if x.key == "c0_tornado").figure["data"]
    assert all(b == tornado[0]["base"][0] for b in tornado[0]["base"])  # bars start at the base cost


def write_run(folder, name, losses, val):
    d = folder / name
    d.mkdir()
    rows = []
    for i, loss in enumerate(losses, 1):
        row = {"step": i, "loss": loss, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 1000.0}
        if i in val:
            row["val_loss"] = val[i]
        rows.append(json.dumps(row))
    (d / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    (d / "summary.json").write_text(json.dumps({"recipe": name, "tokens_per_s": 1000.0, "wall_s": 2.0}))


def test_run_report(tmp_path):
    write_run(tmp_path, "bf16", [3.0, 2.5, 2.0, 1.8], {2: 2.6, 4: 1.9})
    write_run(tmp_path, "nvfp4", [3.0, 2.6, 2.2, 2.0], {4: 2.09})
    runs = load_runs(tmp_path)
    assert [r.name for r in runs] == ["bf16", "nvfp4"]
    c = loss_chart(runs)
    assert_valid(c)
    assert "bf16 at 1.9000" in c.reading and "+0.1900 (+10.0%)" in c.reading
    assert load_runs(tmp_path / "bf16")[0].evals == [(2, 2.6), (4, 1.9)]
    html = runs_report_html(runs)
    assert "<td>nvfp4</td>" in html and "Loss curves per recipe" in html
    assert smooth([1.0, 3.0, 5.0], 2) == [1.0, 2.0, 4.0]


def test_run_errors(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        load_runs(tmp_path / "missing")
    with pytest.raises(ValueError, match="no run folders"):
        load_runs(tmp_path)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\nnot json\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl:2: not JSON"):
        load_runs(tmp_path)


def test_dynamic_range_heatmap(tmp_path):
    write_run(tmp_path, "nvfp4", [3.0, 2.6, 2.2, 2.0], {4: 2.09})
    recs = []
    for step in (1, 3):
        for layer, tensor, amax, under in (
            ("blocks.0.ffn", "x", 4.0, 0.0),
            ("blocks.0.ffn", "dy", 2.0**-20, 0.125),
        ):
            recs.append(
                {
                    "step": step,
                    "layer": layer,
                    "gemm": "fprop" if tensor == "x" else "dgrad",
                    "side": "a",
                    "tensor": tensor,
                    "recipe": "nvfp4",
                    "what_if": False,
                    "amax": amax,
                    "clip_frac": 0.0,
                    "underflow_frac": under,
                    "sqnr_db": 20.0,
                }
            )
    recs.append({**recs[0], "what_if": True, "recipe": "mxfp8", "amax": 1e9})  # what-if: not drawn
    (tmp_path / "nvfp4" / "telemetry.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    runs = load_runs(tmp_path)
    charts = run_charts(runs)
    assert [c.key for c in charts] == ["loss", "dynrange_0"]
    heat = charts[1]
    assert_valid(heat)
    trace = heat.figure["data"][0]
    assert trace["x"] == [1, 3]
    assert trace["y"] == ["blocks.0.ffn dgrad.dy", "blocks.0.ffn fprop.x"]
    assert trace["z"] == [[-20.0, -20.0], [2.0, 2.0]]
    assert "2^-20.0 to 2^2.0 (22.0 octaves)" in heat.reading
    assert "most underflow: blocks.0.ffn dgrad.dy (step 3) at 12.50%" in heat.reading


def test_sqnr_heatmap_chart_leaves_nan_cells_blank():
    nan = float("nan")
    chart = sqnr_heatmap_chart(["a", "b"], [0, 10], [[30.0, 25.0], [nan, 18.0]])
    assert_valid(chart)
    assert chart.to_dict()["figure"]["data"][0]["z"] == [[30.0, 25.0], [None, 18.0]]
    assert "lowest SQNR 18.0 dB (b at step 10), highest 30.0 dB" in chart.reading
    with pytest.raises(ValueError, match="no records"):
        sqnr_heatmap_chart([], [], [])
