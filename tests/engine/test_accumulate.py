"""GEMM accumulator models: the vectorised path bit-exact to plain loops, fp32 unchanged, recipe wiring."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from tenfold.engine import QuantLinear, accumulate, quantized_linear_reference, recipe
from tenfold.engine.accumulate import (
    ACCUMULATOR_NAMES,
    AccumulatorModel,
    matmul,
    matmul_reference,
    round_mantissa,
    round_mantissa_,
    round_mantissa_reference,
)
from tenfold.engine.gemm import GemmPlan
from tenfold.engine.quant import reference_operand

from ..formats.helpers import same_values

NEAREST = AccumulatorModel(name="nearest10", mantissa_bits=10, rounding="nearest_even", k_step=16)


def fp8_grid(rows: int, cols: int, seed: int) -> torch.Tensor:
    """E4M3 values times a power-of-two scale per row: what a dequantized FP8 operand holds."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, cols, generator=g) * 3).to(torch.float8_e4m3fn).float()
    return x * 2.0 ** torch.randint(-4, 5, (rows, 1), generator=g).float()


@pytest.mark.parametrize("shape", [(3, 70, 5), (4, 200, 3), (2, 256, 4), (2, 20, 3), (1, 0, 2)])
@pytest.mark.parametrize("model", ["hopper_fp8", NEAREST])
@pytest.mark.parametrize("promote", [0, None, 32, 64, 128])
def test_vectorised_accumulation_is_bit_exact_to_the_loops(shape, model, promote):
    m, k, n = shape
    if isinstance(model, AccumulatorModel) and promote and promote % model.k_step:
        pytest.skip("interval not a multiple of this model's k-step")
    a, b = fp8_grid(m, k, 1), fp8_grid(n, k, 2).t()
    got = matmul(a, b, model, promote)
    want = matmul_reference(a, b, model, promote)
    assert same_values(got, want)
    out = torch.full((m, n), float("nan"))
    assert matmul(a, b, model, promote, out=out) is out and same_values(out, want)


@pytest.mark.parametrize("budget", [1, 30, 45])
def test_chunked_step_sums_give_the_same_bits(monkeypatch, budget):
    """Large GEMMs hold the k-step sums a chunk at once (1, 2 or 3 of the 7 k-steps here): same result."""
    a, b = fp8_grid(3, 200, 7), fp8_grid(5, 200, 8).t()
    want = matmul(a, b, "hopper_fp8", 64)
    monkeypatch.setattr(accumulate, "STEP_SUMS_BUDGET", budget)
    assert same_values(matmul(a, b, "hopper_fp8", 64), want)
    assert same_values(matmul(a, b, "hopper_fp8", 64), matmul_reference(a, b, "hopper_fp8", 64))


def test_general_fp32_operands_match_the_loops_too():
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(3, 300, generator=g), torch.randn(300, 4, generator=g)
    for p in (0, 128):
        assert same_values(matmul(a, b, "hopper_fp8", p), matmul_reference(a, b, "hopper_fp8", p))


def test_fp32_is_exactly_torch_mm():
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(17, 300, generator=g), torch.randn(300, 9, generator=g)
    assert torch.equal(matmul(a, b, "fp32", 128), torch.mm(a, b))
    assert torch.equal(matmul(a, b), torch.mm(a, b))
    out = torch.empty(17, 9)
    assert matmul(a, b, "fp32", out=out) is out and torch.equal(out, torch.mm(a, b))


@pytest.mark.parametrize("bits", [1, 3, 13, 23])
@pytest.mark.parametrize("rounding", ["toward_zero", "nearest_even"])
def test_round_mantissa_matches_frexp(bits, rounding):
    g = torch.Generator().manual_seed(bits)
    f64 = torch.float64
    x = torch.randn(2000, generator=g, dtype=f64) * 2.0 ** torch.randint(-60, 60, (2000,), generator=g)
    ties = torch.tensor([1 + 2.0**-bits * k / 2 for k in range(9)], dtype=f64)  # odd k: exact halfway cases
    special = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, -1.7976931348623157e308], dtype=f64)
    x = torch.cat([x, ties, -ties, special])
    got = round_mantissa(x, bits, rounding)
    want = torch.tensor([round_mantissa_reference(v, bits, rounding) for v in x.tolist()], dtype=f64)
    in_place = round_mantissa_(x.clone(), bits, rounding)  # what matmul uses: inf and quiet NaN survive too
    keep = ~want.isnan()
    for y in (got, in_place):
        assert torch.equal(y.isnan(), want.isnan())
        assert torch.equal(y[keep].view(torch.int64), want[keep].view(torch.int64))


