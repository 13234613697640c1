"""`tenfold inspect` and its risk summary, on hand-made telemetry records and on a real short run."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from tenfold.cli.main import app
from tenfold.engine.telemetry.risk import heatmap_grid, load_records, risk_table


def rec(step, layer, tensor, clip, under, sqnr, what_if=False, recipe="nvfp4"):
    return {
        "step": step,
        "layer": layer,
        "gemm": "fprop",
        "tensor": tensor,
        "recipe": recipe,
        "what_if": what_if,
        "clip_frac": clip,
        "underflow_frac": under,
        "sqnr_db": sqnr,
        "amax": 1.0 + step,
    }


RECORDS = [
    rec(0, "a", "x", 0.00, 0.01, 30.0),
    rec(10, "a", "x", 0.00, 0.02, 25.0),
    rec(0, "b", "x", 0.05, 0.10, 18.0),
    rec(10, "b", "x", 0.01, 0.00, 22.0),
    rec(0, "c", "w", 0.00, 0.00, None),
    rec(10, "c", "w", 0.00, 0.00, 40.0),
    rec(0, "d", "x", 0.00, 0.02, 12.0),  # same lost fraction as "a", lower SQNR: ranks before it
    rec(0, "a", "x", 0.50, 0.50, 1.0, what_if=True, recipe="mxfp4"),
]


def test_risk_table_aggregates_and_orders():
    rows = risk_table(RECORDS)
    assert [r.layer for r in rows] == ["b", "d", "a", "c"]
    b = rows[0]
    assert (b.clip_frac_max, b.underflow_frac_max, b.sqnr_db_min, b.steps) == (0.05, 0.10, 18.0, 2)
    assert b.lost_frac == pytest.approx(0.15) and b.amax_last == 11.0
    assert rows[3].sqnr_db_min == 40.0  # the exact (None) sample is skipped, not treated as 0
    wi = risk_table(RECORDS, what_if=True)
    assert [(r.layer, r.recipe) for r in wi] == [("a", "mxfp4")]
    assert len(risk_table(RECORDS, what_if=None)) == 5


def test_heatmap_grid_is_lowest_sqnr_per_layer_and_step():
    layers, steps, grid = heatmap_grid(RECORDS)
    assert layers == ["a", "b", "c", "d"] and steps == [0, 10]
    assert grid[0] == [30.0, 25.0] and grid[1] == [18.0, 22.0]
    assert math.isnan(grid[2][0]) and grid[2][1] == 40.0 and math.isnan(grid[3][1])


def test_load_records_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_records(tmp_path / "nope")
    with pytest.raises(ValueError, match="not found"):
        load_records(tmp_path)
    (tmp_path / "telemetry.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(ValueError, match=r"telemetry.jsonl:1: missing fields"):
        load_records(tmp_path)
    (tmp_path / "telemetry.jsonl").write_text("{oops\n")
    with pytest.raises(ValueError, match="not JSON"):
        load_records(tmp_path)


def test_inspect_cli_on_records(tmp_path):
    (tmp_path / "telemetry.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    res = CliRunner().invoke(app, ["inspect", str(tmp_path), "--json", "--top", "2"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [r["layer"] for r in out["rows"]] == ["b", "d"] and out["total_rows"] == 4
    assert (tmp_path / "telemetry_heatmap.html").stat().st_size > 1000
    png = CliRunner().invoke(app, ["inspect", str(tmp_path), "--heatmap", str(tmp_path / "h.png")])
    assert png.exit_code == 2 and ".html" in png.output  # the heat-map is HTML now: a PNG path is refused
    res = CliRunner().invoke(app, ["inspect", str(tmp_path)])
    assert res.exit_code == 0 and "operands by risk" in res.output
    assert CliRunner().invoke(app, ["inspect", str(tmp_path / "missing")]).exit_code == 2


def test_inspect_a_real_run(tmp_path):
    res = CliRunner().invoke(
        app,
        [
            "train",
            "--recipe",
            "nvfp4",
            "--model",
            "tiny",
            "--steps",
            "6",
            "--telemetry-every",
            "3",
            "--out",
            str(tmp_path),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    recs = load_records(tmp_path / "nvfp4")
    assert sorted({r["step"] for r in recs}) == [0, 3]
    rows = risk_table(recs)
    assert rows and all(0 <= r.clip_frac_max <= 1 and 0 <= r.underflow_frac_max <= 1 for r in rows)
    assert {r.tensor for r in rows} == {"x", "w", "dy"}


def test_inspect_table_fits_80_columns_without_cutting(tmp_path):
    (tmp_path / "telemetry.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    res = CliRunner().invoke(app, ["inspect", str(tmp_path)], terminal_width=80)
    assert res.exit_code == 0, res.output
    assert max(len(line) for line in res.output.splitlines()) <= 80 and "…" not in res.output
