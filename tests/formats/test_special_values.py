"""NaN, Inf, zero, subnormal and huge-outlier blocks, per scheme family, as the chosen policy says."""

from __future__ import annotations

import pytest
import torch

from tenfold.formats import SCHEME_NAMES, fake_quantize, quantize, scheme
from tenfold.formats.blocking import to_working
from tenfold.formats.hadamard import hadamard_matrix, rotate

from .helpers import same_values


def block_rows() -> torch.Tensor:
    x = torch.randn(6, 32)
    x[0] = 0.0  # zero block
    x[1] = torch.randn(32) * 2.0**-135  # fp32-subnormal block
    x[2, 3] = 1e30  # huge outlier
    x[3, 4] = float("nan")
    x[4, 5] = float("inf")
    x[5, 6] = -float("inf")
    return x


def test_mx_special_blocks():
    x = block_rows()
    q = quantize(x, scheme("mxfp8_e4m3"))
    codes = q.scales.view(torch.uint8)[:, 0].tolist()
    y = q.dequantize()
    assert codes[0] == 0 and (y[0] == 0).all()
    assert codes[1] == 0  # 2^-127: the smallest scale; elements land in E4M3's subnormal range
    assert ((y[1] - x[1]).abs() <= 2.0 ** (-9 - 127 - 1)).all()  # within half the E4M3 subnormal step
    assert abs(y[2, 3].item() / 1e30 - 1) < 0.07
    assert (y[2, torch.arange(32) != 3] == 0).all()  # the rest of the outlier's block flushes to zero
    assert codes[3:] == [255, 255, 255] and torch.isnan(y[3:]).all()


def test_nvfp4_special_blocks():
    x = block_rows()[:3].repeat(1, 1)
    y = fake_quantize(x, scheme("nvfp4"))
    # one 1e30 outlier sets the tensor scale: all other blocks' E4M3 scales underflow to zero
    assert (y[:, :16][0] == 0).all() and (y[1] == 0).all()
    assert abs(y[2, 3].item() / 1e30 - 1) < 0.01
    z = fake_quantize(block_rows()[3:4], scheme("nvfp4"))
    assert torch.isnan(z).all()  # NaN makes the tensor amax NaN, so every block scale is NaN
    q = quantize(block_rows()[4:5], scheme("nvfp4"))
    # TE: an Inf tensor amax makes the global encode scale 0, replaced by 1, so the codes and block scales
    # stay finite (the Inf block saturates to 6 * 448); but the decode scale amax / 2688 is Inf, so the
    # whole tensor dequantizes to non-finite values, as TE's GEMM alpha would.
    assert q.scales.view(torch.uint8)[0, 0].item() == 0x7E  # 448
    assert (~torch.isfinite(q.dequantize())).all()


def test_fp8_special_values():
    x = block_rows()
    y = fake_quantize(x[:3], scheme("fp8_e4m3_row"))
    assert (y[0] == 0).all()
    assert torch.allclose(y[1], x[1], rtol=0.07)
    assert abs(y[2, 3].item() / 1e30 - 1) < 0.07
    assert torch.isnan(fake_quantize(x[3:4], scheme("fp8_e4m3_row"))).all()


def test_custom_hadamard_sign_vector():
    ones = (1,) * 16
    h = hadamard_matrix(ones)
    assert torch.equal(h, h.T) and torch.equal(h[0], torch.full((16,), 0.25))
    x = torch.randn(3, 32)
    a = fake_quantize(x, scheme("nvfp4", hadamard=True, hadamard_signs=ones))
    b = fake_quantize(x, scheme("nvfp4", hadamard=True))
    assert not torch.equal(a, b)
    assert torch.allclose(rotate(rotate(x, ones), ones, inverse=True), x, atol=1e-6)


# --- one Inf in a tensor, per overflow policy (tenfold.formats.e8m0.NonFinite), every scheme ------------


def with_inf(sign: float = 1.0) -> torch.Tensor:
    x = torch.randn(32, 256, generator=torch.Generator().manual_seed(1))
    x[3, 5] = sign * float("inf")
    return x


def inf_block_mask(s, shape: tuple[int, int]) -> torch.Tensor:
    """True on the elements that share the Inf's block scale (MX, NVFP4) or the Inf alone (FP8)."""
    m = torch.zeros(shape, dtype=torch.bool)
    if s.family.value in ("mx", "nvfp4"):
        r, c = s.block
        m[(3 // r) * r : (3 // r + 1) * r, (5 // c) * c : (5 // c + 1) * c] = True
    else:
        m[3, 5] = True
    return m


def paths(x: torch.Tensor, s) -> list[torch.Tensor]:
    """Reference, fused eager path and the engine's GEMM operand: the same bits by contract."""
    from tenfold.engine.quant import operand

    return [
        fake_quantize(x, s, backend="reference"),
        fake_quantize(x, s, backend="eager"),
        operand(x, s, 1, backend="eager"),
    ]


@pytest.mark.parametrize("name", SCHEME_NAMES)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_satfinite_inf_saturates_and_leaves_other_blocks_alone(name, sign):
    s = scheme(name, nonfinite="satfinite")
    x = with_inf(sign)
    ref, *others = paths(x, s)
    assert all(same_values(ref, o) for o in others), name
    clean = x.clone()
    clean[3, 5] = 0.0
    # the scales shared beyond the Inf's block come from the finite values: nothing else moves
    outside = ~inf_block_mask(s, tuple(x.shape))
    assert same_values(ref[outside], fake_quantize(clean, s, backend="reference")[outside]), name
    q = quantize(x, s)
    marker = torch.zeros_like(x)
    marker[3, 5] = 1.0
    top = q.element_codes().reshape(-1)[to_working(marker, s).reshape(-1).argmax()]
    inf_code = quantize(torch.full((1, 32), sign * s.element.max), s).element_codes().view(-1)[0]
    assert top == inf_code  # the Inf took the largest finite element code of its sign
    if s.family.value != "mx":  # MX: 448 * 2^127 (TE's 0xFE scale) overflows fp32 on decode, see test_e8m0
        # row 3, columns 0-15 share the Inf's scale in every scheme; the Inf is the largest value there
        assert torch.isfinite(ref).all() and ref[3, 5] * sign >= ref[3, :16].abs().max()


@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_nan_policy_inf_and_nan_everywhere(name):
    s = scheme(name)
    x = with_inf()
    ref, *others = paths(x, s)
    assert all(same_values(ref, o) for o in others), name
    block = inf_block_mask(s, tuple(x.shape))
    if s.family.value == "mx":
        assert torch.isnan(ref[block]).all() and torch.isfinite(ref[~block]).all()  # OCP: NaN block scale
    elif s.family.value == "nvfp4":
        assert (~torch.isfinite(ref)).all()  # TE's reference: decode scale amax / 2688 = Inf
    else:
        assert ref[3, 5] == s.element.max and torch.isfinite(ref).all()  # TE: Inf amax -> scale 1
    for policy in ("nan", "satfinite"):  # NaN stays NaN under both
        y = x.clone()
        y[3, 5] = float("nan")
        assert all(torch.isnan(p[3, 5]) for p in paths(y, scheme(name, nonfinite=policy)))


@pytest.mark.parametrize("name", ["nvfp4", "nvfp4_2d", "fp8_e4m3_row"])
def test_satfinite_inf_compiled_matches_reference(name):
    s = scheme(name, nonfinite="satfinite")
    x = with_inf()
    assert same_values(fake_quantize(x, s, backend="reference"), fake_quantize(x, s, backend="compiled"))