def test_truncation_loses_magnitude_and_promotion_recovers_most_of_it():
    """All-positive products: truncation can only shrink the sum, and promoting every 128 elements keeps the
    narrow accumulator small, so its error is far below the unpromoted one (DeepSeek-V3 §3.3.2)."""
    g = torch.Generator().manual_seed(5)
    a = torch.rand(4, 4096, generator=g).to(torch.float8_e4m3fn).float()
    b = torch.rand(4096, 4, generator=g).to(torch.float8_e4m3fn).float()
    exact = a.double() @ b.double()
    never = matmul(a, b, "hopper_fp8", 0).double()
    every = matmul(a, b, "hopper_fp8", 128).double()
    assert bool((never <= exact).all()) and bool((every <= exact).all())
    err_never = ((exact - never) / exact).max().item()
    err_every = ((exact - every) / exact).max().item()
    assert 1e-4 < err_never < 0.05
    assert err_every < err_never / 8


def test_recipe_carries_the_accumulator():
    r = recipe("fp8_block", accumulate="hopper_fp8", promote_interval=0)
    assert (r.accumulate, r.promote_interval) == ("hopper_fp8", 0)
    assert r.describe()["accumulate"] == "hopper_fp8 (never promoted)"
    assert recipe("fp8_block", accumulate="hopper_fp8").describe()["accumulate"].endswith("every 128)")
    assert recipe("fp8_current").describe()["accumulate"] == "fp32"
    assert recipe("fp8_current", accumulate="hopper_fp8", promote_interval=None).promote_interval == 0
    with pytest.raises(ValueError, match="hopper_fp8") as e:
        recipe("fp8_block", accumulate="fp16")
    assert all(n in str(e.value) for n in ACCUMULATOR_NAMES)
    for bad in (-128, 100, 1.5):
        with pytest.raises(ValueError, match="promote_interval"):
            recipe("fp8_block", accumulate="hopper_fp8", promote_interval=bad)
    with pytest.raises(ValueError, match="rounding"):
        AccumulatorModel(name="x", mantissa_bits=10, rounding="up")


@pytest.mark.parametrize("promote", [0, 128])
def test_linear_layer_gemms_use_the_accumulator(promote):
    """All three GEMMs of the layer, and the reference, accumulate with the model: bit-exact to the loops."""
    rec = recipe("fp8_block", accumulate="hopper_fp8", promote_interval=promote)
    torch.manual_seed(0)
    layer = QuantLinear(160, 24, bias=False, recipe=rec, quant_backend="reference")
    p: GemmPlan = layer.plan
    assert (p.accumulate, p.promote_interval) == ("hopper_fp8", promote)
    x = torch.randn(40, 160, requires_grad=True)
    out = layer(x)
    dy = torch.randn_like(out)
    out.backward(dy)
    w = layer.weight.detach()
    ref = quantized_linear_reference(x.detach(), w, dy, p)
    assert same_values(out.detach(), ref[0])
    assert same_values(x.grad, ref[1]) and same_values(layer.weight.grad, ref[2])
    fp32 = quantized_linear_reference(x.detach(), w, dy, replace(p, accumulate="fp32"))
    assert not torch.equal(fp32[0], ref[0])  # the model changes the result
    # the operands quantized by the plain reference and multiplied by the plain loops give the same bits
    xq = reference_operand(x.detach(), p.fprop_a, 1)
    wq = reference_operand(w, p.fprop_b, 1)
    assert same_values(out.detach(), matmul_reference(xq, wq.t(), "hopper_fp8", promote))
    dyq, wq0 = reference_operand(dy, p.dgrad_a, 1), reference_operand(w, p.dgrad_b, 0)
    assert same_values(x.grad, matmul_reference(dyq, wq0, "hopper_fp8", promote))
