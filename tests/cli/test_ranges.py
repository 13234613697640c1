"""The CLI shows each training estimate's 80 % range (table, footnote, --json) when the calibration
measured its uncertainty, nothing without one, and still fits 80 columns."""

import json

import pytest
from typer.testing import CliRunner

from tenfold.cli.main import app
from tests.cli.test_width import COMMANDS
from tests.measured import with_uncertainty

runner = CliRunner()
EST = ["estimate", "train", "-m", "llama3-70b", "-g", "b200", "--tp", "2", "--pp", "4", "--dp", "8"]
SEARCH = ["search", "train", "-m", "llama3-8b", "-g", "h100-sxm", "-n", "16", "--top", "2"]
COMPARE = ["compare", "-m", "llama3-8b", "--tokens", "1T", "-n", "64", "--gpus", "h100-sxm,b200"]


@pytest.fixture
def measured(monkeypatch):
    with_uncertainty(monkeypatch)


def run_json(args):
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def test_estimate_json_ranges_contain_the_values(measured):
    d = run_json(EST)
    lo, hi = d["tokens_per_s_per_gpu_interval"]
    assert lo < d["tokens_per_s_per_gpu"] < hi
    s_lo, s_hi = d["step_time_s_interval"]
    assert s_lo < d["step_time_s"] < s_hi
    # a slower step is a lower throughput: the two ranges are the same relative width
    assert s_hi / d["step_time_s"] == pytest.approx(d["tokens_per_s_per_gpu"] / lo)
    assert d["interval_level"] == 0.8


def test_estimate_without_uncertainty_shows_no_range(monkeypatch):
    with_uncertainty(monkeypatch, None)
    d = run_json(EST)
    assert d["tokens_per_s_per_gpu_interval"] is None and d["step_time_s_interval"] is None
    r = runner.invoke(app, EST)
    assert "80 % range" not in r.output and "cross-validated" not in r.output


def test_estimate_table_prints_range_and_footnote(measured):
    d = run_json(EST)
    r = runner.invoke(app, EST, env={"COLUMNS": "100"})
    lo, hi = d["tokens_per_s_per_gpu_interval"]
    assert f"({lo:,.0f}-{hi:,.0f})" in r.output
    assert "leave-one-source-out" in " ".join(r.output.split())


def test_search_range_table_and_json(measured):
    d = run_json(SEARCH)
    for t in d["top"]:
        lo, hi = t["tokens_per_s_per_gpu_interval"]
        assert lo < t["tokens_per_s_per_gpu"] < hi
    r = runner.invoke(app, SEARCH, env={"COLUMNS": "100"})
    assert "80 % ranges of the plans above" in r.output
    t = d["top"][0]
    assert f"{t['tokens_per_s_per_gpu_interval'][0]:,.0f}-" in r.output


def test_compare_shows_ratio_ranges(measured):
    d = run_json(COMPARE)
    b200 = d["summary"][1]
    lo, hi = b200["speedup_interval"]
    assert lo < b200["speedup"] < hi
    r = runner.invoke(app, COMPARE, env={"COLUMNS": "100"})
    text = " ".join(r.output.split())
    assert f"{b200['speedup']:.2f}x ({lo:.2f}-{hi:.2f})" in text
    assert "leave-one-source-out" in text


@pytest.mark.parametrize("args", [*COMMANDS[1:4], COMPARE], ids=lambda a: " ".join(a[:2]))
def test_ranges_fit_80_columns(measured, args):
    r = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert r.exit_code in (0, 1), r.output
    wide = [line for line in r.output.splitlines() if len(line) > 80]
    assert not wide, "\n".join(wide)
    assert "…" not in r.output, r.output
    assert "80 %" in r.output
