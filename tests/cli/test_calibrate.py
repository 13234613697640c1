"""`tenfold calibrate training` and `--calibration` (issue 15, part 3): a calibration fitted on runs slower
than the shipped model predicts lowers the estimates, one fitted on faster runs raises them; bad rows and bad
calibration files exit 2 with the reason and write nothing."""

import csv
import json
import tomllib
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from tenfold.cli.main import app
from tenfold.perf.calibration import load_calibration
from tenfold.perf.validation.calibrate import SHARED_SCALE, calibrate_on_runs, fit_top, offset_warnings
from tenfold.perf.validation.training import case_from_row, default_runs_path, load_cases, predict_case

runner = CliRunner()
ROWS = ("mbridge-llama3-70b-h100-fp8", "mbridge-llama31-405b-h100-fp8", "mbridge-llama3-8b-h100-fp8")
PLAN = ["estimate", "train", "-m", "llama3-70b", "-g", "h100-sxm", "--tp", "8", "--pp", "4", "--dp", "2"]
PLAN += ["--precision", "fp8", "--global-batch", "128", "--json"]


def write_runs(path, factor: float, edit=None) -> None:
    """Three shipped H100 FP8 rows whose measured value is the shipped model's prediction times `factor`
    (below 1: the user's runs are slower than the model says); `edit(rows)` may spoil them."""
    with open(default_runs_path(), newline="") as fh:
        reader = csv.DictReader(fh)
        fields = list(reader.fieldnames)
        rows = [r for r in reader if r["id"] in ROWS]
    cal = load_calibration()
    for r in rows:
        r["value"] = repr(predict_case(case_from_row(r), cal).predicted * factor)
    if edit:
        edit(rows)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def calibrate(tmp_path, factor: float, name: str):
    runs, out = tmp_path / f"{name}.csv", tmp_path / f"{name}.toml"
    write_runs(runs, factor)
    r = runner.invoke(
        app, ["calibrate", "training", "--runs", str(runs), "--out", str(out), "--iters", "40", "--json"]
    )
    assert r.exit_code == 0, r.output
    return out, json.loads(r.output)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cal")
    return {f: calibrate(tmp, f, f"runs{f}") for f in (0.7, 1.3)}


def tokens_per_s(extra: list[str]) -> float:
    r = runner.invoke(app, PLAN + extra)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)["tokens_per_s_per_gpu"]


def test_slower_runs_lower_the_estimate_and_faster_runs_raise_it(fitted):
    shipped = tokens_per_s([])
    slow = tokens_per_s(["--calibration", str(fitted[0.7][0])])
    fast = tokens_per_s(["--calibration", str(fitted[1.3][0])])
    assert slow < 0.9 * shipped
    assert fast > 1.1 * shipped


def test_the_fit_report_and_the_file(fitted):
    path, report = fitted[0.7]
    assert report["mape"]["after"] < report["mape"]["before"] / 2
    assert {r["id"] for r in report["rows"]} == set(ROWS)
    assert all(abs(r["before"] - 1 / 0.7 + 1) < 1e-6 for r in report["rows"])
    status = {p["name"]: p["status"] for p in report["parameters"]}
    # dense H100 rows say nothing of Ampere GEMMs or the MoE dispatcher: both kept and warned about
    assert status["gemm:ampere/16"] == status["moe_layer_overhead_us"] == "unidentified"
    assert status["gemm:hopper/8"] == "fitted"
    assert any("moe_layer_overhead_us" in w for w in report["warnings"])
    cal = load_calibration(path)
    shipped = load_calibration()
    assert cal.gemm("hopper", "8") < shipped.gemm("hopper", "8")
    assert cal.moe_layer_overhead_us == pytest.approx(shipped.moe_layer_overhead_us, abs=1e-3)
    fit = tomllib.loads(path.read_text())["fit"]
    assert fit["rows"] == 3 and fit["source"] == "runs0.7.csv" and fit["date"] and fit["objective"]
    assert "moe_layer_overhead_us" in fit["fixed_parameters"]


def test_the_text_report_names_rows_parameters_and_warnings(tmp_path):
    runs, out = tmp_path / "r.csv", tmp_path / "c.toml"
    write_runs(runs, 0.8)
    r = runner.invoke(
        app,
        ["calibrate", "training", "--runs", str(runs), "--out", str(out), "--iters", "20"],
        terminal_width=120,
    )
    assert r.exit_code == 0, r.output
    for text in (*ROWS, "gemm:hopper/8", "unidentified", "warning:", "written to"):
        assert text in r.output


