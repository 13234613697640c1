"""The automatic precision policy: budgets, cost models, the TOML file, convert() and `tenfold policy`."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from tenfold.cli.main import app
from tenfold.engine import QuantLinear, convert
from tenfold.engine.policy import PrecisionPolicy, auto_policy, gemm_seconds, linear_flops
from tenfold.perf import load_hardware

DELTAS = {  # loss increase with each layer alone in a format
    "a": {"nvfp4": 0.001, "mxfp8": 0.0001},
    "b": {"nvfp4": 0.050, "mxfp8": 0.0002},
    "c": {"nvfp4": 0.004, "mxfp8": 0.0300},
    "d": {"nvfp4": 0.002, "mxfp8": 0.0001},
}
FLOPS = {"a": 100.0, "b": 100.0, "c": 100.0, "d": 300.0}


def test_fraction_budget_takes_the_least_sensitive_flops_first():
    assert auto_policy(DELTAS, FLOPS, fp4_flop_fraction=0.5).layers["a"] == "mxfp8"  # d alone is 50 %
    p = auto_policy(DELTAS, FLOPS, fp4_flop_fraction=0.6)
    # per FLOP: d 6.7e-6, a 1e-5, c 4e-5, b 5e-4 -> d (300) then a (100) reach 400/600 >= 60 %
    assert p.layers == {"a": "nvfp4", "b": "mxfp8", "c": "bf16", "d": "nvfp4"}  # c's mxfp8 costs > 1 %
    assert p.fp4_flop_fraction(FLOPS) == pytest.approx(4 / 6)
    assert p.meta["fp4_flop_fraction_reached"] == pytest.approx(4 / 6, abs=1e-6)
    # proxy times: bf16 16 bits, mxfp8 8.25, nvfp4 4.5 per FLOP
    want = 600 * 16 / (400 * 4.5 + 100 * 8.25 + 100 * 16)
    assert p.meta["expected_gemm_speedup_vs_bf16"] == pytest.approx(want, rel=1e-4)
    assert p.expected_speedup() == pytest.approx(want)
    assert auto_policy(DELTAS, FLOPS, fp4_flop_fraction=0.0).layers["d"] == "mxfp8"
    assert set(auto_policy(DELTAS, FLOPS, fp4_flop_fraction=1.0).layers.values()) == {"nvfp4"}


def test_loss_budget_is_respected_and_spent_where_it_saves_most():
    zero = auto_policy(DELTAS, FLOPS, max_loss_increase=0.0)
    assert set(zero.layers.values()) == {"bf16"}
    p = auto_policy(DELTAS, FLOPS, max_loss_increase=0.004)
    spent = sum(DELTAS[n][f] for n, f in p.layers.items() if f != "bf16")
    assert spent <= 0.004 + 1e-12
    assert p.layers["d"] == "nvfp4" and p.layers["b"] != "nvfp4"  # d: the most FLOPs for little loss
    big = auto_policy(DELTAS, FLOPS, max_loss_increase=1.0)
    assert set(big.layers.values()) == {"nvfp4"}
    assert big.expected_speedup() > p.expected_speedup() > zero.expected_speedup() == pytest.approx(1.0)


def test_gpu_cost_model_uses_the_catalog_peaks():
    h = load_hardware("b200")
    assert gemm_seconds(1e15, "nvfp4", "b200") == pytest.approx(1e15 / h.peak("fp4"))
    p = auto_policy(DELTAS, FLOPS, fp4_flop_fraction=1.0, gpu="b200")
    assert p.meta["expected_gemm_speedup_vs_bf16"] == pytest.approx(h.peak("fp4") / h.peak("bf16"), rel=1e-4)
    with pytest.raises(ValueError, match="no fp4"):
        gemm_seconds(1.0, "nvfp4", "h100-sxm")


def test_bad_inputs():
    with pytest.raises(ValueError, match="exactly one budget"):
        auto_policy(DELTAS, FLOPS)
    with pytest.raises(ValueError, match=r"\[0, 1\], got 1.5"):
        auto_policy(DELTAS, FLOPS, fp4_flop_fraction=1.5)
    with pytest.raises(ValueError, match="different layers"):
        auto_policy(DELTAS, {"a": 1.0}, fp4_flop_fraction=0.5)
    with pytest.raises(ValueError, match="one of"):
        PrecisionPolicy(layers={"a": "int3"})


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 32))


def test_toml_round_trip_and_convert_applies_it(tmp_path):
    m = _mlp()
    flops = linear_flops(m, tokens=8)
    assert flops["0"] == 6 * 64 * 128 * 8
    layers = {"0": "nvfp4", "2": "mxfp8", "4": "bf16"}
    pp = PrecisionPolicy(layers=layers, flops=flops, meta={"note": 'a "q"'})
    path = pp.save(tmp_path / "p.toml")
    back = PrecisionPolicy.load(path)
    assert back == pp
    x = torch.randn(8, 64)
    ref = m(x)
    rep = convert(m, str(path))
    assert [(d.name, d.converted) for d in rep.layers] == [("0", True), ("2", True), ("4", False)]
    assert rep.layers[2].reason == "the policy keeps it in bf16"
    assert isinstance(m[0], QuantLinear) and m[0].recipe.name == "nvfp4"
    assert isinstance(m[2], QuantLinear) and m[2].recipe.name == "mxfp8"
    assert isinstance(m[4], nn.Linear) and not isinstance(m[4], QuantLinear)
    out = m(x)
    assert not torch.equal(out, ref) and torch.allclose(out, ref, atol=0.2)
    with pytest.raises(ValueError, match="does not have"):
        convert(_mlp(), PrecisionPolicy(layers={"9": "nvfp4"}))
    with pytest.raises(ValueError, match="not found"):
        convert(_mlp(), tmp_path / "missing.toml")


def test_policy_cli(tmp_path):
    p = auto_policy(DELTAS, FLOPS, fp4_flop_fraction=0.5)
    path = p.save(tmp_path / "p.toml")
    res = CliRunner().invoke(app, ["policy", str(path), "--json", "--gpu", "gb200"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["layers"] == p.layers
    assert out["expected_gemm_speedup"] == pytest.approx(p.expected_speedup("gb200"))
    res = CliRunner().invoke(app, ["policy", str(path)])
    assert res.exit_code == 0 and "expected GEMM speedup" in res.output
    assert CliRunner().invoke(app, ["policy", str(tmp_path / "nope.toml")]).exit_code == 2
