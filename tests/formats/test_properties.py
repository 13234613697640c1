"""Property-based tests (hypothesis, derandomized in CI): error bounds, idempotence, symmetry, scaling,
and every fast path bit-exact to the reference."""

from __future__ import annotations

import math

import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from tenfold.formats import SCHEME_NAMES, decode_e8m0, fake_quantize, fp8, nvfp4, quantize, scheme
from tenfold.formats.blocking import tiles, to_working
from tenfold.formats.codes import decode

from .helpers import same_values

MX = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "mxint8"]
MODES = ["floor", "rceil", "ceil", "even"]


@st.composite
def tensors(draw, min_rank: int = 1, max_rank: int = 3, max_side: int = 70):
    rank = draw(st.integers(min_rank, max_rank))
    shape = tuple(draw(st.integers(1, max_side)) for _ in range(rank))
    seed = draw(st.integers(0, 2**31 - 1))
    spread = draw(st.integers(0, 30))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    if spread:
        x = x * torch.exp2(torch.randint(-spread, spread + 1, shape, generator=g).float())
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16, torch.float16]))
    if dtype == torch.float16:
        x = x.clamp(-6e4, 6e4)
    return x.to(dtype)


def half_ulp_scaled(v: torch.Tensor, emin: int, mbits: int) -> torch.Tensor:
    e = torch.floor(torch.log2(v.abs().clamp(min=1e-38))).clamp(min=emin)
    return torch.exp2(e - mbits - 1)


@given(tensors(), st.sampled_from(MX), st.sampled_from(MODES))
def test_mx_error_within_half_ulp_times_scale(x, name, mode):
    s = scheme(name, scale_mode=mode)
    q = quantize(x, s)
    xw = to_working(x, s)
    t = tiles(xw, s)
    scale = decode_e8m0(q.scales).unsqueeze(-1)
    v = t / scale  # exact: power of two
    qt = tiles(q.dequantize_working(), s)
    err_scaled = (qt - t).abs() / scale
    clipped = v.abs() > s.element.max
    bound = half_ulp_scaled(v, s.element.emin, s.element.mbits)
    assert (err_scaled[~clipped] <= bound[~clipped]).all()
    # clipped elements saturate exactly at the element max; rceil never clips
    assert torch.equal(qt.abs()[clipped], (s.element.max * scale).expand_as(qt)[clipped])
    if mode == "rceil":
        assert not clipped.any()


@given(tensors(min_rank=2), st.sampled_from(["nvfp4", "nvfp4_2d", "fp8_e4m3_tensor", "fp8_e5m2_tensor",
                                              "fp8_e4m3_row", "fp8_e4m3_block1x128"]))  # fmt: skip
def test_fp32_scaled_schemes_round_within_half_ulp(x, name):
    """In the scaled domain every element is within half an ulp of its format, or saturated. FP8 scales
    (fmax / amax) never clip by more than fp32 rounding; NVFP4's E4M3 block scale can round down by up to
    2^-4 relative when it is an E4M3 normal, so its block maximum clips from at most 6 * (1 + 2^-4).
    (Blocks whose E4M3 scale is subnormal lose more; blocks whose scale underflows to 0 flush to zero.)"""
    s = scheme(name)
    xw = to_working(x, s)
    t = tiles(xw, s)
    if s.family == "nvfp4":
        g_enc = nvfp4.global_encode_scale(xw.abs().amax())
        s_blk = nvfp4.block_scales(t.abs().amax(-1), g_enc, s).float()
        enc = torch.clamp(1.0 / (s_blk * (1.0 / g_enc)), max=nvfp4.FLT_MAX)
        v = t * enc.unsqueeze(-1)
        max_clip = 6 * (1 + 2.0**-4)
        normal_scale = (s_blk >= 2.0**-6).unsqueeze(-1).expand_as(v)
        assert (tiles(quantize(x, s).dequantize_working(), s)[(s_blk == 0)] == 0).all()
    else:
        v = t * fp8.scale_from_amax(t.abs().amax(-1), s).unsqueeze(-1)
        max_clip = s.element.max * (1 + 2.0**-22)
    q = decode(tiles(quantize(x, s).element_codes(), s), s.element)
    clipped = v.abs() > s.element.max
    checked = clipped & normal_scale if s.family == "nvfp4" else clipped
    assert (v.abs()[checked] <= max_clip).all()
    assert ((q - v).abs()[~clipped] <= half_ulp_scaled(v, s.element.emin, s.element.mbits)[~clipped]).all()
    assert torch.equal(q.abs()[clipped], torch.full_like(q, s.element.max)[clipped])


