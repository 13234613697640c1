"""The public API of tenfold.formats: names, storage dtypes, shapes, padding, empty tensors, errors."""

from __future__ import annotations

import pytest
import torch

from tenfold.formats import SCHEME_NAMES, QuantizedTensor, fake_quantize, quantize, scheme

from .helpers import same_values

EXPECTED_NAMES = (
    "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "mxint8", "nvfp4", "nvfp4_2d",
    "fp8_e4m3_tensor", "fp8_e5m2_tensor", "fp8_e4m3_row", "fp8_e4m3_block1x128", "fp8_e4m3_block128x128",
    "mxfp8_e4m3_2d",
)  # fmt: skip

STORAGE = {
    "mxfp8_e4m3": (torch.float8_e4m3fn, torch.float8_e8m0fnu),
    "mxfp8_e5m2": (torch.float8_e5m2, torch.float8_e8m0fnu),
    "mxfp6_e3m2": (torch.uint8, torch.float8_e8m0fnu),
    "mxfp6_e2m3": (torch.uint8, torch.float8_e8m0fnu),
    "mxfp4": (torch.uint8, torch.float8_e8m0fnu),
    "mxint8": (torch.int8, torch.float8_e8m0fnu),
    "nvfp4": (torch.uint8, torch.float8_e4m3fn),
    "nvfp4_2d": (torch.uint8, torch.float8_e4m3fn),
    "fp8_e4m3_tensor": (torch.float8_e4m3fn, torch.float32),
    "fp8_e5m2_tensor": (torch.float8_e5m2, torch.float32),
    "fp8_e4m3_row": (torch.float8_e4m3fn, torch.float32),
    "fp8_e4m3_block1x128": (torch.float8_e4m3fn, torch.float32),
    "fp8_e4m3_block128x128": (torch.float8_e4m3fn, torch.float32),
    "mxfp8_e4m3_2d": (torch.float8_e4m3fn, torch.float8_e8m0fnu),
}


def test_scheme_names_are_the_public_contract():
    assert SCHEME_NAMES == EXPECTED_NAMES


