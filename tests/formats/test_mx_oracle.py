"""MX schemes against torchao's pure-PyTorch `to_mx`: bit-exact where the semantics agree.

Where they differ, each difference has its own test that shows it:
* torchao FLOOR/CEIL/EVEN divide by max(scale, 2^-126), so a block with scale code 0 (amax below ~2^-118)
  gets elements twice too small; we divide by the exact 2^-127 (OCP MX v1.0 §6.3).
* torchao FLOOR maps an Inf amax to code 247 (it only checks for NaN); OCP and we give NaN (0xFF).
* torchao's eager RCEIL fallback computes ceil(log2(amax / max)) with a float log2, which rounds to an
  integer just above a power of two; we use the bit rule of cuBLAS/TE (mantissa != 0 => round up).
"""

from __future__ import annotations

import warnings

import pytest
import torch

from tenfold.formats import quantize, scheme

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.kernels import unpack_uint4
    from torchao.prototype.mx_formats.mx_tensor import to_mx

ELEMENTS = {
    "mxfp8_e4m3": torch.float8_e4m3fn,
    "mxfp8_e5m2": torch.float8_e5m2,
    "mxfp6_e2m3": "fp6_e2m3",
    "mxfp6_e3m2": "fp6_e3m2",
    "mxfp4": torch.float4_e2m1fn_x2,
}
MODES = {"floor": ScaleCalculationMode.FLOOR, "ceil": ScaleCalculationMode.CEIL,
         "even": ScaleCalculationMode.EVEN, "rceil": ScaleCalculationMode.RCEIL}  # fmt: skip


def torchao_codes(x: torch.Tensor, name: str, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    scale, data = to_mx(x, ELEMENTS[name], 32, MODES[mode])
    if name == "mxfp4":
        data = unpack_uint4(data)
    return scale.view(torch.uint8), data.view(torch.uint8)


def make_inputs(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(1234)
    base = torch.randn(64, 256, generator=g)
    # spread block magnitudes over many decades and plant outliers, zeros and exact powers of two
    base *= torch.exp2(torch.randint(-40, 40, (64, 8), generator=g).float()).repeat_interleave(32, 1)
    base[3, 5] = 1e4
    base[7, 32:64] = 0
    base[9, 64:96] = 2.0 ** torch.arange(-16, 16).float()
    base[11, 0:32] = 448.0
    return base.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", list(ELEMENTS))
def test_bit_exact_against_torchao(name, mode, dtype):
    x = make_inputs(dtype)
    ref_scale, ref_codes = torchao_codes(x, name, mode)
    q = quantize(x, scheme(name, scale_mode=mode))
    assert torch.equal(q.scales.view(torch.uint8), ref_scale)
    assert torch.equal(q.element_codes().to(torch.uint8), ref_codes)


def test_difference_tiny_blocks_torchao_clamps_the_scale_to_the_min_normal():
    x = torch.full((32,), 2.0**-130)  # amax -> floor code 0 (2^-127)
    ref_scale, ref_codes = torchao_codes(x, "mxfp8_e4m3", "floor")
    q = quantize(x, scheme("mxfp8_e4m3", scale_mode="floor"))
    assert ref_scale.tolist() == q.scales.view(torch.uint8).tolist() == [0]
    # ours: x / 2^-127 = 2^-3 exactly (code 0x20); torchao: x / 2^-126 = 2^-4 (code 0x18)
    assert q.codes.view(torch.uint8)[0].item() == 0x20 and ref_codes[0].item() == 0x18
    assert q.dequantize()[0].item() == 2.0**-130  # exact round trip, as OCP's X = 2^-127 gives


def test_difference_inf_block_under_floor():
    x = torch.ones(32)
    x[0] = float("inf")
    ref_scale, _ = torchao_codes(x, "mxfp8_e4m3", "floor")
    assert ref_scale.item() == 247  # exponent field of Inf (128) - 8, clamped: not NaN
    assert quantize(x, scheme("mxfp8_e4m3")).scales.view(torch.uint8).item() == 255  # OCP: NaN scale


def test_difference_rceil_float_log2_just_above_a_power_of_two():
    # amax / 448 = 2^20 * (1 + 2^-23): the cuBLAS rule rounds up to 2^21; fp32 log2 rounds to 20.0
    amax = torch.tensor([2.0**20 * 448.0]).view(torch.int32) + 1
    x = torch.zeros(32)
    x[0] = amax.view(torch.float32)
    ref_scale, _ = torchao_codes(x, "mxfp8_e4m3", "rceil")
    ours = quantize(x, scheme("mxfp8_e4m3", scale_mode="rceil")).scales.view(torch.uint8)
    assert ref_scale.item() == 127 + 20 and ours.item() == 127 + 21
