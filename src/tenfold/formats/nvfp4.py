"""NVFP4 (plain reference): E2M1 elements, an E4M3 scale per 16 elements, an fp32 per-tensor scale.

The algorithm of Transformer Engine's `_quantize_blockwise_reference` (github.com/NVIDIA/TransformerEngine,
transformer_engine/pytorch/custom_recipes/reference_nvfp4.py at commit d0067d0), for 1x16 blocks and for
16x16 blocks (the 2-D weight scaling of NVIDIA, "Pretraining Large Language Models with NVFP4",
arXiv 2509.25149 §4.3, https://arxiv.org/abs/2509.25149):

    g_enc = min(448 * 6 / amax_tensor, FLT_MAX), and 1 if that is 0;  g_dec = 1 / g_enc
    s_blk = e4m3(clamp(min(amax_block * (g_enc * fp32(1/6)), FLT_MAX), +-448))        (RNE cast)
    enc   = min(1 / (fp32(s_blk) * g_dec), FLT_MAX)
    q     = e2m1(clamp(x * enc, +-6))                       (RNE, or stochastic rounding for gradients)

Dequantization follows the GEMM's alpha (TE `qgemm`, torchao `per_tensor_amax_to_scale`):
x = q * s_blk * (amax_tensor / (448 * 6)).

Non-finite inputs (`tenfold.formats.e8m0.NonFinite`): a NaN anywhere makes the tensor amax, hence every
value, NaN. Under ``nan`` (TE's reference) an Inf keeps codes and block scales finite (TE replaces the
zero encode scale by 1) but makes the decode scale, hence every value, non-finite. Under ``satfinite``
the tensor amax is that of the finite values, the Inf's block scale clamps to 448 and the Inf saturates
to +-6, so it dequantizes to +-(finite tensor amax) and no other block changes.

`min_block_scale` > 0 reproduces torchao's lower clamp of the block scale (2^-6), which TE does not have.

Two options of TE 2.15+ (same reference file): ``row_scaled`` takes one amax per row of the working
layout instead of one per tensor (`tensor_amax`; every formula above then uses the row's amax), and
``four_over_six`` picks each block's scale from two candidates (`tenfold.formats.four_over_six`), with 448
replaced by the scheme's `four_over_six_e4m3_max` (default 256) in g_enc and in the decode scale.
"""

from __future__ import annotations

import torch

from tenfold.formats import four_over_six
from tenfold.formats.codes import decode, encode, pack_fp4, unpack_fp4
from tenfold.formats.division import div
from tenfold.formats.e8m0 import scale_amax
from tenfold.formats.elements import E4M3
from tenfold.formats.rounding import round_to_grid, round_to_grid_fast
from tenfold.formats.scheme import Scheme

FP4_MAX = 6.0
FLT_MAX = torch.finfo(torch.float32).max


def global_e4m3_max(s: Scheme) -> float:
    """The E4M3 bound of the global scale: 448, or 256 for 4over6 (TE `nvfp4_4over6_e4m3_use_256`)."""
    return float(s.four_over_six_e4m3_max) if s.four_over_six else E4M3.max


def tensor_amax(xw: torch.Tensor, s: Scheme) -> torch.Tensor:
    """The fp32 amax behind the second-level scale: 0-d per tensor, (..., 1) per working-layout row."""
    if s.row_scaled:
        return scale_amax(xw, s.nonfinite, dim=-1, keepdim=True)
    return scale_amax(xw, s.nonfinite)


def global_encode_scale(amax: torch.Tensor, bound: float = E4M3.max) -> torch.Tensor:
    g = torch.clamp(div(bound * FP4_MAX, amax), max=FLT_MAX)
    return torch.where(g == 0, torch.ones_like(g), g)


def block_scales(amax_blocks: torch.Tensor, g_enc: torch.Tensor, s: Scheme) -> torch.Tensor:
    """E4M3 block decode scales (as float8_e4m3fn) from the block amaxes."""
    mult = g_enc * (torch.tensor(1.0) / torch.tensor(FP4_MAX))
    dec = torch.clamp(amax_blocks * mult, max=FLT_MAX)
    dec = torch.clamp(dec, min=-E4M3.max, max=E4M3.max)
    if s.min_block_scale:
        dec = torch.clamp(dec, min=s.min_block_scale)
    return dec.to(torch.float8_e4m3fn)


def scaled_tiles(
    t: torch.Tensor, amax_tensor: torch.Tensor, s: Scheme, noise: torch.Tensor | None, fast: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiles (..., nblocks, 16 or 256) -> (on-grid E2M1 values, E4M3 block scales (..., nblocks)).

    `fast` rounds with `round_to_grid_fast` (bit-identical, friendlier to compilers)."""
    bound = global_e4m3_max(s)
    g_enc = global_encode_scale(amax_tensor, bound)
    if s.four_over_six:
        return four_over_six.scaled_tiles(t, amax_tensor, g_enc, s, bound, fast)
    g_dec = div(1.0, g_enc)
    s_blk = block_scales(t.abs().amax(dim=-1), g_enc, s)
    enc = torch.clamp(div(1.0, s_blk.to(torch.float32) * g_dec), max=FLT_MAX)
    rnd = round_to_grid_fast if fast else round_to_grid
    q = rnd(t * enc.unsqueeze(-1), s.element, s.rounding, noise)
    return q, s_blk


def quantize_tiles(
    t: torch.Tensor, amax_tensor: torch.Tensor, s: Scheme, noise: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiles -> (E2M1 codes, E4M3 block scales)."""
    q, s_blk = scaled_tiles(t, amax_tensor, s, noise)
    return encode(q, s.element), s_blk


def fake_tiles(
    t: torch.Tensor, amax_tensor: torch.Tensor, s: Scheme, noise: torch.Tensor | None
) -> torch.Tensor:
    """Tiles -> their dequantized values, skipping the codes (the fused fast path's body).

    Under torch.compile it rounds with the compare-based `round_to_grid_fast`, which vectorises; eagerly,
    the bit-cast `round_to_grid` takes fewer kernel launches. Both give the same bits."""
    q, s_blk = scaled_tiles(t, amax_tensor, s, noise, fast=torch.compiler.is_compiling())
    d = decode_scale(amax_tensor, global_e4m3_max(s)).unsqueeze(-1)
    return q * s_blk.to(torch.float32).unsqueeze(-1) * d


def decode_scale(amax_tensor: torch.Tensor, bound: float = E4M3.max) -> torch.Tensor:
    """The second-level decode scale amax / (bound * 6), the GEMM's alpha per operand (TE `qgemm`)."""
    return div(amax_tensor, bound * FP4_MAX)


def dequantize_tiles(
    codes: torch.Tensor, s_blk: torch.Tensor, amax_tensor: torch.Tensor, s: Scheme
) -> torch.Tensor:
    d = decode_scale(amax_tensor, global_e4m3_max(s)).unsqueeze(-1)
    return decode(codes, s.element) * s_blk.to(torch.float32).unsqueeze(-1) * d


def store(codes_working: torch.Tensor) -> torch.Tensor:
    return pack_fp4(codes_working)


def load(packed: torch.Tensor) -> torch.Tensor:
    return unpack_fp4(packed)
