"""The automatic precision policy: budgets, cost models, the TOML file, convert() and `tenfold policy`."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from tenfold.cli.main import app
from tenfold.engine import QuantLinear, convert
from tenfold.engine.autoprecision.policy import PrecisionPolicy, auto_policy, gemm_seconds, linear_flops
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


def test_fraction_budget_is_the_exact_least_loss_cover():
    # the reference GPT's shape: per block qkv 3, proj 1, fc1 6, fc2 3 units of FLOPs; 4 blocks
    shape = {"qkv": 3.0, "proj": 1.0, "fc1": 6.0, "fc2": 3.0}
    flops = {f"{b}.{k}": v * 98304.0 for b in range(4) for k, v in shape.items()}
    names = sorted(flops)
    total = sum(flops.values())
    gen = torch.Generator().manual_seed(0)
    for trial in range(3):
        deltas = {n: {"nvfp4": float(torch.rand(1, generator=gen)) * 1e-3, "mxfp8": 0.0} for n in flops}
        for target in (0.25, 0.5, 0.75):
            p = auto_policy(deltas, flops, fp4_flop_fraction=target, mxfp8_tolerance=-1.0)
            fp4 = {n for n, f in p.layers.items() if f == "nvfp4"}
            assert p.fp4_flop_fraction(flops) >= target - 1e-12
            cost = sum(deltas[n]["nvfp4"] for n in fp4)
            best = min(  # exhaustive over all 2^16 subsets
                sum(deltas[n]["nvfp4"] for k, n in enumerate(names) if m >> k & 1)
                for m in range(1 << len(names))
                if sum(flops[n] for k, n in enumerate(names) if m >> k & 1) >= target * total - 1e-6
            )
            assert cost == pytest.approx(best, rel=1e-12, abs=1e-15), (trial, target)
    # the greedy order (increase per FLOP) would take a large last layer and overshoot 50 % by 8 units
    deltas = {n: {"nvfp4": 1e-4 * flops[n] / 98304.0, "mxfp8": 0.0} for n in flops}  # same cost per FLOP
    deltas["0.fc1"]["nvfp4"] = 1e-9
    p = auto_policy(deltas, flops, fp4_flop_fraction=0.5, mxfp8_tolerance=-1.0)
    assert p.fp4_flop_fraction(flops) == pytest.approx(0.5)  # among equally good covers, the smallest


def test_fraction_budget_falls_back_to_greedy_for_non_integral_flops():
    flops = {"a": 0.5, "b": 1.25, "c": 2.0}
    deltas = {n: {"nvfp4": d, "mxfp8": 0.0} for n, d in zip(flops, (0.1, 0.2, 0.01), strict=True)}
    p = auto_policy(deltas, flops, fp4_flop_fraction=0.5, mxfp8_tolerance=-1.0)
    assert p.layers == {"a": "bf16", "b": "bf16", "c": "nvfp4"}
