"""Stochastic rounding: unbiased (mean converges like 1/sqrt(N)), better than RNE on average,
reproducible by seed, and its noise a pure function of (seed, position)."""

from __future__ import annotations

import math

import pytest
import torch

from tenfold.formats import E2M1, Rounding, fake_quantize, quantize, round_to_grid, scheme, sr_noise


def values(n: int = 4096) -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    return torch.rand(n, generator=g) * 5.5 + 0.25  # inside E2M1's range, mostly off the grid


def mean_of_draws(x: torch.Tensor, n: int) -> torch.Tensor:
    acc = torch.zeros_like(x)
    for k in range(n):
        noise = sr_noise(x.shape, seed=11, offset=k * x.numel())
        acc += round_to_grid(x, E2M1, Rounding.STOCHASTIC, noise)
    return acc / n


def test_mean_converges_like_one_over_sqrt_n():
    x = values()
    err = {n: (mean_of_draws(x, n) - x).pow(2).mean().sqrt().item() for n in (16, 256)}
    ratio = err[16] / err[256]
    assert 3.0 < ratio < 5.3, f"error should shrink ~sqrt(256/16) = 4x, got {ratio:.2f} ({err})"
    assert err[256] < 0.05


def test_mean_of_draws_beats_round_to_nearest():
    """TE tests/pytorch/nvfp4/test_nvfp4_sr_quantize.py: the mean of N SR dequantizations has lower
    RMSE than one RNE quantization."""
    x = values()
    rne = (round_to_grid(x, E2M1) - x).pow(2).mean().sqrt()
    sr = (mean_of_draws(x, 100) - x).pow(2).mean().sqrt()
    assert sr < rne / 3


def test_nvfp4_sr_unbiased_through_the_scheme():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 64, generator=g)
    s = scheme("nvfp4", rounding="stochastic", seed=5)
    draws = torch.stack([fake_quantize(x, s, offset=k * x.numel()) for k in range(200)])
    rn = fake_quantize(x, scheme("nvfp4"))
    bias = (draws.mean(0) - x).abs().mean()
    assert bias < (rn - x).abs().mean() / 4


def test_same_seed_same_bits_different_seed_different_bits():
    x = torch.randn(33, 70)
    for name in ("nvfp4", "mxfp4", "mxfp8_e5m2", "fp8_e5m2_tensor"):
        a = quantize(x, scheme(name, rounding="stochastic", seed=42))
        b = quantize(x, scheme(name, rounding="stochastic", seed=42))
        c = quantize(x, scheme(name, rounding="stochastic", seed=43))
        assert torch.equal(a.codes.view(torch.uint8), b.codes.view(torch.uint8))
        assert not torch.equal(a.codes.view(torch.uint8), c.codes.view(torch.uint8))
        d = quantize(x, scheme(name, rounding="stochastic", seed=42), offset=x.numel())
        assert not torch.equal(a.codes.view(torch.uint8), d.codes.view(torch.uint8))


def test_noise_is_a_function_of_position_only():
    full = sr_noise((1000,), seed=9)
    assert torch.equal(sr_noise((10, 30), seed=9, offset=100).flatten(), full[100:400])
    assert torch.equal(sr_noise((4,), seed=2**40 + 9), sr_noise((4,), seed=2**40 + 9))
    assert not torch.equal(sr_noise((4,), seed=2**40 + 9), sr_noise((4,), seed=9))


def test_noise_is_uniform():
    u = sr_noise((1 << 20,), seed=1)
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 2e-3
    assert abs(u.var().item() - 1 / 12) < 1e-3
    counts = torch.histc(u, bins=64, min=0, max=1)
    expected = u.numel() / 64
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    assert chi2 < 63 + 5 * math.sqrt(2 * 63)  # mean 63, sd sqrt(126): a 5-sigma bound


def test_stochastic_rounding_stays_on_the_two_neighbours():
    x = torch.tensor([2.4] * 1000)
    q = round_to_grid(x, E2M1, Rounding.STOCHASTIC, sr_noise(x.shape, seed=0))
    assert set(q.tolist()) == {2.0, 3.0}
    assert q.mean().item() == pytest.approx(2.4, abs=0.05)
    with pytest.raises(ValueError, match="noise"):
        round_to_grid(x, E2M1, Rounding.STOCHASTIC)
