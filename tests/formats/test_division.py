"""`div` gives fp32's correctly rounded quotient however a device or compiler rewrites the division.

The rewrites are reproduced here on the CPU: a division by a constant done as a multiplication by the
(fp64) reciprocal, as eager CUDA and TorchInductor's GPU lowering do. Independent reference: numpy's fp32
true division."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tenfold.formats.division import div

DIVISORS = (2688.0, 1536.0, 6.0, 448.0, 57344.0, 3.0, 0.1)


def _samples(n: int = 200_000) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    mant = torch.rand(n, generator=g) + 0.5
    exp = torch.randint(-100, 100, (n,), generator=g).to(torch.float32)
    return (mant * torch.exp2(exp)).to(torch.float32)


@pytest.mark.parametrize("c", DIVISORS)
def test_equals_numpy_fp32_division(c: float) -> None:
    a = _samples()
    c32 = float(np.float32(c))
    want = a.numpy() / np.float32(c32)
    assert np.array_equal(div(a, c32).numpy(), want)
    assert np.array_equal(div(c32, a).numpy(), np.float32(c32) / a.numpy())
    assert np.array_equal(div(a, torch.full_like(a, c32)).numpy(), want)


@pytest.mark.parametrize("c", DIVISORS)
def test_reciprocal_rewrite_keeps_the_bits(c: float) -> None:
    """What a GPU does to `x / const` in fp64 (x * (1/const)) still rounds to the fp32 quotient, while
    the same rewrite in fp32 does not (which is why the plain division differed on an H200)."""
    a = _samples()
    c32 = float(np.float32(c))
    want = a.numpy() / np.float32(c32)
    rewritten64 = (a.to(torch.float64) * (1.0 / c32)).to(torch.float32)
    assert np.array_equal(rewritten64.numpy(), want)
    rewritten32 = a * torch.tensor(1.0 / c32, dtype=torch.float32)
    assert not np.array_equal(rewritten32.numpy(), want)  # none of DIVISORS is a power of two


def test_special_values() -> None:
    a = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 3.4e38, 1e-45])
    want = a.numpy() / np.float32(2688.0)
    got = div(a, 2688.0).numpy()
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))
    big = torch.tensor([3.0e38])
    assert torch.isinf(div(big, 1e-3)).item()  # overflow rounds to Inf as in fp32
    z = div(1.0, torch.tensor([0.0, -0.0]))
    assert z.tolist() == [float("inf"), float("-inf")]


def test_needs_a_tensor() -> None:
    with pytest.raises(TypeError):
        div(1.0, 2.0)  # type: ignore[arg-type]


@pytest.mark.gpu
def test_cuda_matches_cpu() -> None:
    a = _samples()
    for c in DIVISORS:
        c32 = float(np.float32(c))
        assert torch.equal(div(a.cuda(), c32).cpu(), div(a, c32))
        assert torch.equal(div(c32, a.cuda()).cpu(), div(c32, a))
        compiled = torch.compile(lambda x, c=c32: div(x, c))
        assert torch.equal(compiled(a.cuda()).cpu(), div(a, c32))
