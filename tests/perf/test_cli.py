"""The planning commands: tables, --json, exit codes 0 / 1 infeasible / 2 bad input."""

import csv
import json

from typer.testing import CliRunner

from tenfold.cli.main import app
from tenfold.perf.validation.serving import default_runs_path as serving_runs_path
from tenfold.perf.validation.training import default_runs_path

runner = CliRunner()
EST = [
    "estimate",
    "train",
    "-m",
    "llama3-70b",
    "-g",
    "h100-sxm",
    "--seq-len",
    "8192",
    "--global-batch",
    "256",
]


def test_estimate_table_and_json():
    ok = runner.invoke(app, [*EST, "--tp", "4", "--pp", "8", "--vp", "5", "--dp", "2", "--precision", "fp8"])
    assert ok.exit_code == 0, ok.output
    assert "tokens/s/GPU" in ok.output and "pipeline bubble" in ok.output
    js = runner.invoke(
        app, [*EST, "--tp", "4", "--pp", "8", "--vp", "5", "--dp", "2", "--precision", "fp8", "--json"]
    )
    d = json.loads(js.output)
    assert d["feasible"] and d["tokens_per_s_per_gpu"] > 0 and d["layout"]["tp"] == 4


def test_estimate_exit_codes():
    infeasible = runner.invoke(app, [*EST, "--dp", "8", "--json"])
    assert infeasible.exit_code == 1
    assert "GiB of 80 GiB" in json.loads(infeasible.output)["reason"]
    bad = runner.invoke(app, [*EST[:4], "no-such-model", *EST[5:], "--dp", "1"])
    assert bad.exit_code == 2
    bad_precision = runner.invoke(app, [*EST, "--dp", "8", "--precision", "fp3"])
    assert bad_precision.exit_code == 2


def test_search_json_and_exit_codes():
    args = [
        "search",
        "train",
        "-m",
        "llama3-8b",
        "-g",
        "h100-sxm",
        "-n",
        "16",
        "--seq-len",
        "8192",
        "--global-batch",
        "64",
        "--top",
        "2",
        "--max-vp",
        "2",
    ]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert len(d["top"]) == 2 and d["evaluated"] >= d["fits"] > 0
    table = runner.invoke(app, args)
    assert table.exit_code == 0 and "rejected plans" in table.output
    none = runner.invoke(
        app,
        [
            "search",
            "train",
            "-m",
            "llama3.1-405b",
            "-g",
            "h100-sxm",
            "-n",
            "8",
            "--seq-len",
            "8192",
            "--global-batch",
            "16",
            "--json",
        ],
    )
    assert none.exit_code == 1


