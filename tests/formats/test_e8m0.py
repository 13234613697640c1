"""E8M0 scales: all 256 codes, and golden vectors for the floor and rceil scale rules."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import torch

from tenfold.formats import (
    E2M1,
    E4M3,
    E5M2,
    NonFinite,
    ScaleMode,
    decode_e8m0,
    encode_e8m0,
    fake_quantize,
    quantize,
    reciprocal_e8m0,
    scheme,
)
from tenfold.formats.e8m0 import select_exponent

CODES = torch.arange(256, dtype=torch.int32).to(torch.uint8)


def test_all_256_codes_decode_like_ml_dtypes_and_torch():
    ours = decode_e8m0(CODES)
    ml = CODES.numpy().view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    np.testing.assert_array_equal(ours.numpy(), ml)
    tor = CODES.view(torch.float8_e8m0fnu).to(torch.float32)
    assert torch.equal(ours[:255], tor[:255]) and torch.isnan(tor[255]) and torch.isnan(ours[255])
    assert ours[0].item() == 2.0**-127 and ours[254].item() == 2.0**127 and ours[127].item() == 1.0


def test_all_256_codes_encode_back():
    assert torch.equal(encode_e8m0(decode_e8m0(CODES)), CODES)
    assert encode_e8m0(torch.tensor([0.0, -1.0, 3.0, float("inf")])).tolist() == [255, 255, 255, 255]


def test_all_256_codes_reciprocal_is_exact():
    rec = reciprocal_e8m0(CODES)
    val = decode_e8m0(CODES)
    for c in range(255):
        assert rec[c].item() * val[c].item() == 1.0, c  # exact in Python's double
        if 0 < c < 255:
            # torchao test_e8m0_scale_to_reciprocal_fp32: the reciprocal's code is 254 - c
            assert encode_e8m0(rec[c : c + 1]).item() == 254 - c
    assert torch.isnan(rec[255])
    assert rec[0].item() == 2.0**127 and rec[254].item() == 2.0**-127  # code 254's reciprocal is subnormal


# Golden vectors traced to their source -------------------------------------------------------------


def test_floor_rule_ocp_spec_examples():
    """OCP MX v1.0 §6.3: shared_exp = floor(log2(amax)) - emax_elem, clamped to the E8M0 range."""
    amax = torch.tensor([1.0, 448.0, 485.0, 511.99, 512.0, 6.0, 7.99, 0.0, 2.0**-140, 3e38])
    e4m3 = select_exponent(amax, E4M3, ScaleMode.FLOOR).to(torch.int32) - 127
    assert e4m3.tolist() == [-8, 0, 0, 0, 1, -6, -6, -127, -127, 119]
    e2m1 = select_exponent(amax[:7], E2M1, ScaleMode.FLOOR).to(torch.int32) - 127
    assert e2m1.tolist() == [-2, 6, 6, 6, 7, 0, 0]


def test_floor_clips_the_block_max_up_to_12_5_and_25_percent():
    """The clipping case: floor puts the scaled max in [2^emax, 2^(emax+1)), above the element max."""
    for name, amax, elem_max in (("mxfp8_e4m3", 511.99, 448.0), ("mxfp4", 7.99, 6.0)):
        x = torch.full((32,), 0.5)
        x[0] = amax
        floor = fake_quantize(x, scheme(name, scale_mode="floor"))
        rceil = fake_quantize(x, scheme(name, scale_mode="rceil"))
        loss = 1 - floor[0].item() / amax
        assert floor[0].item() == elem_max  # scale 2^0: the maximum saturates
        bound = 1 - elem_max / (2 * 2 ** math.floor(math.log2(elem_max)))  # amax -> 2^(emax+1)
        assert bound - 0.002 < loss < bound
        assert abs(rceil[0].item() - amax) / amax < 0.07  # round-up scale keeps the maximum
    assert 1 - 448 / 512 == 0.125 and 1 - 6 / 8 == 0.25


def test_floor_with_rne_and_ties_away_microxcaling_vector():
    """microxcaling mx/tests/test_fp8_e4m3_fix.py: amax 485 -> shared exp 0; 400 is a tie."""
    x = torch.tensor([485.0, 475.0, 400.0, -485.0, -475.0, -450.0, 2.0**-6, -(2.0**-6)] + [0.0] * 24)
    away = fake_quantize(x, scheme("mxfp8_e4m3", rounding="away"))[:8]
    assert away.tolist() == [448, 448, 416, -448, -448, -448, 2**-6, -(2**-6)]
    rne = fake_quantize(x, scheme("mxfp8_e4m3"))[:8]
    assert rne.tolist() == [448, 448, 384, -448, -448, -448, 2**-6, -(2**-6)]


def test_rceil_rule_cublas():
    """cuBLAS 1D block quantization / TE float_to_e8m0(amax * (1/448)): round amax/max up to 2^k."""
    amax = torch.tensor([448.0, 448.01, 449.0, 896.0, 300.0, 1.0, 0.0, 2.0**-140, 3e38])
    unb = select_exponent(amax, E4M3, ScaleMode.RCEIL).to(torch.int32) - 127
    assert unb.tolist() == [0, 1, 1, 1, 0, -8, -127, -127, 120]
    # 1/448 in fp32 times 448 is exactly 1.0, so 448 itself does not round up (ptx cvt.rp semantics)
    assert select_exponent(torch.tensor([57344.0]), E5M2, ScaleMode.RCEIL).item() == 127


def test_rceil_torchao_golden_vectors():
    """torchao test/prototype/mx_formats/test_mx_tensor.py::test_to_mx_rceil (uint32/bf16 bit patterns)."""
    fp32_normal = [
        1037408064, 1058534842, 1053630662, 1063310394, 994704128, 1057245441, 1060663708, 1058053571,
        1052395648, 1064831570, 1038427336, 1064777688, 1059248393, 1060959028, 1062878286, 1057799482,
        1057854101, 1053562724, 1027482352, 1060498324, 1063238522, 1060472055, 1054346794, 1029092912,
        1056687298, 1059146141, 1037992128, 1064097772, 1056522806, 1059255744, 1064364912, 1060606252,
    ]  # fmt: skip
    fp32_normal_codes = [
        93, 113, 109, 118, 53, 112, 116, 113, 108, 120, 94, 119, 114, 116, 118, 113,
        113, 109, 84, 115, 118, 115, 110, 85, 112, 114, 94, 119, 112, 114, 119, 115,
    ]  # fmt: skip
    bf16_normal = [
        15752, 16143, 16182, 15896, 16195, 16186, 16048, 16223, 15988, 16231, 16140, 16088, 16032, 16240,
        16228, 16133, 16210, 16024, 16248, 16187, 16050, 15696, 16060, 15956, 16131, 16251, 15896, 16014,
        15808, 16024, 16159, 16186,
    ]  # fmt: skip
    bf16_normal_codes = [
        88, 113, 115, 98, 116, 116, 107, 118, 103, 118, 113, 110, 106, 119, 118, 112,
        117, 106, 120, 116, 107, 85, 108, 101, 112, 120, 98, 105, 92, 106, 114, 116,
    ]  # fmt: skip
    fp32_some_denorm = [
        8388608, 1063716449, 1064039365, 1063568877, 1051091338, 1062185569, 1034449408, 1060813641,
        1054893736, 1034907680, 1036660744, 1023639888, 1058536559, 1050896496, 1049237634, 1064950601,
        1051852994, 1059794063, 1054011102, 1062023602, 1059467900, 1062276774, 1059155029, 1053287574,
        1064378711, 1055768540, 1045266076, 1059575077, 1054928758, 1040468200, 1058061961, 1053066436,
    ]  # fmt: skip
    fp32_some_denorm_codes = [
        0, 118, 119, 118, 106, 117, 91, 116, 110, 91, 93, 80, 113, 106, 105, 120,
        107, 115, 109, 117, 114, 117, 114, 108, 119, 111, 101, 114, 110, 96, 113, 108,
    ]  # fmt: skip
    fp32_denorm = [
        6142315, 5096174, 3345704, 6178415, 5728750, 419002, 1716691, 4335089, 5785800, 6234845, 1697524,
        33075, 3975816, 3714822, 5411407, 3040844, 7400945, 4474166, 7257182, 1273750, 5872176, 4694081,
        2096530, 6273621, 67028, 7585260, 4532315, 4599275, 6133942, 4542483, 5992199, 6862780,
    ]  # fmt: skip
    bf16_denorm = [
        101, 3, 47, 54, 36, 19, 70, 79, 35, 95, 28, 120, 84, 94, 20, 92, 18, 42, 98, 58, 3, 26, 64, 86,
        60, 86, 52, 23, 61, 70, 59, 74,
    ]  # fmt: skip

    def f32(bits):
        return torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)

    def bf16(bits):
        return torch.tensor(bits, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)

    cases = [
        (f32(fp32_normal), 119, fp32_normal_codes),
        (bf16(bf16_normal), 119, bf16_normal_codes),
        (f32(fp32_some_denorm), 119, fp32_some_denorm_codes),
        (f32(fp32_denorm), 0, [0] * 32),
        (bf16(bf16_denorm), 0, [0] * 32),
        (torch.zeros(32), 0, [0] * 32),
    ]
    s = scheme("mxfp8_e4m3", scale_mode="rceil")
    for x, scale_code, codes in cases:
        q = quantize(x, s)
        assert q.scales.view(torch.uint8).tolist() == [scale_code]
        assert q.codes.view(torch.uint8).tolist() == codes
    nan_block = f32([2143289344, *fp32_normal[1:]])
    assert quantize(nan_block, s).scales.view(torch.uint8).tolist() == [255]


def test_ceil_and_even_modes():
    amax = torch.tensor([448.0, 449.0, 300.0, 256.0, 383.0, 384.0])
    ceil = select_exponent(amax, E4M3, ScaleMode.CEIL).to(torch.int32) - 127
    assert ceil.tolist() == [1, 1, 1, 0, 1, 1]  # torchao CEIL: +1 whenever amax is not a power of two
    # torchao EVEN: round amax to 3 mantissa bits' worth (add half of 2^-3 of the binade), then floor
    even = select_exponent(amax, E4M3, ScaleMode.EVEN).to(torch.int32) - 127
    assert even.tolist() == [0, 0, 0, 0, 0, 0]
    assert (select_exponent(torch.tensor([500.0]), E4M3, ScaleMode.EVEN).to(torch.int32) - 127).item() == 1


def test_nonfinite_policies():
    amax = torch.tensor([float("nan"), float("inf"), 0.0])
    for mode in ScaleMode:
        ocp = select_exponent(amax, E4M3, mode, NonFinite.NAN)
        te = select_exponent(amax, E4M3, mode, NonFinite.SATFINITE)
        assert ocp.tolist() == [255, 255, 0], mode
        assert te.tolist() == [255, 254, 0], mode


def test_nonfinite_blocks_end_to_end():
    x = torch.ones(3, 32)
    x[0, 5] = float("nan")
    x[1, 7] = float("inf")
    ocp = fake_quantize(x, scheme("mxfp8_e4m3"))
    assert torch.isnan(ocp[0]).all() and torch.isnan(ocp[1]).all() and (ocp[2] == 1).all()
    te = fake_quantize(x, scheme("mxfp8_e4m3", scale_mode="rceil", nonfinite="satfinite"))
    assert torch.isnan(te[0]).all() and (te[2] == 1).all()
    # satfinite: scale 2^127, the Inf saturates to 448 * 2^127 (= inf in fp32) and the ones flush to 0
    assert torch.isinf(te[1, 7]) and (te[1, :7] == 0).all()