@pytest.mark.parametrize("name", EXPECTED_NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_round_trip_storage_shape_and_dtype(name, dtype):
    x = torch.randn(3, 40, 130).to(dtype)
    q = quantize(x, scheme(name))
    assert isinstance(q, QuantizedTensor)
    assert (q.codes.dtype, q.scales.dtype) == STORAGE[name]
    y = q.dequantize()
    assert y.shape == x.shape and y.dtype == dtype
    f = fake_quantize(x, scheme(name))
    assert f.shape == x.shape and f.dtype == dtype
    assert same_values(f, y)
    assert q.dequantize(torch.float32).dtype == torch.float32


def test_fp4_is_packed_two_per_byte_and_fp6_four_per_three_bytes():
    x = torch.randn(8, 64)
    assert quantize(x, scheme("mxfp4")).codes.shape == (8, 32)
    assert quantize(x, scheme("nvfp4")).codes.shape == (8, 32)
    q6 = quantize(x, scheme("mxfp6_e2m3"))
    assert q6.codes.shape == (8, 48) and q6.codes.dtype == torch.uint8
    assert q6.element_codes().shape == (8, 64) and int(q6.element_codes().max()) < 64


def test_axis_option_blocks_along_the_chosen_axis():
    x = torch.randn(64, 48)
    q0 = quantize(x, scheme("mxfp8_e4m3", axis=0))
    assert q0.scales.shape == (48, 2)
    assert torch.equal(q0.dequantize(), fake_quantize(x.T.contiguous(), scheme("mxfp8_e4m3")).T)
    q3 = quantize(torch.randn(2, 33, 5), scheme("nvfp4", axis=1))
    assert q3.working_shape == (2, 5, 48) and q3.dequantize().shape == (2, 33, 5)


def test_padding_is_transparent():
    x = torch.randn(5, 45)
    padded = torch.nn.functional.pad(x, (0, 19))
    for name in ("mxfp8_e4m3", "mxfp4", "nvfp4", "fp8_e4m3_block1x128"):
        assert torch.equal(fake_quantize(x, scheme(name)), fake_quantize(padded, scheme(name))[:, :45])


@pytest.mark.parametrize("name", EXPECTED_NAMES)
def test_empty_tensors(name):
    x = torch.empty(0, 32)
    q = quantize(x, scheme(name))
    assert q.dequantize().shape == (0, 32)
    assert fake_quantize(x, scheme(name)).shape == (0, 32)


def test_bad_inputs_get_clear_errors():
    with pytest.raises(TypeError, match="int64"):
        quantize(torch.arange(32), scheme("mxfp8_e4m3"))
    with pytest.raises(TypeError, match=r"torch\.Tensor"):
        quantize([1.0, 2.0], scheme("mxfp8_e4m3"))
    with pytest.raises(TypeError, match="scheme"):
        quantize(torch.randn(32), "mxfp8_e4m3")
    with pytest.raises(ValueError, match=r"unknown scheme 'mxfp9'.*valid: mxfp8_e4m3, mxfp8_e5m2"):
        scheme("mxfp9")
    with pytest.raises(ValueError, match=r"unknown option\(s\) blocksize.*valid:"):
        scheme("mxfp4", blocksize=16)
    with pytest.raises(ValueError, match="axis 2 is out of range for a 2-D tensor"):
        quantize(torch.randn(4, 32), scheme("mxfp4", axis=2))
    with pytest.raises(ValueError, match=r"at least 2 dims, got 1-D"):
        quantize(torch.randn(32), scheme("nvfp4_2d"))
    with pytest.raises(ValueError, match=r"scale_mode='round'"):
        scheme("mxfp4", scale_mode="round")
    with pytest.raises(ValueError, match=r"rounding='up'.*nearest, away, stochastic"):
        scheme("mxfp4", rounding="up")
    with pytest.raises(ValueError, match="Hadamard"):
        scheme("nvfp4_2d", hadamard=True)
    with pytest.raises(ValueError, match="delayed scaling applies to per-tensor"):
        scheme("fp8_e4m3_row", scaling="delayed")
    with pytest.raises(ValueError, match="seed"):
        scheme("nvfp4", seed=-1)
    with pytest.raises(ValueError, match="backend"):
        fake_quantize(torch.randn(32), scheme("nvfp4"), backend="triton")


def test_scheme_is_frozen_and_hashable():
    s = scheme("nvfp4", rounding="stochastic")
    with pytest.raises(AttributeError):
        s.seed = 3  # type: ignore[misc]
    assert hash(s) == hash(scheme("nvfp4", rounding="stochastic"))
    assert s.with_options(seed=4).seed == 4


def test_bits_per_element():
    assert scheme("nvfp4").bits_per_element() == 4.5
    assert scheme("mxfp4").bits_per_element() == 4.25
    assert scheme("mxfp8_e4m3").bits_per_element() == 8.25
    assert scheme("mxfp6_e2m3").bits_per_element() == 6.25
    assert scheme("mxfp8_e4m3_2d").bits_per_element() == 8 + 8 / 1024


def test_inputs_with_grad_are_not_tracked():
    x = torch.randn(4, 32, requires_grad=True)
    y = fake_quantize(x, scheme("mxfp8_e4m3"))
    assert not y.requires_grad


PACKED = ["mxint8", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp4", "nvfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3_2d"]


@pytest.mark.parametrize("name", PACKED)
def test_bits_per_element_match_the_stored_bytes(name):
    """Element widths of 4, 6 and 8 bits are stored packed: the count must equal what quantize() stores
    (MX INT8 is a two's-complement byte: 8.25 bits with its E8M0 scale, not 7.25)."""
    s = scheme(name)
    q = quantize(torch.randn(64, 256), s)
    tensor_scale_bytes = 4 if q.amax is not None else 0
    assert s.bits_per_element() == (q.nbytes - tensor_scale_bytes) * 8 / q.numel
