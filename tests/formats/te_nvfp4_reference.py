"""An independent, plain NumPy transcription of Transformer Engine's NVFP4 reference quantizer.

Written from the algorithm in TE `transformer_engine/pytorch/custom_recipes/reference_nvfp4.py`
(`_quantize_blockwise_reference`, `cast_to_fp4x2`, `_apply_rht`), in float32 NumPy scalars and arrays,
sharing no code with tenfold. E4M3 casts go through ml_dtypes (RNE); E2M1 codes use TE's threshold
table, which is RNE, and which maps an exact -0.0 to code 0 (+0).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

F32 = np.float32
FLT_MAX = F32(np.finfo(np.float32).max)
TE_SIGNS = [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]


def hadamard16(signs: list[int]) -> np.ndarray:
    h = np.array([[1.0]])
    while h.shape[0] < 16:
        h = np.block([[h, h], [h, -h]])
    return np.diag(np.array(signs, dtype=np.float64)) @ h / 4.0


def rht_exact(x: np.ndarray, signs: list[int] = TE_SIGNS) -> np.ndarray:
    """x . H along 16-tiles of the last axis, computed in float64 then rounded once to float32."""
    m, n = x.shape
    y = (x.astype(np.float64).reshape(-1, 16) @ hadamard16(signs)).reshape(m, n)
    return y.astype(np.float32)


def cast_to_fp4(x: np.ndarray) -> np.ndarray:
    """TE `cast_to_fp4x2` before packing: the E2M1 code of each (already scaled, clamped) value."""
    out = np.zeros(x.shape, dtype=np.uint8)
    a = np.abs(x)
    bounds = [
        (0.25, True),
        (0.75, False),
        (1.25, True),
        (1.75, False),
        (2.5, True),
        (3.5, False),
        (5.0, True),
    ]
    mag = np.full(x.shape, 7, dtype=np.uint8)
    for code in range(6, -1, -1):
        edge, inclusive = bounds[code]
        below = a <= edge if inclusive else a < edge
        mag = np.where(below, code, mag)
    neg = x < 0  # -0.0 < 0 is False: TE gives +0 for an exact negative zero
    out = mag + 8 * neg.astype(np.uint8)
    return out.astype(np.uint8)


def quantize_nvfp4(x: np.ndarray, tile: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """(E2M1 codes (m, n), E4M3 scale bytes (m/ty, n/16), global amax) for a 2-D float32 array."""
    x = x.astype(np.float32)
    m, n = x.shape
    ty, tx = tile
    amax = F32(np.max(np.abs(x)))
    with np.errstate(divide="ignore"):
        g_enc = F32(F32(448.0) * F32(6.0)) / amax
    g_enc = min(g_enc, FLT_MAX)
    if g_enc == 0:
        g_enc = F32(1.0)
    g_dec = F32(1.0) / g_enc
    mult = g_enc * (F32(1.0) / F32(6.0))
    blocks = np.abs(x).reshape(m // ty, ty, n // tx, tx).max(axis=(1, 3))  # (m/ty, n/tx)
    dec = np.minimum(blocks * mult, FLT_MAX)
    dec = np.clip(dec, -448.0, 448.0).astype(np.float32)
    dec_e4m3 = dec.astype(ml_dtypes.float8_e4m3fn)
    with np.errstate(divide="ignore"):
        enc = np.minimum(F32(1.0) / (dec_e4m3.astype(np.float32) * g_dec), FLT_MAX).astype(np.float32)
    enc_full = np.repeat(np.repeat(enc, ty, axis=0), tx, axis=1)
    scaled = np.clip(x * enc_full, -6.0, 6.0).astype(np.float32)
    return cast_to_fp4(scaled), dec_e4m3.view(np.uint8), amax