def _gpu(rows):
    rows[1]["gpu"] = "h100-sxm-typo"


def _layout(rows):
    rows[2]["tp"] = "3"


def _value(rows):
    rows[0]["value"] = ""


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (_gpu, ["mbridge-llama31-405b-h100-fp8", "h100-sxm-typo"]),
        (_layout, ["mbridge-llama3-8b-h100-fp8", "num_gpus"]),
        (_value, ["mbridge-llama3-70b-h100-fp8", "value"]),
    ],
)
def test_a_bad_row_exits_2_naming_it_and_writes_nothing(tmp_path, edit, named):
    runs, out = tmp_path / "r.csv", tmp_path / "c.toml"
    write_runs(runs, 0.8, edit)
    r = runner.invoke(app, ["calibrate", "training", "--runs", str(runs), "--out", str(out)])
    assert r.exit_code == 2, r.output
    flat = " ".join(r.output.split())
    for text in named:
        assert text in flat
    assert not out.exists()


def test_an_output_in_a_missing_folder_exits_2(tmp_path):
    runs = tmp_path / "r.csv"
    write_runs(runs, 0.8)
    r = runner.invoke(
        app, ["calibrate", "training", "--runs", str(runs), "--out", str(tmp_path / "no" / "c.toml")]
    )
    assert r.exit_code == 2 and "--out" in r.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["r.csv"]


def bad_files(tmp, good: str) -> list[tuple[str, str]]:
    """(path, text the error must contain) for each kind of bad calibration file."""
    out = []
    for name, text, named in (
        ("malformed.toml", "[gemm_efficiency\n", "not valid TOML"),
        ("bounds.toml", good.replace("hbm_efficiency = ", "hbm_efficiency = 1.7 #"), "hbm_efficiency"),
        (
            "missing.toml",
            good.replace("attention_efficiency =", "# attention_efficiency ="),
            "attention_efficiency",
        ),
        ("gemm.toml", good.replace('"hopper/8" = ', '"hopper/8" = 0.05 #'), "hopper/8"),
    ):
        (tmp / name).write_text(text)
        out.append((str(tmp / name), named))
    return [*out, (str(tmp / "absent.toml"), "no such file")]