def test_validate_training_json(tmp_path):
    r = runner.invoke(app, ["validate", "training", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert {"rows", "mape"} <= set(d) and len(d["rows"]) >= 45
    t = runner.invoke(app, ["validate", "training"])
    assert t.exit_code == 0 and "mean absolute percentage error" in t.output
    # the defect rows are tagged, summarised apart and explained
    assert "split defect" in t.output and "rows marked defect" in t.output
    defect = [r for r in d["rows"] if r["split"] == "defect"]
    assert defect and d["mape"]["by_split"]["defect"] > d["mape"]["overall"]
    missing = runner.invoke(app, ["validate", "training", "--runs", str(tmp_path / "none.csv")])
    assert missing.exit_code == 2


def test_validate_says_whether_its_accuracy_is_in_sample(tmp_path):
    """The shipped rows are the ones the calibration was fitted on: the output says in-sample; a user's own
    file (here a copy of three shipped rows) is labelled as rows the fit did not use."""
    shipped = json.loads(runner.invoke(app, ["validate", "training", "--json"]).output)
    assert shipped["accuracy"].startswith("in-sample")
    assert "accuracy: in-sample" in runner.invoke(app, ["validate", "training"]).output
    lines = default_runs_path().read_text().splitlines()
    mine = tmp_path / "mine.csv"
    mine.write_text("\n".join(lines[:4]) + "\n")
    theirs = json.loads(runner.invoke(app, ["validate", "training", "--runs", str(mine), "--json"]).output)
    assert not theirs["accuracy"].startswith("in-sample") and "not used in the fit" in theirs["accuracy"]


INFER = [
    "estimate",
    "infer",
    "-m",
    "llama3-70b",
    "-g",
    "b200",
    "--input-len",
    "1024",
    "--output-len",
    "1024",
    "--precision",
    "nvfp4",
    "--kv-precision",
    "fp8",
]


def test_estimate_infer_table_json_and_curve():
    ok = runner.invoke(app, [*INFER, "--concurrency", "64", "--curve"])
    assert ok.exit_code == 0, ok.output
    assert (
        "TPOT ms" in ok.output
        and "throughput vs interactivity" in ok.output
        and "KV-cache budget" in ok.output
    )
    js = runner.invoke(app, [*INFER, "--json", "--curve", "--usd-per-gpu-hour", "3"])
    d = json.loads(js.output)
    assert d["feasible"] and d["output_tokens_per_s_per_gpu"] > 0 and d["usd_per_gpu_hour"] == 3
    assert d["curve"]["points"] and d["curve"]["x"] == "output_tokens_per_s_per_user"


def test_estimate_infer_exit_codes():
    big = runner.invoke(
        app,
        [*INFER[:3], "llama3.1-405b", "-g", "h100-sxm", *INFER[6:10], "--precision", "fp8", "--json"],
    )
    assert big.exit_code == 1
    assert "short by" in json.loads(big.output)["reason"]
    fp4_hopper = runner.invoke(app, [*INFER[:5], "h100-sxm", *INFER[6:], "--json"])
    assert fp4_hopper.exit_code == 1 and "fp4 tensor cores" in json.loads(fp4_hopper.output)["reason"]
    assert runner.invoke(app, [*INFER, "--tp", "0"]).exit_code == 2
    assert runner.invoke(app, [*INFER, "--kv-precision", "int2"]).exit_code == 2
    assert runner.invoke(app, [*INFER[:3], "no-such-model", *INFER[4:]]).exit_code == 2


def test_validate_inference_json_and_table(tmp_path):
    r = runner.invoke(app, ["validate", "inference", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    with open(serving_runs_path(), newline="") as fh:
        shipped = sum(1 for _ in csv.DictReader(fh))
    assert {"rows", "mape"} <= set(d) and len(d["rows"]) + len(d["unpredictable"]) == shipped
    assert len(d["rows"]) >= 21 and len(d["unpredictable"]) <= 13  # 11 unstated lengths/GPUs + 2 offloaded
    assert set(d["mape"]) >= {"overall", "by_gpu", "by_reliability"}
    t = runner.invoke(app, ["validate", "inference"])
    assert t.exit_code == 0 and "mean absolute percentage error" in t.output and "not predicted" in t.output
    missing = runner.invoke(app, ["validate", "inference", "--runs", str(tmp_path / "none.csv")])
    assert missing.exit_code == 2


def test_estimate_train_states_its_assumptions_and_marks_uncalibrated_hardware():
    base = ["estimate", "train", "-m", "llama3-70b", "--tp", "8", "--pp", "2", "--dp", "4"]
    wide = {"COLUMNS": "200"}
    h100 = runner.invoke(app, [*base, "-g", "h100-sxm"], env=wide)
    assert h100.exit_code == 0, h100.output
    text = " ".join(h100.output.split())  # the title may wrap
    assert "global batch 2,048 x 8,192 tokens, bf16" in text and "uncalibrated" not in text
    assert h100.output.count("(bf16") == 1  # the MFU column once under bf16 (headers wrap at spaces)
    mi = runner.invoke(app, [*base, "-g", "mi300x", "--precision", "fp8"], env=wide)
    assert "fp8 (uncalibrated)" in " ".join(mi.output.split()) and "(fp8" in mi.output
