"""Each recipe's three GEMMs quantize their operands as the recipe says, bit for bit."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tenfold.engine import RECIPE_NAMES, QuantLinear, quantized_linear_reference, recipe
from tenfold.engine.gemm import SR_STRIDE
from tenfold.formats import AmaxHistory, fake_quantize, quantize
from tenfold.formats.blocking import from_working

from ..formats.helpers import same_values


def direct(x: torch.Tensor, s, axis: int, scale: torch.Tensor | None, offset: int) -> torch.Tensor:
    """An operand straight from the formats core (None: high precision)."""
    if s is None:
        return x.float()
    if axis == 0 and not (s.is_2d or s.family.value == "tensor"):
        s = s.with_options(axis=0)
    if not s.hadamard and s.scaling.value != "delayed":
        return fake_quantize(x.detach(), s, offset=offset, backend="reference")
    # rotated operands stay rotated (the GEMM multiplies them so); fake_quantize would rotate back
    state = None
    if s.scaling.value == "delayed":
        state = AmaxHistory(length=1, fp8_max=s.element.max)
        state.scale = scale.reshape(()).clone()
    q = quantize(x.detach(), s, state=state, offset=offset)
    return from_working(q.dequantize_working(), s, tuple(x.shape))


def run_layer(name: str, backend: str = "auto", seed: int = 0):
    torch.manual_seed(seed)
    layer = QuantLinear(96, 64, bias=True, recipe=recipe(name), seed=7, quant_backend=backend)
    if layer.scale is not None:  # a non-trivial delayed scale per tensor
        layer.scale.copy_(torch.tensor([40.0, 300.0, 2000.0]))
    layer.sr_step.fill_(3)
    x = (torch.randn(2, 40, 96) * 2).requires_grad_()
    out = layer(x)
    dy = torch.randn_like(out)
    out.backward(dy)
    return layer, x, out, dy


@pytest.mark.parametrize("name", RECIPE_NAMES)
def test_gemms_quantize_operands_as_the_recipe_says(name):
    layer, x, out, dy = run_layer(name)
    r, p = recipe(name), layer.plan
    scales = layer.scale
    x2, dy2, w = x.detach().reshape(-1, 96), dy.reshape(-1, 64), layer.weight.detach()
    off = 3 * SR_STRIDE

    def sc(t):
        return None if scales is None else scales[{"x": 0, "w": 1, "dy": 2}[t]]

    # the plan carries the recipe's schemes, with this module's seeds for stochastic rounding
    for plan_s, rec_s in zip(
        (p.fprop_a, p.fprop_b, p.dgrad_a, p.dgrad_b, p.wgrad_a, p.wgrad_b), r.all_schemes(), strict=True
    ):
        if rec_s is None:
            assert plan_s is None
        else:
            assert plan_s.with_options(seed=rec_s.seed) == rec_s
    want_out = torch.mm(direct(x2, p.fprop_a, 1, sc("x"), off), direct(w, p.fprop_b, 1, sc("w"), off).t())
    want_dx = torch.mm(direct(dy2, p.dgrad_a, 1, sc("dy"), off), direct(w, p.dgrad_b, 0, sc("w"), off))
    want_dw = torch.mm(direct(dy2, p.wgrad_a, 0, sc("dy"), off).t(), direct(x2, p.wgrad_b, 0, sc("x"), off))
    if r.quantizes:
        assert same_values(out.detach().reshape(-1, 64), want_out + layer.bias.detach())
        assert same_values(x.grad.reshape(-1, 96), want_dx)
        assert same_values(layer.weight.grad, want_dw)
    else:  # the baseline is nn.Linear itself
        ref = nn.functional.linear(x.detach(), w, layer.bias.detach())
        assert torch.equal(out.detach(), ref)
    assert torch.equal(layer.bias.grad, dy2.sum(0))
    got = quantized_linear_reference(x2, w, dy2, p, scales=scales, offset=off)
    if r.quantizes:
        assert same_values(got[0], want_out) and same_values(got[1], want_dx) and same_values(got[2], want_dw)


@pytest.mark.parametrize("name", ["nvfp4", "fp8_delayed", "mxfp8"])
def test_every_quantization_backend_gives_the_same_bits(name):
    runs = [run_layer(name, backend=b) for b in ("reference", "eager", "auto")]
    for _, x, out, _ in runs[1:]:
        assert same_values(out, runs[0][2]) and same_values(x.grad, runs[0][1].grad)
    for layer, *_ in runs[1:]:
        assert same_values(layer.weight.grad, runs[0][0].weight.grad)


def test_stochastic_rounding_streams_differ_per_step_and_module():
    a, *_ = run_layer("nvfp4")
    b, *_ = run_layer("nvfp4")
    assert torch.equal(a.weight.grad, b.weight.grad)  # same seed and step: same bits
    torch.manual_seed(0)
    layer = QuantLinear(96, 64, recipe=recipe("nvfp4"), seed=7)
    x, dy = torch.randn(80, 96), torch.randn(80, 64)  # dy off the FP4 grid, so rounding is random
    grads = []
    for _ in range(2):
        layer.weight.grad = None
        layer(x).backward(dy)
        grads.append(layer.weight.grad.clone())
    assert int(layer.sr_step) == 2
    assert not torch.equal(grads[0], grads[1])  # the step counter moved the noise
    with torch.no_grad():
        layer(x)
    assert int(layer.sr_step) == 2  # evaluation does not consume noise