COMMANDS = [
    PLAN,
    ["search", "train", "-m", "llama3-8b", "-g", "h100-sxm", "-n", "8", "--precision", "fp8", "--json"],
    ["compare", "-m", "llama3-8b", "--tokens", "1T", "-n", "16", "--gpus", "h100-sxm", "--json"],
    ["validate", "training", "--json"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_bad_calibration_file_exits_2_with_the_reason(tmp_path, command, fitted):
    for path, named in bad_files(tmp_path, fitted[0.7][0].read_text()):
        r = runner.invoke(app, [*command, "--calibration", path])
        flat = " ".join(r.output.split())
        assert r.exit_code == 2, (path, r.output)
        assert "--calibration" in flat and named in flat, (path, r.output)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_calibration_changes_every_command_output(command, fitted):
    plain = runner.invoke(app, command)
    mine = runner.invoke(app, [*command, "--calibration", str(fitted[0.7][0])])
    assert plain.exit_code == mine.exit_code == 0, mine.output
    a, b = json.loads(plain.output), json.loads(mine.output)
    if command[0] == "validate":
        assert b["mape"]["overall"] != a["mape"]["overall"]
        assert "your calibration" in b["accuracy"] and "in-sample" in a["accuracy"]
    elif command[0] == "compare":
        assert b["rows"][0]["tokens_per_s_per_gpu"] < a["rows"][0]["tokens_per_s_per_gpu"]
        assert any("user calibration" in n for n in b["notes"])
    elif command[0] == "search":
        assert b["top"][0]["tokens_per_s_per_gpu"] < a["top"][0]["tokens_per_s_per_gpu"]
        assert "your calibration" in b["calibration"]
    else:
        assert b["tokens_per_s_per_gpu"] < a["tokens_per_s_per_gpu"]


def test_compare_refuses_a_training_calibration_with_serve(fitted):
    """With --serve the file must be an inference calibration (`tenfold calibrate inference`): a training
    one lacks the serving parameters and exits 2 naming them."""
    r = runner.invoke(app, ["compare", "-m", "llama3-8b", "--serve", "--calibration", str(fitted[0.7][0])])
    flat = " ".join(r.output.split())
    assert r.exit_code == 2 and "--calibration" in flat and "moe_efficiency" in flat


def test_rows_that_disagree_keep_the_start_calibration(tmp_path):
    """The same plan measured 30 % slower and 40 % faster than the model: a fit on either row predicts the
    other worse than the shipped calibration does, so the held-out check fits nothing."""

    def twins(rows):
        twin = dict(rows[0], id="twin")
        twin["value"] = repr(float(rows[0]["value"]) * 2.0)  # 0.7 x 2 = 1.4 x the prediction
        rows[1:] = [twin]

    runs, out = tmp_path / "r.csv", tmp_path / "c.toml"
    write_runs(runs, 0.7, twins)
    r = runner.invoke(
        app, ["calibrate", "training", "--runs", str(runs), "--out", str(out), "--iters", "40", "--json"]
    )
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert not [p for p in report["parameters"] if p["status"] == "fitted"]
    assert any("keeps the start values" in w for w in report["warnings"])
    assert load_calibration(out) == load_calibration()


def test_shared_gemm_scale_moves_every_gemm_efficiency_by_one_factor():
    """The one-parameter candidate keeps the published ratios between GPUs and formats."""
    start = load_calibration()
    rows = [c for c in load_cases() if c.source == "torchtitan-2024" and c.split == "fit"]
    slower = [replace(c, measured=c.measured * 0.85) for c in rows]  # the user's stack runs 15 % slower
    cal, names = fit_top(slower, start, SHARED_SCALE, iters=40, restarts=1)
    ratios = {k: cal.gemm_efficiency[k] / v for k, v in start.gemm_efficiency.items()}
    assert names == [f"gemm:{k}" for k in sorted(start.gemm_efficiency)]
    free = [r for k, r in ratios.items() if cal.gemm_efficiency[k] > cal.GEMM_BOUNDS[0] + 1e-9]  # not clipped
    assert len(free) >= 6 and max(free) - min(free) < 1e-9
    assert ratios["hopper/16"] < 0.95  # slower runs: lower efficiencies
    assert cal.attention_efficiency == start.attention_efficiency  # nothing else moves


def test_rows_marked_holdout_are_still_the_users_to_fit_on():
    """A user's CSV in the shipped schema may carry `split = holdout`; the shipped fit skips such rows, a
    user calibration must not (it used to fit on nothing and return a calibration moved at random)."""
    rows = [c for c in load_cases() if c.source == "torchtitan-2024"][:4]
    mine = [replace(c, measured=c.measured * 0.7, split="holdout") for c in rows]  # 30 % slower stack
    result = calibrate_on_runs(mine, iters=40, restarts=1)
    assert result.mape_before > 0.5
    # what remains is the four rows' own spread under the shipped calibration (-0 % to +16 %), which no
    # shared factor removes; fitting on nothing would leave the 56 % standing
    assert result.mape_after < 0.1
    assert not any("no shared offset to learn" in w for w in result.warnings)  # a real offset


def test_rows_within_the_scatter_of_the_start_are_warned_about():
    """Rows whose mean error is inside two standard errors of the shipped per-run spread carry no offset a fit
    can learn (docs/perf.md, "Does it help?"): the report says so; rows 30 % off, or a calibration without a
    measured spread, get no such warning."""
    start = load_calibration()
    rows = [c for c in load_cases() if c.source == "torchtitan-2024" and c.split == "fit"][:4]
    near = [
        replace(predict_case(c, start), measured=predict_case(c, start).predicted / f)
        for c, f in zip(rows, (1.08, 0.97, 1.05, 1.02), strict=True)
    ]
    (warning,) = offset_warnings(near, start)
    geometric = (1.08 * 0.97 * 1.05 * 1.02) ** 0.25 - 1  # predictions over measurements
    assert f"{geometric:+.1%} off" in warning and "4 row(s)" in warning
    far = [replace(r, measured=r.predicted * 0.7) for r in near]
    assert offset_warnings(far, start) == []
    assert offset_warnings(near, replace(start, uncertainty=None)) == []
