"""`tenfold compare` and `tenfold fleet plan`: tables, --json, --report, exit codes 0 / 1 / 2.
(`tenfold claims --json` runs in test_claims.py.)"""

import json

from typer.testing import CliRunner

from tenfold.cli.compare import parse_count
from tenfold.cli.main import app

runner = CliRunner()
SMALL = [
    "compare",
    "-m",
    "llama3-8b",
    "--tokens",
    "1T",
    "-n",
    "64",
    "--global-batch",
    "256",
    "--gpus",
    "h100-sxm,b200",
]


def test_compare_table_json_and_report(tmp_path):
    out = runner.invoke(app, [*SMALL, "--tornado"])
    assert out.exit_code == 0, out.output
    assert "h100-sxm" in out.output and "b200" in out.output and "speedup" in out.output
    assert "sensitivity" in out.output
    js = runner.invoke(app, [*SMALL, "--json", "--report", str(tmp_path / "r.html")])
    d = json.loads(js.output)
    rows = {r["hardware"]: r for r in d["summary"]}
    assert rows["h100-sxm"]["speedup"] == 1.0 and rows["b200"]["speedup"] > 1
    page = (tmp_path / "r.html").read_text()
    assert page.startswith("<!doctype html>") and "<table>" in page and "b200" in page


def test_compare_overrides_reach_the_money():
    a = json.loads(runner.invoke(app, [*SMALL, "--json"]).output)["summary"][0]
    b = json.loads(
        runner.invoke(
            app,
            [
                *SMALL,
                "--json",
                "--rent-basis",
                "ondemand",
                "--grid",
                "france",
                "--own",
                "life_years=6",
                "--price",
                "h100-sxm:capex_usd=40000",
            ],
        ).output
    )
    b = b["summary"][0]
    assert b["rent_usd_per_gpu_hour"] == 6.88 and b["own_usd"] < a["own_usd"] and b["co2_t"] < a["co2_t"]


def test_compare_exit_codes():
    infeasible = runner.invoke(
        app, ["compare", "-m", "llama3.1-405b", "--tokens", "1T", "-n", "8", "--gpus", "h100-sxm", "--json"]
    )
    assert infeasible.exit_code == 1
    assert not json.loads(infeasible.output)["rows"][0]["feasible"]
    for bad in (
        ["compare", "-m", "no-such-model", "--tokens", "1T", "-n", "8"],
        ["compare", "-m", "llama3-8b", "-n", "8"],  # no --tokens
        ["compare", "--tokens", "1T"],  # no --model
        ["compare", "-m", "llama3-8b", "--tokens", "1T", "-n", "8", "--gpus", "nope"],
        ["compare", "-m", "llama3-8b", "--tokens", "1T", "-n", "8", "--own", "pue"],
    ):
        assert runner.invoke(app, bad).exit_code == 2, bad


def test_parse_count():
    assert parse_count("15.6T") == 15.6e12 and parse_count("300B") == 300e9 and parse_count("2e12") == 2e12


def test_fleet_plan_cli(tmp_path):
    f = tmp_path / "f.toml"
    f.write_text(
        '[[pool]]\nname = "hop"\ngpu = "h100-sxm"\ncount = 64\n\n'
        '[[job]]\nname = "a"\nkind = "training"\nmodel = "llama3-8b"\ntokens = 1e11\nglobal_batch = 256\n'
        "deadline_days = 10\n"
    )
    out = runner.invoke(app, ["fleet", "plan", str(f)])
    assert out.exit_code == 0, out.output
    assert "plans side by side" in out.output
    d = json.loads(runner.invoke(app, ["fleet", "plan", str(f), "--json"]).output)
    assert d["best"]["feasible"] and d["best"]["assignments"][0]["pool"] == "hop"
    f.write_text(f.read_text().replace("deadline_days = 10", "deadline_days = 0.01"))
    assert runner.invoke(app, ["fleet", "plan", str(f)]).exit_code == 1
    assert runner.invoke(app, ["fleet", "plan", str(tmp_path / "missing.toml")]).exit_code == 2


COMPARE_70B = ["compare", "-m", "llama3-70b", "--tokens", "15T", "-n", "256", "-g", "h100-sxm,b200"]


def test_compare_exports_each_gpus_plan_as_launch_arguments():
    r = runner.invoke(app, [*COMPARE_70B, "--export", "megatron", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    by_gpu = {e["gpu"]: e for e in d["export"]}
    assert set(by_gpu) == {"h100-sxm", "b200"}
    rows = {row["hardware"]: row for row in d["comparisons"][0]["rows"]} if "comparisons" in d else None
    rows = rows or {row["hardware"]: row for row in d["rows"]}
    for gpu, e in by_gpu.items():
        layout = rows[gpu]["estimate"]["layout"]
        assert f"--tensor-model-parallel-size {layout['tp']}" in e["text"]
        assert f"--pipeline-model-parallel-size {layout['pp']}" in e["text"]
    bad = runner.invoke(app, [*COMPARE_70B, "--export", "deepspeed"])
    assert bad.exit_code == 2 and "deepspeed" in bad.output


def test_compare_headroom_leaves_memory_and_is_checked():
    """The headroom is memory each plan leaves free: it shows in the plan's `other` memory, the plan still
    fits the GPU, and more headroom can only remove plans, never speed one up."""
    base = json.loads(runner.invoke(app, [*COMPARE_70B, "--json"]).output)
    roomy = runner.invoke(app, [*COMPARE_70B, "--headroom", "40", "--json"])
    assert roomy.exit_code == 0, roomy.output
    roomy = json.loads(roomy.output)
    for b, r in zip(base["rows"], roomy["rows"], strict=True):
        if r["feasible"]:
            mem = r["estimate"]["memory"]
            assert mem["other_GiB"] >= 40 and mem["total_GiB"] <= mem["capacity_GiB"]
            assert r["tokens_per_s_per_gpu"] <= b["tokens_per_s_per_gpu"] * (1 + 1e-9)
    for bad in (["--headroom", "-1"], ["--headroom", "5000"]):
        r = runner.invoke(app, [*COMPARE_70B, *bad])
        assert r.exit_code == 2 and "headroom" in r.output
