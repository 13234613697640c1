"""Rounding fp32 values onto an element format's grid, with saturation.

A finite fp32 value v with binade exponent e = floor(log2|v|) lies, in a format with `mbits` mantissa
bits and smallest normal exponent `emin`, between two grid points spaced by the quantum
2^(max(e, emin) - mbits). Dividing |v| by that quantum is exact (a power of two), so rounding reduces to
rounding the real number t = |v| / quantum to an integer:

* ``nearest``: round half to even (IEEE 754 default, ml_dtypes, torchao, Transformer Engine);
* ``away``: round half away from zero (microxcaling's default "nearest");
* ``stochastic``: round up with probability frac(t), from counter-based noise (see `sr_noise`).

Results above the format's max saturate to +-max (the OCP MX v1.0 spec §6.3 clamps normals,
https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf; TE uses satfinite),
infinities saturate too, and NaN propagates. All arithmetic is exact in fp32, so the result is
bit-for-bit the one an exact-arithmetic implementation gives.
"""

from __future__ import annotations

from enum import StrEnum

import torch

from tenfold.formats.elements import ElementFormat


class Rounding(StrEnum):
    """Element rounding modes."""

    NEAREST = "nearest"  # round half to even
    AWAY = "away"  # round half away from zero (microxcaling compatibility)
    STOCHASTIC = "stochastic"  # unbiased, seeded and reproducible


_MASK32 = 0xFFFFFFFF


def _pow2(exponent: torch.Tensor) -> torch.Tensor:
    """2^exponent as fp32 for integer exponents in [-126, 127], built from the bit pattern (exact)."""
    return ((exponent + 127) << 23).to(torch.int32).view(torch.float32)


def round_to_grid(
    v: torch.Tensor,
    fmt: ElementFormat,
    rounding: Rounding = Rounding.NEAREST,
    noise: torch.Tensor | None = None,
) -> torch.Tensor:
    """Round fp32 `v` to the nearest representable value of `fmt` (per `rounding`), saturating at max.

    `noise` (same shape as `v`, uniform in [0, 1)) is required for stochastic rounding.
    Returns fp32 values that are exactly representable in `fmt`; signs (including -0) are kept, except
    for MX INT8, whose two's-complement codes have no -0.
    """
    if v.dtype != torch.float32:
        raise TypeError(f"round_to_grid works on float32, got {v.dtype}")
    a = v.abs()
    exp = ((a.view(torch.int32) >> 23) & 0xFF) - 127
    # Binade of the grid: subnormals share emin's quantum; anything above emax saturates anyway, so
    # clamping to emax + 1 keeps the quantum a normal fp32 number even for Inf/NaN inputs.
    exp = exp.clamp(min=fmt.emin, max=fmt.emax + 1) - fmt.mbits
    return _finish(a * _pow2(-exp), _pow2(exp), v, fmt, rounding, noise)


def _finish(
    t: torch.Tensor,
    quantum: torch.Tensor,
    v: torch.Tensor,
    fmt: ElementFormat,
    rounding: Rounding,
    noise: torch.Tensor | None,
) -> torch.Tensor:
    """Round t = |v| / quantum to an integer per `rounding`, rescale, saturate and restore the sign."""
    if rounding == Rounding.NEAREST:
        r = torch.round(t)
    elif rounding == Rounding.AWAY:
        f = torch.floor(t)
        r = f + ((t - f) >= 0.5).to(torch.float32)
    elif rounding == Rounding.STOCHASTIC:
        if noise is None:
            raise ValueError("stochastic rounding needs `noise` (uniform in [0, 1))")
        f = torch.floor(t)
        r = f + (noise < (t - f)).to(torch.float32)
    else:  # pragma: no cover - enum is closed
        raise ValueError(f"unknown rounding {rounding!r}")
    q = torch.clamp(r * quantum, max=fmt.max)
    q = torch.copysign(q, v)
    # integers have no negative zero: x + 0.0 turns -0 into +0 and changes nothing else
    return q + 0.0 if fmt.is_int else q


def round_to_grid_fast(
    v: torch.Tensor,
    fmt: ElementFormat,
    rounding: Rounding = Rounding.NEAREST,
    noise: torch.Tensor | None = None,
) -> torch.Tensor:
    """`round_to_grid` without integer bit casts, for formats with few binades (FP4, FP6, INT8).

    The binade exponent is found by comparing |v| with each power of two of the format's range and the
    quantum is built by exact multiplications by 2, which compilers vectorise well. Bit-identical to
    `round_to_grid` (tested on every bf16 pattern and on random fp32); used by the fused fast path.
    """
    if fmt.emax + 1 - fmt.emin > FAST_MAX_BINADES:
        return round_to_grid(v, fmt, rounding, noise)
    a = v.abs()
    quantum = torch.full_like(a, 2.0 ** (fmt.emin - fmt.mbits))
    inv = torch.full_like(a, 2.0 ** (fmt.mbits - fmt.emin))
    for k in range(fmt.emin + 1, fmt.emax + 2):
        up = a >= 2.0**k
        quantum = torch.where(up, quantum * 2.0, quantum)
        inv = torch.where(up, inv * 0.5, inv)
    return _finish(a * inv, quantum, v, fmt, rounding, noise)


FAST_MAX_BINADES = 8  # beyond this (E4M3, E5M2) the bit-cast version compiles to faster code


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xorshift-multiply, constants below 2^31 so int64 products cannot overflow)."""
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & _MASK32
    return x ^ (x >> 15)


def _mix32_int(x: int) -> int:
    x &= _MASK32
    x ^= x >> 16
    x = (x * 0x21F0AAAD) & _MASK32
    x ^= x >> 15
    x = (x * 0x735A2D97) & _MASK32
    return x ^ (x >> 15)


def sr_noise(
    shape: torch.Size | tuple[int, ...],
    seed: int,
    offset: int | torch.Tensor = 0,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Uniform noise in [0, 1) on a 2^-24 grid, a pure function of (seed, offset + element index).

    Counter-based (no generator state): the same seed and offset give the same bits on any device and
    for any chunking of the work, which is what makes stochastic rounding reproducible and checkpointable.
    `offset` may be an int64 tensor (so that compiled callers do not specialise on it).
    """
    numel = 1
    for s in shape:
        numel *= int(s)
    key_lo = _mix32_int(seed ^ 0x5BD1E995)
    key_hi = _mix32_int((seed >> 32) + 0x27D4EB2F)
    idx = torch.arange(numel, dtype=torch.int64, device=device) + offset
    h = _mix32((idx & _MASK32) ^ key_lo)
    h = _mix32(h ^ ((idx >> 32) & _MASK32) ^ key_hi)
    return ((h >> 8).to(torch.float32) * 2.0**-24).reshape(shape)
