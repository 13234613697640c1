"""GEMM operands: a 2-D tensor quantized along one of its axes, returned in the GEMM's own domain.

Each GEMM operand is a matrix quantized along the GEMM's reduction axis: axis 1 for the row-major
operands of fprop and dgrad, axis 0 for both wgrad operands (reduction over tokens) and for W in dgrad
(reduction over out-features). The values come back in the operand's own (natural) layout, so no
transposed copy is ever made: the GEMMs read transposed views, as BLAS does for free.

The values are those a low-precision tensor core multiplies: dequantized codes times scales and, for
schemes with the Hadamard transform, still rotated along the quantization axis (the transform cancels
between the two rotated operands of the GEMM; undoing it on one operand in fp32 would add a rounding
step the hardware does not have).

Two paths with the same signature give the same bits (tests hold them equal):

* `reference_operand`: `tenfold.formats.quantize` to codes and scales, then decode (the plain reference);
* `operand`: a fused computation on a blocked *view* of the operand (blocks of rows or of columns,
  reduced in place), built from the formats core's own scale and rounding functions in the same order,
  compiled with torch.compile for large operands (the kernel cache of `tenfold.formats.compiled`),
  traced inline when the caller is being compiled.

`blocked_parts` exposes the fused path's intermediate values (for the telemetry recorder).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tenfold.formats import AmaxHistory, Scheme, four_over_six, quantize
from tenfold.formats import fp8 as fp8_math
from tenfold.formats import nvfp4 as nvfp4_math
from tenfold.formats.blocking import from_working
from tenfold.formats.compiled import COMPILE_MIN_NUMEL, compiled_copy
from tenfold.formats.division import div
from tenfold.formats.e8m0 import (
    NonFinite,
    decode_e8m0,
    quantization_reciprocal,
    scale_amax,
    select_exponent,
)
from tenfold.formats.fake import QUANT_PATHS
from tenfold.formats.rounding import Rounding, round_to_grid, round_to_grid_fast, sr_noise
from tenfold.formats.scheme import HADAMARD_SIZE, Family, Scaling


def axis_matters(s: Scheme) -> bool:
    """False for schemes whose values do not depend on the quantization axis (per tensor, 2-D blocks)."""
    return not (s.family == Family.TENSOR or s.is_2d)


def _axis_scheme(s: Scheme, axis: int) -> Scheme:
    """The formats-core scheme that quantizes along `axis` of a 2-D operand."""
    return s.with_options(axis=axis) if axis_matters(s) and axis == 0 else s


def _ceil_to(n: int, k: int) -> int:
    return -(-n // k) * k


def padded_shape(rows: int, cols: int, s: Scheme, axis: int) -> tuple[int, int]:
    """Natural-layout shape after padding to whole blocks (the formats working layout, un-transposed)."""
    r, c = s.block
    if s.is_2d:
        return _ceil_to(rows, r), _ceil_to(cols, c)
    if r == 0 or c == 0:  # whole tensor or whole rows: no padding
        return rows, cols
    return (rows, _ceil_to(cols, c)) if axis == 1 else (_ceil_to(rows, c), cols)


def _rotate(x: torch.Tensor, signs: tuple[int, ...], axis: int) -> torch.Tensor:
    """The 16-point Hadamard transform along `axis` of a 2-D fp32 matrix (groups of 16 rows or columns).

    The same fp32 operations in the same order as `tenfold.formats.hadamard.rotate` (signs, the four
    butterfly stages pairing i with i + h, then the exact scaling by 1/4), written as 16 explicit slices
    so a compiler keeps a whole group in registers instead of materialising every stage."""
    n = HADAMARD_SIZE
    rows, cols = x.shape
    t = x.view(rows // n, n, cols) if axis == 0 else x.view(rows, cols // n, n)
    d = 1 if axis == 0 else 2
    part = [t.select(d, i) * float(signs[i]) for i in range(n)]
    h = 1
    while h < n:
        nxt = list(part)
        for i in range(n):
            if not i & h:
                nxt[i] = part[i] + part[i + h]
                nxt[i + h] = part[i] - part[i + h]
        part = nxt
        h *= 2
    return (torch.stack(part, dim=d) * 0.25).reshape(rows, cols)


def _round(v: torch.Tensor, s: Scheme, noise: torch.Tensor | None) -> torch.Tensor:
    """`round_to_grid` for the scheme's element format (bit-identical, tests hold it so).

    FP8 elements with round-to-nearest use torch's saturating float8 cast after clamping to +-max (the
    same RNE grid, and a vectorised conversion where the bit-cast formulation compiles to scalar code);
    under compilation other formats take the compare-based `round_to_grid_fast`."""
    fmt = s.element
    if s.rounding == Rounding.NEAREST and fmt.torch_dtype is not None:
        return torch.clamp(v, -fmt.max, fmt.max).to(fmt.torch_dtype).to(torch.float32)
    rnd = round_to_grid_fast if torch.compiler.is_compiling() else round_to_grid
    return rnd(v, fmt, s.rounding, noise)


def _blocked(xp: torch.Tensor, s: Scheme, axis: int) -> tuple[torch.Tensor, tuple[int, ...] | None]:
    """A view of the padded operand with each scale's elements along the returned reduction dims."""
    rows, cols = xp.shape
    r, c = s.block
    if s.is_2d:
        return xp.view(rows // r, r, cols // c, c), (1, 3)
    if r == 0:
        return xp, None  # per tensor: reduce everything
    if c == 0:
        return xp, (axis,)  # per row (axis 1) or per column (axis 0)
    if axis == 1:
        return xp.view(rows, cols // c, c), (2,)
    return xp.view(rows // c, c, cols), (1,)


def _prepare(
    x: torch.Tensor, s: Scheme, axis: int, scale: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stage 1: the padded (and rotated) operand and its per-block factors (enc, dec1, dec2).

    Elements then quantize as q = round(v * enc) and decode as q * dec1 * dec2, in that order, exactly
    the operations of the formats core (`mx`, `nvfp4`, `fp8` tile functions; dec2 is 1 except for NVFP4's
    tensor scale, and multiplying by 1 is exact)."""
    rows, cols = x.shape
    pr, pc = padded_shape(rows, cols, s, axis)
    xp = x.to(torch.float32)
    if (pr, pc) != (rows, cols):
        xp = F.pad(xp, (0, pc - cols, 0, pr - rows))
    if s.hadamard:
        xp = _rotate(xp, s.hadamard_signs, axis)
    v, dims = _blocked(xp, s, axis)
    # the block amax; FP8 scales span more than a block, so under satfinite they ignore infinities
    kind = s.nonfinite if s.family not in (Family.MX, Family.NVFP4) else NonFinite.NAN
    amax = scale_amax(v, kind) if dims is None else scale_amax(v, kind, dim=dims, keepdim=True)
    one = torch.ones((), dtype=torch.float32, device=x.device)
    if s.family == Family.MX:
        code = select_exponent(amax, s.element, s.scale_mode, s.nonfinite)
        return xp, quantization_reciprocal(code, s.scale_mode), decode_e8m0(code), one
    if s.family == Family.NVFP4:
        if s.row_scaled:  # one amax per line along `axis`, shaped to broadcast over the blocked view
            amax_t = scale_amax(xp, s.nonfinite, dim=axis, keepdim=True).unsqueeze(1)
        else:
            amax_t = scale_amax(xp, s.nonfinite)
        bound = nvfp4_math.global_e4m3_max(s)
        g_enc = nvfp4_math.global_encode_scale(amax_t, bound)
        g_dec = div(1.0, g_enc)
        if s.four_over_six:
            s_blk = _four_over_six_scales(v, s, axis, amax_t)
        else:
            s_blk = nvfp4_math.block_scales(amax, g_enc, s).to(torch.float32)
        enc = torch.clamp(div(1.0, s_blk * g_dec), max=nvfp4_math.FLT_MAX)
        return xp, enc, s_blk, nvfp4_math.decode_scale(amax_t, bound)
    sc = fp8_math.scale_from_amax(amax, s) if scale is None else scale.reshape(())
    return xp, sc, div(1.0, sc), one


def _four_over_six_scales(v: torch.Tensor, s: Scheme, axis: int, amax_t: torch.Tensor) -> torch.Tensor:
    """4over6's chosen block scales (fp32, shaped like the block amax of the blocked view `v`).

    The choice is made by `tenfold.formats.four_over_six` on the formats tile layout (a permuted view of
    `v`), so it is the reference's choice; stage 2 then rounds with the chosen scale, which gives the
    chosen candidate's elements again (the same operations on the same values)."""
    fast = torch.compiler.is_compiling()
    if s.is_2d:  # (R/16, 16, C/16, 16) -> tiles (R/16, C/16, 256), rows of the tile in order
        nr, r, nc, c = v.shape
        t = v.permute(0, 2, 1, 3).reshape(nr, nc, r * c)
        amax_tiles = amax_t
    elif axis == 1:  # (rows, nblocks, 16) is already the tile layout
        t = v
        amax_tiles = amax_t.reshape(-1, 1) if s.row_scaled else amax_t
    else:  # (nblocks, 16, cols) -> tiles (cols, nblocks, 16)
        t = v.permute(2, 0, 1)
        amax_tiles = amax_t.reshape(-1, 1) if s.row_scaled else amax_t
    bound = nvfp4_math.global_e4m3_max(s)
    g_enc = nvfp4_math.global_encode_scale(amax_tiles, bound)
    _, s_blk = four_over_six.scaled_tiles(t, amax_tiles, g_enc, s, bound, fast)
    s_blk = s_blk.to(torch.float32)
    if s.is_2d:
        return s_blk[:, None, :, None]
    return s_blk.unsqueeze(-1) if axis == 1 else s_blk.t().unsqueeze(1)


def _noise(
    xp: torch.Tensor, v: torch.Tensor, s: Scheme, axis: int, offset: int | torch.Tensor
) -> torch.Tensor | None:
    """Stochastic-rounding noise for the padded operand `xp`, shaped like its blocked view `v`.

    Element noise is indexed by position in the formats working layout (blocked axis last), so the
    fused path draws the same noise as the reference quantizer."""
    if s.rounding != Rounding.STOCHASTIC:
        return None
    pr, pc = xp.shape
    if axis == 0 and axis_matters(s):
        noise = sr_noise((pc, pr), s.seed, offset, xp.device).t()
    else:
        noise = sr_noise((pr, pc), s.seed, offset, xp.device)
    return noise.reshape(v.shape)


def _apply(
    xp: torch.Tensor,
    enc: torch.Tensor,
    dec1: torch.Tensor,
    dec2: torch.Tensor,
    s: Scheme,
    axis: int,
    offset: int | torch.Tensor,
    rows: int,
    cols: int,
) -> torch.Tensor:
    """Stage 2: round every element with its block's factors; back to the natural (rows, cols) layout."""
    pr, pc = xp.shape
    v, _ = _blocked(xp, s, axis)
    q = _round(v * enc, s, _noise(xp, v, s, axis, offset))
    return (q * dec1 * dec2).reshape(pr, pc)[:rows, :cols]


def _fused_operand(
    x: torch.Tensor, s: Scheme, axis: int, scale: torch.Tensor | None, offset: int | torch.Tensor
) -> torch.Tensor:
    """Fake quantization of 2-D `x` along `axis` in the GEMM domain (fp32, natural layout, same shape)."""
    xp, enc, dec1, dec2 = _prepare(x, s, axis, scale)
    return _apply(xp, enc, dec1, dec2, s, axis, offset, x.shape[0], x.shape[1])


_COMPILE_FAILED: set[Scheme] = set()


def _check(x: torch.Tensor, s: Scheme, axis: int, scale: torch.Tensor | None) -> None:
    if x.ndim != 2:
        raise ValueError(f"GEMM operands are 2-D, got shape {tuple(x.shape)}")
    if axis not in (0, 1):
        raise ValueError(f"axis must be 0 or 1, got {axis}")
    if s.axis != -1:
        raise ValueError(f"{s.name}: pass the quantization axis as `axis`, not in the scheme")
    if s.scaling == Scaling.DELAYED and scale is None:
        raise ValueError(f"{s.name}: delayed scaling needs its scale")


def operand(
    x: torch.Tensor,
    s: Scheme,
    axis: int,
    *,
    scale: torch.Tensor | None = None,
    offset: torch.Tensor | int = 0,
    backend: str = "auto",
) -> torch.Tensor:
    """Fake-quantized GEMM operand: fp32, the shape and layout of the 2-D `x`, blocks along `axis`.

    `scale`: the per-tensor FP8 scale of delayed scaling (a 1-element tensor), else None.
    `offset`: stochastic-rounding counter offset (int or int64 tensor).
    `backend`: one of `QUANT_PATHS`: auto | eager | compiled | reference (the last calls
    `reference_operand`).
    """
    _check(x, s, axis, scale)
    if backend not in QUANT_PATHS:
        raise ValueError(f"unknown quantization backend {backend!r}; valid: {', '.join(QUANT_PATHS)}")
    if backend == "reference":
        return reference_operand(x, s, axis, scale=scale, offset=offset)
    x = x.detach()
    small = x.numel() < COMPILE_MIN_NUMEL
    if torch.compiler.is_compiling() or backend == "eager" or (backend == "auto" and small):
        return _fused_operand(x, s, axis, scale, offset)
    if s not in _COMPILE_FAILED:
        try:
            # the two stages compile separately on purpose: fused into one kernel, inductor recomputes
            # each block's scale (divisions, an E4M3 cast) for every element, or scalarises it per block
            key = (s, axis, tuple(x.shape), x.dtype, x.device.type)
            label = f"{s.name}_{axis}"
            off = offset if isinstance(offset, torch.Tensor) else torch.tensor(offset)
            xp, enc, dec1, dec2 = compiled_copy(_prepare, label, key)(x, s, axis, scale)
            apply = compiled_copy(_apply, label, key)
            off = off.to(device=x.device, dtype=torch.int64)
            return apply(xp, enc, dec1, dec2, s, axis, off, x.shape[0], x.shape[1])
        except Exception as err:  # no C++ toolchain or Triton: keep training, eagerly
            _COMPILE_FAILED.add(s)
            warnings.warn(f"torch.compile failed for {s.name} ({err!r:.200}); using eager", stacklevel=2)
    return _fused_operand(x, s, axis, scale, offset)


def reference_operand(
    x: torch.Tensor,
    s: Scheme,
    axis: int,
    *,
    scale: torch.Tensor | None = None,
    offset: torch.Tensor | int = 0,
) -> torch.Tensor:
    """The plain reference: `quantize` along `axis` to codes and scales, decode, back to `x`'s layout."""
    _check(x, s, axis, scale)
    sa = _axis_scheme(s, axis)
    state = None
    if s.scaling == Scaling.DELAYED:
        assert scale is not None
        state = AmaxHistory(length=1, fp8_max=s.element.max)
        state.scale = scale.detach().to(torch.float32).reshape(()).clone()
    off = int(offset) if isinstance(offset, torch.Tensor) else offset
    q = quantize(x.detach(), sa, state=state, offset=off)
    return from_working(q.dequantize_working(), sa, tuple(x.shape)).contiguous()


@dataclass(frozen=True, kw_only=True)
class BlockedParts:
    """The fused path's intermediate values for one operand, in the blocked view of the padded operand.

    Fields:
        v: the (padded, rotated) operand, each scale block's elements along `dims`.
        dims: the dims of `v` that one block reduces over (None: the whole tensor is one block).
        scaled: v · enc, the values rounded to the element grid.
        q: the rounded elements.
        dec1, dec2: the decode factors (first-level block scale; NVFP4's tensor scale, else 1).
    """

    v: torch.Tensor
    dims: tuple[int, ...] | None
    scaled: torch.Tensor
    q: torch.Tensor
    dec1: torch.Tensor
    dec2: torch.Tensor

    @property
    def decoded(self) -> torch.Tensor:
        """q · dec1 · dec2: the values the GEMM multiplies, in the blocked view."""
        return self.q * self.dec1 * self.dec2


def blocked_parts(
    x: torch.Tensor, s: Scheme, axis: int, *, scale: torch.Tensor | None = None, offset: int = 0
) -> BlockedParts:
    """Quantize the 2-D operand `x` along `axis` by the fused path's own stages, keeping every step.

    The operations and their order are those of `operand` (stage 1, then rounding and decoding as in
    stage 2), eagerly, so `decoded` holds the very bits `operand` returns (tests hold them equal); the
    telemetry recorder measures clipping, underflow and scales from these parts."""
    _check(x, s, axis, scale)
    xp, enc, dec1, dec2 = _prepare(x.detach(), s, axis, scale)
    v, dims = _blocked(xp, s, axis)
    scaled = v * enc
    q = _round(scaled, s, _noise(xp, v, s, axis, offset))
    return BlockedParts(v=v, dims=dims, scaled=scaled, q=q, dec1=dec1, dec2=dec2)
