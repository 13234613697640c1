"""MXFP8 with 32x32 blocks (TE `enable_2d_quantization`) and FP6 packed four elements per three bytes."""

from __future__ import annotations

import math
import struct

import pytest
import torch

from tenfold.formats import decode_e8m0, fake_quantize, quantize, scheme
from tenfold.formats.codes import decode, pack_fp6, unpack_fp6
from tenfold.formats.elements import E4M3

from .helpers import same_values

# ---- MXFP8 2-D: a plain reference, one 32x32 tile at a time -------------------------------------------


def _fp32_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def _scale_code(amax: float, mode: str) -> int:
    """E8M0 code of a tile (normal, non-zero amax): OCP MX v1.0 §6.3 FLOOR, or TE/cuBLAS RCEIL."""
    if mode == "floor":
        _, exp = math.frexp(amax)  # amax = m * 2^exp, m in [0.5, 1): floor(log2(amax)) = exp - 1
        return (exp - 1) - 8 + 127  # E4M3 emax = 8
    rcp = struct.unpack("<f", struct.pack("<f", 1.0 / 448.0))[0]
    bits = _fp32_bits(amax * rcp)  # a product of two fp32 values is exact in a double; pack rounds to fp32
    field, mant = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    return min(field + (1 if mant and field != 0xFE else 0), 0xFE)


