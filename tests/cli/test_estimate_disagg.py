"""`tenfold estimate disagg`: table and JSON, infeasible pools exit 1, bad input exits 2 naming the input."""

import json

import pytest
from typer.testing import CliRunner

from tenfold.cli.main import app

runner = CliRunner()
BASE = ["estimate", "disagg", "-m", "deepseek-v3", "-g", "b200", "--input-len", "2000", "--output-len", "500"]
POOLS = ["--precision", "nvfp4", "--kv-precision", "fp8", "--prefill", "1,8,8", "--decode", "1,8,8"]


def test_table_and_json():
    r = runner.invoke(app, [*BASE, *POOLS, "--rps", "50"], terminal_width=100)
    assert r.exit_code == 0, r.output
    assert "prefill : decode GPUs" in r.output and "KV transfer" in r.output
    j = runner.invoke(app, [*BASE, *POOLS, "--rps", "50", "--tpot-ms", "40", "--json"])
    assert j.exit_code == 0, j.output
    d = json.loads(j.output)
    assert d["requests_per_s"] == 50.0 and d["tpot_ms"] <= 40.0 and d["meets_targets"]
    assert d["num_gpus"] == d["prefill_gpus"] + d["decode_gpus"]
    assert d["kv_transfer"]["link"] == "network"  # 8 + 8 GPUs do not fit one 8-GPU NVLink domain


def test_redundant_experts_flag_lets_ep48_run():
    wide = ["--prefill", "1,8,8", "--decode", "1,48,48", "--precision", "nvfp4", "--kv-precision", "fp8"]
    r = runner.invoke(app, [*BASE[:5], "gb200", *BASE[6:], *wide, "--json"])
    assert r.exit_code == 1 and "does not divide 256 experts" in " ".join(r.output.split())
    ok = runner.invoke(app, [*BASE[:5], "gb200", *BASE[6:], *wide, "--redundant-experts", "32", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["kv_transfer"]["link"] == "scale-up"  # 56 GPUs inside one NVL72


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--prefill", "1,8"], "--prefill"),
        (["--decode", "a,b,c"], "--decode"),
        (["--rps", "-1"], "--rps"),
        (["--kv-link", "pcie"], "--kv-link"),
        (["--tpot-ms", "-3"], "--tpot-ms"),
        (["--rps", "5", "--concurrency", "10"], "not both"),
    ],
)
def test_bad_input_exits_2_naming_it(extra, named):
    r = runner.invoke(app, [*BASE, *POOLS, *extra], terminal_width=80)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert named in " ".join(r.output.split())


def test_output_len_below_two_is_rejected():
    r = runner.invoke(app, [*BASE[:-1], "1", *POOLS], terminal_width=80)
    assert r.exit_code == 2 and "--output-len" in r.output