@given(tensors(), st.sampled_from([*MX, "fp8_e4m3_row", "fp8_e4m3_block1x128", "fp8_e4m3_block128x128"]),
       st.sampled_from(MODES))  # fmt: skip
def test_quantizing_a_quantized_tensor_returns_it_unchanged(x, name, mode):
    opts = {"scale_mode": mode} if name in MX else {}
    s = scheme(name, **opts)
    x = x.float() if not s.is_2d or x.ndim >= 2 else x.float().reshape(1, -1)
    once = fake_quantize(x, s, backend="reference")
    assume(torch.isfinite(once).all())
    twice = fake_quantize(once, s, backend="reference")
    assert torch.equal(once, twice)


@given(tensors(min_rank=2))
def test_nvfp4_and_tensorwise_requantization_keeps_the_codes(x):
    """Non-power-of-two scales move by an ulp on requantization, so values may move by an ulp; the
    element codes stay. (NVFP4: for blocks whose scale is an E4M3 normal, i.e. within ~2^8 of the
    tensor max; subnormal block scales lose relative precision and may settle one code lower.)"""
    x = x.float()
    for name in ("nvfp4", "fp8_e4m3_tensor"):
        s = scheme(name)
        if name == "nvfp4":
            x = x.clamp(-1, 1) + torch.sign(x) * 0.5  # block maxima within 2^3 of the tensor max
        q1 = quantize(x, s)
        q2 = quantize(q1.dequantize(), s)
        assert torch.equal(q1.element_codes(), q2.element_codes())
        assert torch.allclose(q1.dequantize(), q2.dequantize(), rtol=2.0**-21, atol=0)


@given(tensors(), st.sampled_from(SCHEME_NAMES), st.sampled_from(["nearest", "stochastic", "away"]))
def test_sign_symmetry(x, name, rounding):
    s = scheme(name, rounding=rounding, seed=3)
    if s.is_2d and x.ndim < 2:
        x = x.reshape(1, -1)
    assert torch.equal(fake_quantize(-x, s, backend="reference"), -fake_quantize(x, s, backend="reference"))


@given(tensors(), st.sampled_from(MX), st.sampled_from(MODES), st.integers(-20, 20))
def test_mx_power_of_two_scaling_is_exact(x, name, mode, k):
    s = scheme(name, scale_mode=mode)
    x = x.float()
    amax = x.abs().max().item()
    amin = x.abs()[x != 0].min().item() if (x != 0).any() else 1.0
    assume(amax * 2.0**k < 2.0**100 and amin * 2.0**k > 2.0**-100 and amax < 2.0**100 and amin > 2.0**-100)
    assert torch.equal(
        fake_quantize(x * 2.0**k, s, backend="reference"), fake_quantize(x, s, backend="reference") * 2.0**k
    )


@given(tensors(), st.sampled_from(SCHEME_NAMES), st.sampled_from(["nearest", "stochastic", "away"]),
       st.booleans(), st.integers(0, 2))  # fmt: skip
def test_fused_path_bit_exact_to_reference(x, name, rounding, hadamard, axis_choice):
    opts: dict = {"rounding": rounding, "seed": 17}
    base = scheme(name)
    if hadamard and base.family in ("mx", "nvfp4") and not base.is_2d:
        opts["hadamard"] = True
    if not base.is_2d and base.family != "tensor":
        opts["axis"] = -1 - (axis_choice % x.ndim)
    if base.is_2d and x.ndim < 2:
        x = x.reshape(1, -1)
    s = scheme(name, **opts)
    ref = fake_quantize(x, s, backend="reference", offset=5)
    fused = fake_quantize(x, s, backend="eager", offset=5)
    assert ref.dtype == x.dtype and ref.shape == x.shape
    assert same_values(ref, fused)


def test_bound_helper_sanity():
    assert half_ulp_scaled(torch.tensor([1.0]), -6, 3).item() == 2.0**-4
    assert math.isclose(half_ulp_scaled(torch.tensor([300.0]), -6, 3).item(), 16.0)
