"""Bit codes of element formats: encode on-grid fp32 values, decode codes, pack FP4 and FP6 densely.

Storage follows the issue's contract: FP8 elements live in torch's own float8 dtypes, FP4 packed two per
byte (even element in the low nibble, as torchao's `pack_uint4` and TE's reference do), FP6 packed four
per three bytes (`pack_fp6`), MX INT8 as int8 two's complement.

FP6 bit order (our choice; the OCP MX v1.0 spec defines the element encodings and the block of one scale
and k elements, and we found no rule in it for packing elements into bytes): each group of four elements
e0..e3 along the last axis is the 24-bit little-endian word w = e0 | e1 << 6 | e2 << 12 | e3 << 18, stored
as bytes (w & 0xFF, (w >> 8) & 0xFF, w >> 16). Element i occupies bits 6i..6i+5 of the group's bit
stream, least significant first: the FP4 rule (first element in the low bits) carried over to 6 bits.

NaN in a format without NaN (FP6, FP4) encodes as negative zero, as ml_dtypes does; block schemes carry
NaN in their scale instead, so the element code of a NaN block does not matter.
"""

from __future__ import annotations

import torch

from tenfold.formats.elements import ElementFormat

_TABLES: dict[tuple[str, str], torch.Tensor] = {}


def _magnitude_table(fmt: ElementFormat, device: torch.device) -> torch.Tensor:
    key = (fmt.name, str(device))
    if key not in _TABLES:
        _TABLES[key] = torch.tensor(fmt.magnitudes, dtype=torch.float32, device=device)
    return _TABLES[key]


def _decode_table(fmt: ElementFormat, device: torch.device) -> torch.Tensor:
    """Value of every code 0 .. 2^bits - 1 (sign bit is the top bit), NaN/Inf codes included."""
    key = (fmt.name + "/decode", str(device))
    if key not in _TABLES:
        n = 2 ** (fmt.ebits + fmt.mbits)
        mags = list(fmt.magnitudes)
        if fmt.has_inf:
            mags = [*mags, float("inf")]
        mags += [float("nan")] * (n - len(mags))
        pos = torch.tensor(mags, dtype=torch.float32)
        _TABLES[key] = torch.cat([pos, -pos]).to(device)
    return _TABLES[key]


def encode(q: torch.Tensor, fmt: ElementFormat) -> torch.Tensor:
    """Codes of fp32 values already on `fmt`'s grid (see `round_to_grid`), as uint8 (int8 for INT8).

    Values off the grid raise no error here; callers round first. NaN maps to the format's NaN code, or
    to -0 where the format has none.
    """
    if fmt.is_int:
        return torch.round(q * 2.0**fmt.mbits).nan_to_num(0.0).to(torch.int8)
    if fmt.torch_dtype is not None:
        return q.to(fmt.torch_dtype).view(torch.uint8)
    table = _magnitude_table(fmt, q.device)
    a = q.abs()
    nan = torch.isnan(a)
    mag = torch.searchsorted(table, torch.where(nan, torch.zeros_like(a), a).contiguous())
    sign = torch.signbit(q) | nan
    return (mag | (sign.to(torch.int64) << (fmt.ebits + fmt.mbits))).to(torch.uint8)


def decode(codes: torch.Tensor, fmt: ElementFormat) -> torch.Tensor:
    """fp32 values of element codes produced by `encode` (or of a torch float8 tensor)."""
    if fmt.is_int:
        return codes.to(torch.float32) * 2.0**-fmt.mbits
    if fmt.torch_dtype is not None:
        return codes.view(fmt.torch_dtype).to(torch.float32)
    return _decode_table(fmt, codes.device)[codes.to(torch.int64)]


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """Pack 4-bit codes along the last axis (even length) two per byte, even element in the low nibble."""
    if codes.shape[-1] % 2:
        raise ValueError(f"FP4 packing needs an even last dimension, got shape {tuple(codes.shape)}")
    c = codes.to(torch.uint8)
    return c[..., 0::2] | (c[..., 1::2] << 4)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of `pack_fp4`: uint8 codes, last axis doubled."""
    lo = packed & 0x0F
    hi = packed >> 4
    return torch.stack([lo, hi], dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def pack_fp6(codes: torch.Tensor) -> torch.Tensor:
    """Pack 6-bit codes along the last axis (a multiple of 4) four per three bytes (see module docstring)."""
    if codes.shape[-1] % 4:
        raise ValueError(f"FP6 packing needs a last dimension divisible by 4, got shape {tuple(codes.shape)}")
    c = codes.to(torch.uint8) & 0x3F
    e0, e1, e2, e3 = c[..., 0::4], c[..., 1::4], c[..., 2::4], c[..., 3::4]
    b0 = e0 | (e1 << 6)  # e0 bits 0-5, low 2 bits of e1 (uint8 arithmetic drops the overflow)
    b1 = (e1 >> 2) | (e2 << 4)  # high 4 bits of e1, low 4 bits of e2
    b2 = (e2 >> 4) | (e3 << 2)  # high 2 bits of e2, e3
    return torch.stack([b0, b1, b2], dim=-1).reshape(*c.shape[:-1], c.shape[-1] // 4 * 3)


def unpack_fp6(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of `pack_fp6`: uint8 codes, last axis (a multiple of 3) times 4/3."""
    if packed.shape[-1] % 3:
        shape = tuple(packed.shape)
        raise ValueError(f"FP6 unpacking needs a last dimension divisible by 3, got shape {shape}")
    b0, b1, b2 = packed[..., 0::3], packed[..., 1::3], packed[..., 2::3]
    e0 = b0 & 0x3F
    e1 = (b0 >> 6) | ((b1 & 0x0F) << 2)
    e2 = (b1 >> 4) | ((b2 & 0x03) << 4)
    e3 = b2 >> 2
    return torch.stack([e0, e1, e2, e3], dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] // 3 * 4)
