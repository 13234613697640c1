"""Element casts: every bf16 bit pattern, scale fixed at 1, against ml_dtypes with saturation."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from tenfold.formats import E2M1, E2M3, E3M2, E4M3, E5M2, INT8, Rounding, round_to_grid, sr_noise
from tenfold.formats.codes import decode, encode, pack_fp4, unpack_fp4
from tenfold.formats.rounding import round_to_grid_fast

ML_DTYPES = {
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e3m2": ml_dtypes.float6_e3m2fn,
    "e2m3": ml_dtypes.float6_e2m3fn,
    "e2m1": ml_dtypes.float4_e2m1fn,
}
FLOAT_FORMATS = [E4M3, E5M2, E3M2, E2M3, E2M1]


def all_bf16() -> torch.Tensor:
    """All 65,536 bf16 bit patterns (NaNs, infinities, subnormals, both zeros), widened to fp32."""
    return torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).to(torch.float32)


def oracle_codes(x: torch.Tensor, name: str, fmax: float) -> np.ndarray:
    """ml_dtypes RNE cast with saturation: clamp to +-max first (NaN passes through), then cast."""
    clamped = np.clip(x.numpy(), -fmax, fmax)
    return clamped.astype(ML_DTYPES[name]).view(np.uint8)


@pytest.mark.parametrize("fmt", FLOAT_FORMATS, ids=lambda f: f.name)
def test_all_bf16_patterns_match_ml_dtypes(fmt):
    """Finite and infinite patterns: bit-identical codes. NaN patterns: see the next test."""
    x = all_bf16()
    ours = encode(round_to_grid(x, fmt), fmt).numpy()
    expected = oracle_codes(x, fmt.name, fmt.max)
    not_nan = ~np.isnan(x.numpy())
    assert not_nan.sum() == 65536 - 254
    mismatch = np.nonzero((ours != expected) & not_nan)[0]
    assert mismatch.size == 0, (
        f"{mismatch.size} of 65536 bf16 patterns differ, e.g. input {x[mismatch[:5]].tolist()}: "
        f"ours {ours[mismatch[:5]].tolist()} vs ml_dtypes {expected[mismatch[:5]].tolist()}"
    )


@pytest.mark.parametrize("fmt", FLOAT_FORMATS, ids=lambda f: f.name)
def test_nan_patterns_follow_the_stated_policy(fmt):
    """The 254 NaN patterns: a NaN code where the format has one; -0 where it has none.

    ml_dtypes keeps part of the NaN payload (E5M2 0x7E vs our 0x7F) and gives +0 or -0 for FP6/FP4
    depending on the payload; both are NaN / "no value" in their format, so only the policy is checked.
    Block schemes carry a block's NaN in its scale (MX: 0xFF; NVFP4: the E4M3 NaN code).
    """
    x = all_bf16()
    nan = torch.isnan(x)
    codes = encode(round_to_grid(x[nan], fmt), fmt)
    if fmt.has_nan:
        assert torch.isnan(decode(codes, fmt)).all()
    else:
        assert (codes == 1 << (fmt.ebits + fmt.mbits)).all()  # negative zero


@pytest.mark.parametrize("rounding", list(Rounding))
@pytest.mark.parametrize("fmt", [*FLOAT_FORMATS, INT8], ids=lambda f: f.name)
def test_fast_rounding_is_bit_identical_to_the_reference(fmt, rounding):
    """Every bf16 pattern plus random fp32 spanning the whole exponent range, each rounding mode."""
    g = torch.Generator().manual_seed(0)
    rand = torch.randn(1 << 16, generator=g) * torch.exp2(
        torch.randint(-140, 128, (1 << 16,), generator=g).float()
    )
    x = torch.cat([all_bf16(), rand])
    noise = sr_noise(x.shape, seed=1)
    ref = round_to_grid(x, fmt, rounding, noise)
    fast = round_to_grid_fast(x, fmt, rounding, noise)
    nan = torch.isnan(ref)
    assert torch.equal(nan, torch.isnan(fast))
    assert torch.equal(ref[~nan].view(torch.int32), fast[~nan].view(torch.int32))


@pytest.mark.parametrize("fmt", FLOAT_FORMATS, ids=lambda f: f.name)
def test_decode_every_code_matches_ml_dtypes(fmt):
    n = 2**fmt.bits
    codes = torch.arange(n, dtype=torch.uint8)
    ours = decode(codes, fmt).numpy()
    expected = codes.numpy().view(ML_DTYPES[fmt.name]).astype(np.float32)
    np.testing.assert_array_equal(ours, expected)  # NaN == NaN under assert_array_equal
    assert np.array_equal(np.signbit(ours), np.signbit(expected))


@pytest.mark.parametrize("fmt", FLOAT_FORMATS, ids=lambda f: f.name)
def test_encode_decode_round_trip_on_grid(fmt):
    grid = torch.tensor(fmt.magnitudes)
    values = torch.cat([grid, -grid])
    assert torch.equal(decode(encode(values, fmt), fmt), values)
    # the grid is fixed by the format's table: max, smallest subnormal, smallest normal
    assert max(fmt.magnitudes) == fmt.max
    assert fmt.magnitudes[1] == fmt.min_subnormal
    assert fmt.min_normal in fmt.magnitudes


def test_format_constants_follow_ocp_table():
    # OCP MX v1.0 §5.3: max, emax, min normal, min subnormal per element format
    table = {
        "e4m3": (448, 8, 2**-6, 2**-9),
        "e5m2": (57344, 15, 2**-14, 2**-16),
        "e3m2": (28, 4, 0.25, 0.0625),
        "e2m3": (7.5, 2, 1, 0.125),
        "e2m1": (6, 2, 1, 0.5),
    }
    for fmt in FLOAT_FORMATS:
        assert (fmt.max, fmt.emax, fmt.min_normal, fmt.min_subnormal) == table[fmt.name]
    assert E2M1.magnitudes == (0, 0.5, 1, 1.5, 2, 3, 4, 6)


def test_mxint8_all_bf16_patterns():
    x = all_bf16()
    q = round_to_grid(x, INT8)
    finite = torch.isfinite(x) & (x.abs() < 1e30)
    expected = np.clip(np.rint(x[finite].numpy() * 64), -127, 127) / 64  # numpy rint is RNE
    np.testing.assert_array_equal(q[finite].numpy(), expected.astype(np.float32))
    codes = encode(q[finite], INT8)
    assert codes.dtype == torch.int8
    assert torch.equal(decode(codes, INT8), q[finite])
    assert int(codes.min()) == -127  # symmetric: -128 (-2.0) is never produced, as in microxcaling


def test_ties_away_differs_from_nearest_only_on_ties():
    # E4M3 near 400: the grid step in [256, 512) is 32, so 400 = 12.5 steps is a tie.
    x = torch.tensor([400.0, 401.0, 399.0, 17.0, 18.0, -400.0])
    assert round_to_grid(x, E4M3, Rounding.NEAREST).tolist() == [384, 416, 384, 16, 18, -384]
    assert round_to_grid(x, E4M3, Rounding.AWAY).tolist() == [416, 416, 384, 18, 18, -416]


def test_saturation_and_specials():
    x = torch.tensor([1e6, -1e6, float("inf"), -float("inf"), float("nan"), -0.0, 0.0, 1e-30])
    for fmt in FLOAT_FORMATS:
        q = round_to_grid(x, fmt)
        assert q[:4].tolist() == [fmt.max, -fmt.max, fmt.max, -fmt.max]
        assert torch.isnan(q[4])
        assert torch.signbit(q[5]) and not torch.signbit(q[6]) and q[7] == 0


def test_fp4_packing_order_and_round_trip():
    codes = torch.arange(16, dtype=torch.uint8).reshape(2, 8)
    packed = pack_fp4(codes)
    assert packed.shape == (2, 4)
    assert packed[0, 0].item() == 0x10  # element 0 in the low nibble, element 1 in the high nibble
    assert torch.equal(unpack_fp4(packed), codes)
    with pytest.raises(ValueError, match="even last dimension"):
        pack_fp4(torch.zeros(3, dtype=torch.uint8))


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", [*FLOAT_FORMATS, INT8], ids=lambda f: f.name)
def test_cpu_and_gpu_give_identical_bits(fmt):
    x = all_bf16()
    cpu = round_to_grid(x, fmt)
    gpu = round_to_grid(x.cuda(), fmt).cpu()
    # NaN in, NaN out on both; a NaN's payload bits are the device's choice (CUDA returns its canonical NaN)
    nan = torch.isnan(cpu)
    assert torch.equal(nan, torch.isnan(gpu))
    assert torch.equal(cpu[~nan].view(torch.int32), gpu[~nan].view(torch.int32))
