"""Recipe.backward_override (TE's recipe field) and the mxfp8_2d recipe (32x32 MXFP8 weight blocks)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tenfold.engine import (
    BACKWARD_OVERRIDES,
    GemmQuant,
    QuantLinear,
    Recipe,
    convert,
    quantized_linear_reference,
    recipe,
)
from tenfold.engine.gemm import SR_STRIDE
from tenfold.engine.native import mx_row_scales
from tenfold.engine.quant import operand, reference_operand
from tenfold.formats import decode_e8m0, quantize, scheme
from tenfold.formats.codes import decode
from tenfold.formats.elements import E4M3

from ..formats.helpers import same_values

RECIPES = ["nvfp4", "mxfp8", "mxfp8_2d", "fp8_delayed", "fp8_block"]


def run(name: str, override: str | None, quant_backend: str = "auto", backend: str = "auto"):
    torch.manual_seed(0)
    r = recipe(name, backward_override=override)
    layer = QuantLinear(96, 64, bias=False, recipe=r, seed=7, quant_backend=quant_backend, backend=backend)
    if layer.scale is not None:  # a non-trivial delayed scale per tensor
        layer.scale.copy_(torch.tensor([40.0, 300.0, 2000.0]))
    layer.sr_step.fill_(3)
    x = (torch.randn(80, 96) * 2).requires_grad_()
    out = layer(x)
    dy = torch.randn_like(out)
    out.backward(dy)
    return layer, x, out, dy


def fprop_operand(t: torch.Tensor, s, scale: torch.Tensor | None) -> torch.Tensor:
    """x or W as the fprop GEMM multiplies it, from the plain reference quantizer (blocks along axis 1)."""
    if s is None:
        return t.float()
    return reference_operand(t, s, 1, scale=None if scale is None else scale.reshape(1), offset=3 * SR_STRIDE)


@pytest.mark.parametrize("override", BACKWARD_OVERRIDES)
@pytest.mark.parametrize("name", RECIPES)
def test_backward_gemms_use_the_overridden_operands(name, override):
    layer, x, out, dy = run(name, override)
    p, w, sc = layer.plan, layer.weight.detach(), layer.scale
    assert (p.dgrad_a, p.dgrad_b, p.wgrad_a, p.wgrad_b) == (None, None, None, None)
    assert p.backward_override == override
    xq = fprop_operand(x.detach(), p.fprop_a, None if sc is None else sc[0])
    wq = fprop_operand(w, p.fprop_b, None if sc is None else sc[1])
    assert same_values(out.detach(), torch.mm(xq, wq.t()))
    # plain products: the original operands, or x and W as fprop quantized them; dy is never quantized
    xb, wb = (x.detach(), w) if override == "high_precision" else (xq, wq)
    assert same_values(x.grad, torch.mm(dy, wb))
    assert same_values(layer.weight.grad, torch.mm(dy.t(), xb))
    got = quantized_linear_reference(x.detach(), w, dy, p, scales=sc, offset=3 * SR_STRIDE)
    assert same_values(got[0], out.detach()) and same_values(got[1], x.grad)
    assert same_values(got[2], layer.weight.grad)


@pytest.mark.parametrize("override", BACKWARD_OVERRIDES)
def test_quantization_backends_agree_under_the_override(override):
    runs = [run("nvfp4", override, quant_backend=b) for b in ("reference", "eager")]
    (_, x0, o0, _), (_, x1, o1, _) = runs
    assert same_values(o0, o1) and same_values(x0.grad, x1.grad)
    assert same_values(runs[0][0].weight.grad, runs[1][0].weight.grad)


def test_the_override_changes_the_gradients():
    """The three modes give three different dgrads (so the tests above can tell them apart)."""
    grads = [run("mxfp8", o)[1].grad for o in (None, *BACKWARD_OVERRIDES)]
    assert not torch.equal(grads[0], grads[1]) and not torch.equal(grads[1], grads[2])
    assert not torch.equal(grads[0], grads[2])


def test_native_fprop_keeps_its_values_for_a_dequantized_backward():
    """CPU per-tensor FP8 runs fprop natively; the dequantized backward still gets the fprop values."""
    layer, x, _, dy = run("fp8_current", "dequantized", backend="native")
    assert layer.plan.native
    wq = fprop_operand(layer.weight.detach(), layer.plan.fprop_b, None)
    xq = fprop_operand(x.detach(), layer.plan.fprop_a, None)
    assert same_values(x.grad, torch.mm(dy, wq))
    assert same_values(layer.weight.grad, torch.mm(dy.t(), xq))


def test_nvfp4_dequantized_recipe_and_describe():
    r = recipe("nvfp4", backward_override="dequantized")
    assert r.backward_override == "dequantized" and r.quantizes
    assert r.operand("fprop", "b").name == "nvfp4_2d"
    assert all(r.operand(g, s) is None for g in ("dgrad", "wgrad") for s in ("a", "b"))
    assert not r.uses_stochastic_rounding  # SR was on the gradients only
    d = r.describe()
    assert d["backward_override"] == "dequantized"
    assert d["dgrad"] == {"a": "high precision", "b": "fprop-quantized W: nvfp4_2d"}
    assert d["wgrad"] == {"a": "high precision", "b": "fprop-quantized x: nvfp4"}
    h = recipe("mxfp8", backward_override="high_precision").describe()
    assert h["backward_override"] == "high_precision" and h["wgrad"]["b"] == "high precision"
    assert recipe("mxfp8").describe()["backward_override"] is None
    assert recipe("mxfp8").describe()["dgrad"]["b"] == "mxfp8_e4m3 (scale=rceil)"


def test_backward_override_validation():
    choices = r"backward_override='fp32' is not one of: None, high_precision, dequantized"
    with pytest.raises(ValueError, match=choices):
        recipe("mxfp8", backward_override="fp32")
    rot = scheme("nvfp4", hadamard=True)
    with pytest.raises(ValueError, match="Hadamard"):
        Recipe(name="r", fprop=GemmQuant(a=rot, b=rot), backward_override="dequantized")
    Recipe(name="r", fprop=GemmQuant(a=rot, b=rot), backward_override="high_precision")  # nothing reused


# ---- mxfp8_2d -------------------------------------------------------------------------------------------


def test_mxfp8_2d_recipe():
    r = recipe("mxfp8_2d")
    w, act = r.operand("fprop", "b"), r.operand("fprop", "a")
    assert w.name == "mxfp8_e4m3_2d" and w.block == (32, 32) and w.scale_mode == "rceil"
    assert r.operand("dgrad", "b") == w and act.name == "mxfp8_e4m3" and act.scale_mode == "rceil"
    assert {r.operand("wgrad", s) for s in ("a", "b")} == {act}
    layer = QuantLinear(96, 64, recipe=r)
    assert layer.plan.reuse_w and not QuantLinear(96, 64, recipe=recipe("mxfp8")).plan.reuse_w


@pytest.mark.parametrize("backend", ["eager", pytest.param("compiled", marks=pytest.mark.slow)])
def test_mxfp8_2d_operand_is_the_same_along_either_axis(backend):
    w = torch.randn(70, 100) * torch.exp2(torch.randint(-8, 8, (70, 1)).float())
    s = scheme("mxfp8_e4m3_2d", scale_mode="rceil")
    ref = reference_operand(w, s, 1)
    assert same_values(reference_operand(w, s, 0), ref)
    for axis in (0, 1):
        assert same_values(operand(w, s, axis, backend=backend), ref)


def test_mxfp8_2d_row_scales_for_the_native_gemm_reproduce_the_values():
    w = torch.randn(70, 100) * torch.exp2(torch.randint(-8, 8, (70, 1)).float())
    q = quantize(w, scheme("mxfp8_e4m3_2d", scale_mode="rceil"))
    rows = mx_row_scales(q, 70)
    assert rows.shape == (70, 4) and rows.dtype == torch.float8_e8m0fnu
    per_element = decode_e8m0(rows.view(torch.uint8)).repeat_interleave(32, 1)
    vals = decode(q.element_codes()[:70], E4M3) * per_element
    assert same_values(vals[:, :100], q.dequantize(torch.float32))


def test_convert_checks_both_dims_of_the_32x32_weight_blocks():
    model = nn.Sequential(nn.Linear(96, 64), nn.Linear(64, 48))
    report = convert(model, "mxfp8_2d")
    ok, bad = report.layers
    assert ok.converted and not bad.converted
    assert "48" in bad.reason and "mxfp8_e4m3_2d" in bad.reason
