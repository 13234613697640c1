"""NaN, Inf, zero, subnormal and huge-outlier blocks, per scheme family, as the chosen policy says."""

from __future__ import annotations

import torch

from tenfold.formats import fake_quantize, quantize, scheme
from tenfold.formats.hadamard import hadamard_matrix, rotate


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
