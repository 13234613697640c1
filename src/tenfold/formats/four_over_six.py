"""NVFP4 "Four Over Six" (4/6): each block keeps the better of two block scales.

E2M1's grid {0, 0.5, 1, 1.5, 2, 3, 4, 6} is coarsest at the top: values between 4 and 6 of a block
scaled so that its max maps to 6 round with up to 1/6 relative error. Cook et al., "Four Over Six: More
Accurate NVFP4 Quantization with Adaptive Block Scaling" (arXiv 2512.02010, https://arxiv.org/abs/2512.02010)
quantize every block twice, with its max mapped to 6 (the usual rule) and to 4 (a 1.5x larger block
scale), and keep the candidate with the lower error. The algorithm is that of Transformer Engine 2.15+
(`_quantize_blockwise_4over6_reference` in transformer_engine/pytorch/custom_recipes/reference_nvfp4.py,
https://github.com/NVIDIA/TransformerEngine), with the global scale g_enc = bound * 6 / amax_tensor
(bound 256 by default; see `Scheme.four_over_six_e4m3_max`):

    base  = (amax_block / 6) * g_enc                       (fp32, in this order)
    s_4   = e4m3(clamp(base * 1.5, +-448)),  s_6 = e4m3(clamp(base, +-448))     (RNE casts)
    q_k   = e2m1(clamp(x * min(1 / (fp32(s_k) * g_dec), FLT_MAX), +-6))          (RNE)
    err_k = sum over the block's elements, in element order, of |d| (mae) or d * d (mse), where
            d = ((q_k * fp32(s_k)) * amax_tensor) / (6 * bound) - x            (the input domain)
    keep map-to-4 where err_4 < err_6 (ties keep map-to-6)

For 16x16 blocks each row of 16 is summed in element order and the 16 row sums are added as a tree
(rows i and i + 8, then i + 4, i + 2, i + 1), the order of TE's CUDA warp reduction. TE's optional
"fast math" error (in the FP16 product domain) is not emulated. Under row scaling (`Scheme.row_scaled`)
`amax_tensor` is the row's amax.
"""

from __future__ import annotations

import torch

from tenfold.formats.division import div
from tenfold.formats.elements import E2M1, E4M3
from tenfold.formats.rounding import round_to_grid, round_to_grid_fast
from tenfold.formats.scheme import Scheme

FP4_MAX = 6.0
FLT_MAX = torch.finfo(torch.float32).max
MAP4_FACTOR = 1.5  # 6 / 4: the map-to-4 block scale is 1.5x the map-to-6 one


def candidate(
    t: torch.Tensor, base: torch.Tensor, factor: float | None, g_dec: torch.Tensor, s: Scheme, fast: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """One candidate: (on-grid E2M1 values, E4M3 block scales) for block scales base * factor."""
    dec = base * factor if factor is not None else base
    s_blk = torch.clamp(dec, min=-E4M3.max, max=E4M3.max).to(torch.float8_e4m3fn)
    enc = torch.clamp(div(1.0, s_blk.to(torch.float32) * g_dec), max=FLT_MAX)
    rnd = round_to_grid_fast if fast else round_to_grid
    return rnd(t * enc.unsqueeze(-1), E2M1, s.rounding, None), s_blk


def block_error(
    t: torch.Tensor, q: torch.Tensor, s_blk: torch.Tensor, amax_tensor: torch.Tensor, s: Scheme, bound: float
) -> torch.Tensor:
    """Per-block error (..., nblocks) of on-grid values `q` against the tiles `t`, summed in TE's order."""
    rows, cols = s.block
    qv = q.unflatten(-1, (rows, cols))
    tv = t.unflatten(-1, (rows, cols))
    sf = s_blk.to(torch.float32).unsqueeze(-1)
    amax = amax_tensor.unsqueeze(-1)
    denom = FP4_MAX * float(bound)  # exact: 1536 or 2688
    err = torch.zeros_like(tv[..., 0])
    for c in range(cols):  # sequential in element order, as TE's loop over the block
        d = div(qv[..., c] * sf * amax, denom) - tv[..., c]
        err = err + (d * d if s.four_over_six == "mse" else d.abs())
    while err.shape[-1] > 1:  # 16x16 blocks: the warp's tree over the 16 row sums
        half = err.shape[-1] // 2
        err = err[..., :half] + err[..., half:]
    return err.squeeze(-1)


def choose(
    t: torch.Tensor, amax_tensor: torch.Tensor, g_enc: torch.Tensor, s: Scheme, bound: float, fast: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(on-grid E2M1 values, chosen E4M3 block scales, True where map-to-4 won) for tiles (..., nblocks, k).

    `g_enc` is the global encode scale computed with `bound` (256 or 448) in place of 448; `fast` rounds
    with the compiler-friendly `round_to_grid_fast` (same bits)."""
    g_dec = div(1.0, g_enc)
    base = div(t.abs().amax(dim=-1), FP4_MAX) * g_enc
    q4, s4 = candidate(t, base, MAP4_FACTOR, g_dec, s, fast)
    q6, s6 = candidate(t, base, None, g_dec, s, fast)
    pick4 = block_error(t, q4, s4, amax_tensor, s, bound) < block_error(t, q6, s6, amax_tensor, s, bound)
    q = torch.where(pick4.unsqueeze(-1), q4, q6)
    s_blk = torch.where(pick4, s4.view(torch.uint8), s6.view(torch.uint8)).view(torch.float8_e4m3fn)
    return q, s_blk, pick4


def scaled_tiles(
    t: torch.Tensor, amax_tensor: torch.Tensor, g_enc: torch.Tensor, s: Scheme, bound: float, fast: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiles (..., nblocks, 16 or 256) -> (on-grid E2M1 values, chosen E4M3 block scales (..., nblocks))."""
    q, s_blk, _ = choose(t, amax_tensor, g_enc, s, bound, fast)
    return q, s_blk
