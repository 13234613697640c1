"""`tenfold calibrate inference` and `--calibration` on the serving commands (issue 16): a calibration fitted
on serving runs slower than the shipped model predicts lowers the estimates; bad rows and bad files exit 2
with the reason and write nothing; the JSON outputs carry 80 % ranges."""

import csv
import json
import tomllib

import pytest
from typer.testing import CliRunner

from tenfold.cli.main import app
from tenfold.perf.calibration import load_calibration
from tenfold.perf.validation.serving import case_from_row, default_runs_path, predict_case

runner = CliRunner()
ROWS = (
    "trtllm12-llama33-70b-h200-tp2-fp8-1k1k",
    "trtllm12-llama33-70b-h200-tp2-fp8-8k1k",
    "trtllm10-llama31-8b-h200-tp1-fp8-1k1k",
)
INFER = ["estimate", "infer", "-m", "llama3-70b", "-g", "h200", "--tp", "2", "--input-len", "1024"]
INFER += ["--output-len", "1024", "--precision", "fp8", "--kv-precision", "fp8", "--concurrency", "64"]
INFER += ["--json"]


def write_runs(path, factor: float, edit=None) -> None:
    """Three shipped H200 FP8 serving rows whose measured value is the shipped model's prediction times
    `factor` (below 1: the user's stack is slower than the model says); `edit(rows)` may spoil them."""
    with open(default_runs_path(), newline="") as fh:
        reader = csv.DictReader(fh)
        fields = list(reader.fieldnames)
        rows = [r for r in reader if r["id"] in ROWS]
    cal = load_calibration(kind="inference")
    for r in rows:
        r["value"] = repr(predict_case(case_from_row(r), cal).predicted * factor)
    if edit:
        edit(rows)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cal")
    runs, out = tmp / "serving.csv", tmp / "serving.toml"
    write_runs(runs, 0.7)
    r = runner.invoke(
        app, ["calibrate", "inference", "--runs", str(runs), "--out", str(out), "--iters", "40", "--json"]
    )
    assert r.exit_code == 0, r.output
    return out, json.loads(r.output)


def test_the_round_trip_fits_the_runs_and_loads_back(fitted):
    path, report = fitted
    assert {r["id"] for r in report["rows"]} == set(ROWS)
    assert report["mape"]["after"] < report["mape"]["before"] / 2
    cal = load_calibration(path, kind="inference")
    assert cal.gemm("hopper", "8") < load_calibration(kind="inference").gemm("hopper", "8")
    fit = tomllib.loads(path.read_text())["fit"]
    assert fit["rows"] == 3 and fit["source"] == "serving.csv"
    assert "calibrate inference" in path.read_text()


def test_the_calibration_lowers_estimate_infer_and_keeps_its_range(fitted):
    plain = json.loads(runner.invoke(app, INFER).output)
    r = runner.invoke(app, [*INFER, "--calibration", str(fitted[0])])
    assert r.exit_code == 0, r.output
    mine = json.loads(r.output)
    assert mine["output_tokens_per_s_per_gpu"] < 0.85 * plain["output_tokens_per_s_per_gpu"]
    assert "your calibration" in mine["calibration"]
    lo, hi = mine["output_tokens_per_s_per_gpu_interval"]
    assert lo < mine["output_tokens_per_s_per_gpu"] < hi


def test_validate_inference_takes_the_calibration(fitted):
    plain = json.loads(runner.invoke(app, ["validate", "inference", "--json"]).output)
    r = runner.invoke(app, ["validate", "inference", "--json", "--calibration", str(fitted[0])])
    assert r.exit_code == 0, r.output
    mine = json.loads(r.output)
    assert mine["mape"]["overall"] != plain["mape"]["overall"]
    assert "your calibration" in mine["accuracy"]
    assert all(row["interval"] is not None for row in plain["rows"])
    assert plain["cross_validation"]["rows"] > 0 and mine["cross_validation"] == {}


def _gpu(rows):
    rows[1]["gpu"] = "h200-typo"


def _value(rows):
    rows[0]["value"] = "-3"


def _layout(rows):
    rows[2]["tp"] = "3"


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (_gpu, [ROWS[1], "h200-typo"]),
        (_value, [ROWS[0], "value"]),
        (_layout, [ROWS[2], "tp=3"]),
    ],
)
def test_a_bad_row_exits_2_naming_it_and_writes_nothing(tmp_path, edit, named):
    runs, out = tmp_path / "r.csv", tmp_path / "c.toml"
    write_runs(runs, 0.8, edit)
    r = runner.invoke(app, ["calibrate", "inference", "--runs", str(runs), "--out", str(out)])
    assert r.exit_code == 2, r.output
    flat = " ".join(r.output.split())
    for text in named:
        assert text in flat, flat
    assert not out.exists()


def test_a_training_calibration_is_refused_for_serving(tmp_path):
    """The serving model has parameters a training file lacks: exit 2 naming them, not a silent default."""
    path = tmp_path / "training.toml"
    path.write_text((default_runs_path().parents[1] / "calibration" / "training.toml").read_text())
    for command in (INFER, ["validate", "inference", "--json"]):
        r = runner.invoke(app, [*command, "--calibration", str(path)])
        flat = " ".join(r.output.split())
        assert r.exit_code == 2, r.output
        assert "--calibration" in flat and "moe_efficiency" in flat


SERVE = ["compare", "-m", "llama3-70b", "--serve", "--per-user", "30", "--demand", "1e5"]
SERVE += ["--gpus", "h200,b200", "--baseline", "h200", "--precisions", "fp8", "--json"]


def test_compare_serve_takes_the_calibration_and_shows_ranges(fitted):
    plain = json.loads(runner.invoke(app, SERVE).output)
    r = runner.invoke(app, [*SERVE, "--calibration", str(fitted[0])])
    assert r.exit_code == 0, r.output
    mine = json.loads(r.output)
    h200 = next(row for row in plain["rows"] if row["hardware"] == "h200")
    lo, hi = h200["tokens_per_s_per_gpu_interval"]
    assert lo < h200["tokens_per_s_per_gpu"] < hi
    b200 = next(row for row in plain["rows"] if row["hardware"] == "b200")
    lo, hi = b200["speedup_interval"]
    assert lo < b200["speedup"] < hi and h200["speedup_interval"] is None  # the baseline is 1 exactly
    mine_h200 = next(row for row in mine["rows"] if row["hardware"] == "h200")
    assert mine_h200["tokens_per_s_per_gpu"] < h200["tokens_per_s_per_gpu"]
