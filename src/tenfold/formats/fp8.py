"""FP8 with fp32 scales (plain reference): per tensor, per row, per 1x128 tile or per 128x128 block.

Scale rule of Transformer Engine's `compute_scale_from_amax` (used by current scaling and by the
blockwise recipes): amax is raised to `amax_epsilon`; scale = (fp8_max / amax) / 2^margin; a zero or
infinite amax gives scale 1; an infinite scale (subnormal amax) becomes FLT_MAX; NaN propagates;
`pow2_scales` rounds the scale down to a power of two by zeroing its mantissa. Elements are
round(x * scale) saturated to the format max, stored in torch's float8 dtypes, with scale_inv = 1/scale
kept for dequantization (x = q * scale_inv), as TE does.
"""

from __future__ import annotations

import torch

from tenfold.formats.codes import decode, encode
from tenfold.formats.division import div
from tenfold.formats.rounding import round_to_grid, round_to_grid_fast
from tenfold.formats.scheme import Scheme

FLT_MAX = torch.finfo(torch.float32).max


def scale_from_amax(amax: torch.Tensor, s: Scheme) -> torch.Tensor:
    a = torch.clamp(amax, min=s.amax_epsilon) if s.amax_epsilon else amax
    scale = div(1.0, a) * s.element.max / (2.0**s.margin)  # Python's max / a: reciprocal, then *
    scale = torch.where(torch.isinf(scale), torch.full_like(scale, FLT_MAX), scale)
    scale = torch.where((a == 0) | torch.isinf(a), torch.ones_like(scale), scale)
    if s.pow2_scales:
        bits = scale.view(torch.int32) & 0x7F800000
        scale = torch.where(torch.isnan(scale), scale, bits.view(torch.float32))
    return scale


def quantize_tiles(
    t: torch.Tensor, scale: torch.Tensor, s: Scheme, noise: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiles (..., ntiles, k) and their scales (..., ntiles) -> (float8 codes, fp32 scale_inv)."""
    q = round_to_grid(t * scale.unsqueeze(-1), s.element, s.rounding, noise)
    codes = encode(q, s.element).view(s.element.torch_dtype)
    return codes, div(1.0, scale)


def fake_tiles(t: torch.Tensor, scale: torch.Tensor, s: Scheme, noise: torch.Tensor | None) -> torch.Tensor:
    """Tiles -> their dequantized values, skipping the codes (the fused fast path's body)."""
    rnd = round_to_grid_fast if torch.compiler.is_compiling() else round_to_grid
    q = rnd(t * scale.unsqueeze(-1), s.element, s.rounding, noise)
    return q * div(1.0, scale).unsqueeze(-1)


def dequantize_tiles(codes: torch.Tensor, scale_inv: torch.Tensor, s: Scheme) -> torch.Tensor:
    return decode(codes, s.element) * scale_inv.unsqueeze(-1)
