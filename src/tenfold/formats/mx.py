"""OCP MX v1.0 block quantization (plain reference): 1x32 (or 32x32) blocks, E8M0 shared scale.

shared scale X = 2^e with e from the block amax (`tenfold.formats.e8m0`); element P_i = round(V_i / X)
saturated to the element max (OCP MX v1.0 spec §6.3,
https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf). V_i / X is
computed as V_i * 2^-e, exact (in rceil mode a code-0 block is multiplied by 1 instead, as TE does; see
`e8m0.quantization_reciprocal`).
"""

from __future__ import annotations

import torch

from tenfold.formats.codes import decode, encode, pack_fp4, pack_fp6, unpack_fp4, unpack_fp6
from tenfold.formats.e8m0 import decode_e8m0, quantization_reciprocal, select_exponent
from tenfold.formats.rounding import round_to_grid, round_to_grid_fast
from tenfold.formats.scheme import Scheme


def scaled_tiles(
    t: torch.Tensor, s: Scheme, noise: torch.Tensor | None, fast: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiles (..., nblocks, 32) -> (on-grid element values, E8M0 codes (..., nblocks) as uint8).

    `fast` rounds with `round_to_grid_fast` (bit-identical, friendlier to compilers)."""
    amax = t.abs().amax(dim=-1)
    code = select_exponent(amax, s.element, s.scale_mode, s.nonfinite)
    rec = quantization_reciprocal(code, s.scale_mode)
    rnd = round_to_grid_fast if fast else round_to_grid
    q = rnd(t * rec.unsqueeze(-1), s.element, s.rounding, noise)
    return q, code


def quantize_tiles(
    t: torch.Tensor, s: Scheme, noise: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiles -> (element codes, E8M0 scale codes)."""
    q, code = scaled_tiles(t, s, noise)
    return encode(q, s.element), code


def fake_tiles(t: torch.Tensor, s: Scheme, noise: torch.Tensor | None) -> torch.Tensor:
    """Tiles -> their dequantized values, skipping the codes (the fused fast path's body).

    Under torch.compile it rounds with the compare-based `round_to_grid_fast`, which vectorises; eagerly,
    the bit-cast `round_to_grid` takes fewer kernel launches. Both give the same bits."""
    q, code = scaled_tiles(t, s, noise, fast=torch.compiler.is_compiling())
    return q * decode_e8m0(code).unsqueeze(-1)


def dequantize_tiles(codes: torch.Tensor, scale_codes: torch.Tensor, s: Scheme) -> torch.Tensor:
    return decode(codes, s.element) * decode_e8m0(scale_codes).unsqueeze(-1)


def store(codes: torch.Tensor, scale_codes: torch.Tensor, s: Scheme) -> tuple[torch.Tensor, torch.Tensor]:
    """Storage form: FP4 packed two per byte, FP6 four per three bytes, scales as torch.float8_e8m0fnu."""
    if s.element.bits == 4:
        codes = pack_fp4(codes)
    elif s.element.bits == 6:
        codes = pack_fp6(codes)
    elif s.element.torch_dtype is not None:
        codes = codes.view(s.element.torch_dtype)
    return codes, scale_codes.view(torch.float8_e8m0fnu)


def load(codes: torch.Tensor, scales: torch.Tensor, s: Scheme) -> tuple[torch.Tensor, torch.Tensor]:
    if s.element.bits == 4:
        codes = unpack_fp4(codes)
    elif s.element.bits == 6:
        codes = unpack_fp6(codes)
    elif s.element.torch_dtype is not None:
        codes = codes.view(torch.uint8)
    return codes, scales.view(torch.uint8)