def reference_mxfp8_2d(x: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(element codes of the zero-padded matrix, E8M0 code per 32x32 tile), tile by tile."""
    rows, cols = x.shape
    pr, pc = -(-rows // 32) * 32, -(-cols // 32) * 32
    xp = torch.zeros(pr, pc)
    xp[:rows, :cols] = x.float()
    codes = torch.zeros(pr, pc, dtype=torch.uint8)
    scales = torch.zeros(pr // 32, pc // 32, dtype=torch.uint8)
    for bi in range(pr // 32):
        for bj in range(pc // 32):
            tile = xp[bi * 32 : (bi + 1) * 32, bj * 32 : (bj + 1) * 32]
            code = _scale_code(float(tile.abs().max()), mode)
            scales[bi, bj] = code
            scaled = (tile * 2.0 ** (127 - code)).clamp(-448.0, 448.0)  # exact power-of-two scaling
            codes[bi * 32 : (bi + 1) * 32, bj * 32 : (bj + 1) * 32] = scaled.to(torch.float8_e4m3fn).view(
                torch.uint8
            )
    return codes, scales


def tile_inputs(rows: int = 70, cols: int = 100) -> torch.Tensor:
    """Tiles whose magnitudes span many binades, an outlier and exact powers of two; padded both ways."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(rows, cols, generator=g)
    mags = torch.exp2(torch.randint(-20, 20, (3, 4), generator=g).float())
    x *= mags.repeat_interleave(32, 0).repeat_interleave(32, 1)[:rows, :cols]
    x[3, 5] = 3e4
    x[40, 33:65] = 2.0 ** torch.arange(-16, 16).float()
    return x


@pytest.mark.parametrize("mode", ["floor", "rceil"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_mxfp8_2d_bit_exact_to_a_plain_tile_loop(mode, dtype):
    x = tile_inputs().to(dtype)
    s = scheme("mxfp8_e4m3_2d", scale_mode=mode)
    q = quantize(x, s)
    want_codes, want_scales = reference_mxfp8_2d(x, mode)
    assert q.scales.dtype == torch.float8_e8m0fnu and q.scales.shape == (3, 4)
    assert torch.equal(q.scales.view(torch.uint8), want_scales)
    assert torch.equal(q.element_codes(), want_codes)
    per_element = decode_e8m0(want_scales).repeat_interleave(32, 0).repeat_interleave(32, 1)
    want = decode(want_codes, E4M3) * per_element
    assert same_values(q.dequantize(torch.float32), want[:70, :100])
    # the fused fast path gives the same bits
    assert same_values(fake_quantize(x, s, backend="eager"), q.dequantize())


def test_mxfp8_2d_gives_a_matrix_and_its_transpose_the_same_codes():
    x = tile_inputs()
    s = scheme("mxfp8_e4m3_2d", scale_mode="rceil")
    q, qt = quantize(x, s), quantize(x.t().contiguous(), s)
    assert torch.equal(qt.element_codes(), q.element_codes().t())
    assert torch.equal(qt.scales.view(torch.uint8), q.scales.view(torch.uint8).t())
    # whereas 1x32 blocks along the other axis generally do not
    s1 = scheme("mxfp8_e4m3", scale_mode="rceil")
    assert not torch.equal(fake_quantize(x.t().contiguous(), s1).t(), fake_quantize(x, s1))


def test_mxfp8_2d_scheme_contract():
    s = scheme("mxfp8_e4m3_2d")
    assert s.is_2d and s.block == (32, 32) and s.family == "mx"
    with pytest.raises(ValueError, match="axis must be -1"):
        scheme("mxfp8_e4m3_2d", axis=0)
    with pytest.raises(ValueError, match="Hadamard"):
        scheme("mxfp8_e4m3_2d", hadamard=True)
    with pytest.raises(ValueError, match="at least 2 dims"):
        quantize(torch.randn(64), s)


# ---- FP6 packing ---------------------------------------------------------------------------------------


def reference_pack_fp6(codes: list[int]) -> list[int]:
    """Plain bit-stream writer: element i takes bits 6i..6i+5, least significant bit first, bytes in order."""
    stream = [(c >> b) & 1 for c in codes for b in range(6)]
    return [sum(stream[8 * k + b] << b for b in range(8)) for k in range(len(stream) // 8)]


def test_fp6_packing_matches_the_plain_bit_stream_for_every_code_in_every_position():
    rows = []
    for pos in range(4):
        for code in range(64):
            group = [(code * 7 + 13 * p + 5) % 64 for p in range(4)]  # varied neighbours
            group[pos] = code
            rows.append(group)
    codes = torch.tensor(rows, dtype=torch.uint8)  # (256, 4)
    packed = pack_fp6(codes)
    assert packed.shape == (256, 3) and packed.dtype == torch.uint8
    assert packed.tolist() == [reference_pack_fp6(r) for r in rows]
    # a longer row is the groups side by side
    long = codes.reshape(8, 128)
    assert pack_fp6(long).tolist() == [reference_pack_fp6(r) for r in long.tolist()]


def test_fp6_round_trip_is_exhaustive_over_all_groups_of_four():
    c = torch.arange(64**4, dtype=torch.int64)
    codes = torch.stack([(c >> (6 * p)) & 0x3F for p in range(4)], dim=-1).to(torch.uint8)  # every 4-tuple
    packed = pack_fp6(codes)
    assert packed.shape == (64**4, 3)
    assert torch.equal(unpack_fp6(packed), codes)
    # and every byte triple is a distinct group: packing is a bijection on 24 bits
    word = packed[:, 0].long() | (packed[:, 1].long() << 8) | (packed[:, 2].long() << 16)
    assert torch.equal(word, c)


def test_fp6_packing_rejects_ragged_rows():
    with pytest.raises(ValueError, match="divisible by 4"):
        pack_fp6(torch.zeros(2, 6, dtype=torch.uint8))
    with pytest.raises(ValueError, match="divisible by 3"):
        unpack_fp6(torch.zeros(2, 4, dtype=torch.uint8))


@pytest.mark.parametrize("name", ["mxfp6_e2m3", "mxfp6_e3m2"])
def test_mxfp6_storage_is_three_quarters_of_a_byte_per_element(name):
    x = torch.randn(5, 3, 70)  # padded to 96 per row
    q = quantize(x, scheme(name))
    n_working = 5 * 3 * 96
    assert q.codes.dtype == torch.uint8 and q.codes.numel() == n_working * 3 // 4
    assert q.nbytes == n_working * 3 // 4 + n_working // 32
    assert same_values(q.dequantize(), fake_quantize(x, scheme(name), backend="eager"))
    assert int(q.element_codes().max()) < 64
