"""QuantLinear under torch.compile: one graph, the same bits as eager, buffers updated the same way."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tenfold.engine import convert, update_scaling

from ..formats.helpers import same_values


def mlp(bias: bool = False) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128, bias=bias), nn.ReLU(), nn.Linear(128, 64, bias=bias))


def two_steps(model: nn.Module, run: nn.Module) -> list[torch.Tensor]:
    out = []
    g = torch.Generator().manual_seed(1)
    for _ in range(2):
        x = torch.randn(48, 64, generator=g)
        y = run(x)
        y.backward(torch.randn(y.shape, generator=g))
        out += [y.detach(), *(p.grad.clone() for p in model.parameters())]
        for p in model.parameters():
            p.grad = None
        update_scaling(model)
    return out + [b.clone() for b in model.buffers()]


# 20-40 s of compiling each; the formats' own compiled kernels stay in the default suite
SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    ("name", "bias"),
    [
        ("nvfp4", False),
        ("fp8_delayed", False),
        ("fp8_delayed", True),
        pytest.param("nvfp4", True, marks=SLOW),
        pytest.param("mxfp8", False, marks=SLOW),
        pytest.param("mxfp8", True, marks=SLOW),
    ],
)
def test_compiled_model_matches_eager_bit_for_bit(name, bias):
    """Without biases every output, gradient and buffer is bit-identical; a bias gradient is a plain
    sum over tokens, which inductor may reduce in another order (checked to fp32 rounding)."""
    eager = mlp(bias)
    convert(eager, name)
    want = two_steps(eager, eager)
    model = mlp(bias)
    convert(model, name)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)  # fullgraph: no graph breaks anywhere
    got = two_steps(model, compiled)
    assert len(got) == len(want)
    for a, b in zip(want, got, strict=True):
        if not a.is_floating_point():
            assert torch.equal(a, b)
        elif bias:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        else:
            assert same_values(a, b)
