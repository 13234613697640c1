"""`fake_quantize`: a tensor's values after a round trip through a scheme, with a fused fast path.

The reference is `quantize(x, s).dequantize()`. The fast path computes the same values without
materialising codes (on-grid values are kept as fp32 and multiplied by their scale directly) and, for
tensors large enough to repay it, is compiled with `torch.compile` so the amax reduction, scaling,
rounding and rescaling fuse into a few passes over memory. Tests hold every path bit-exact to the
reference; `backend=` picks one explicitly:

* ``"reference"``: quantize then dequantize;
* ``"eager"``: the fused function, uncompiled;
* ``"compiled"``: the fused function under torch.compile (NVFP4 as two functions, see `_run_compiled`;
  falls back to eager if compilation fails);
* ``"auto"`` (default): compiled for tensors of at least `COMPILE_MIN_NUMEL` elements, eager below.

Compiled functions are memoised per (scheme, shape, dtype, device) in `tenfold.formats.compiled`, the
cache the engine's GEMM operands share.
"""

from __future__ import annotations

import warnings

import torch

from tenfold.formats import fp8, mx, nvfp4
from tenfold.formats.blocking import from_working, untile
from tenfold.formats.compiled import COMPILE_MIN_NUMEL, compiled_copy
from tenfold.formats.division import div
from tenfold.formats.e8m0 import NonFinite, scale_amax
from tenfold.formats.hadamard import rotate
from tenfold.formats.quantize import check_input, noise_for, quantize, working_tiles
from tenfold.formats.rounding import round_to_grid_fast
from tenfold.formats.scheme import Family, Scaling, Scheme
from tenfold.formats.state import AmaxHistory

# how a tensor is fake-quantized (the `backend=` of `fake_quantize` and of the engine's GEMM operands);
# not to be confused with the GEMM backends (emulated or native matmuls) of `tenfold.engine.backend`
QUANT_PATHS = ("auto", "reference", "eager", "compiled")


def _fused(
    x: torch.Tensor, s: Scheme, scale: torch.Tensor | None, offset: int | torch.Tensor
) -> torch.Tensor:
    """Fake-quantized values of `x`; `scale` overrides the FP8 per-tensor scale (delayed scaling)."""
    xw, t = working_tiles(x, s)
    noise = noise_for(xw, t, s, offset)
    if s.family == Family.MX:
        vals = mx.fake_tiles(t, s, noise)
    elif s.family == Family.NVFP4:
        vals = nvfp4.fake_tiles(t, nvfp4.tensor_amax(xw, s), s, noise)
    else:
        if scale is None:
            scale = fp8.scale_from_amax(scale_amax(t, s.nonfinite, dim=-1), s)
        vals = fp8.fake_tiles(t, scale, s, noise)
    xw = untile(vals, s, tuple(xw.shape))
    if s.hadamard:
        xw = rotate(xw, s.hadamard_signs, inverse=True)
    return from_working(xw, s, tuple(x.shape)).to(x.dtype)


def _nvfp4_factors(x: torch.Tensor, s: Scheme) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """NVFP4 stage 1: per-block encode factors, E4M3 block scales (as fp32) and the tensor decode scale.

    The operations of `nvfp4.scaled_tiles` in the same order, on the block amaxes only: one pass over
    the input for the block amaxes; the tensor amax is the max of the block amaxes (the same value:
    max is exact and propagates NaN), except under ``satfinite``, where an Inf's block amax is Inf but
    the tensor amax must ignore it, so it takes its own pass (`scale_amax`)."""
    xw, t = working_tiles(x, s)
    amax_blocks = t.abs().amax(dim=-1)
    satfinite = s.nonfinite == NonFinite.SATFINITE
    amax_tensor = scale_amax(xw, s.nonfinite) if satfinite else amax_blocks.amax()
    g_enc = nvfp4.global_encode_scale(amax_tensor)
    g_dec = div(1.0, g_enc)
    s_blk = nvfp4.block_scales(amax_blocks, g_enc, s).to(torch.float32)
    enc = torch.clamp(div(1.0, s_blk * g_dec), max=nvfp4.FLT_MAX)
    return enc, s_blk, nvfp4.decode_scale(amax_tensor)


def _nvfp4_apply(
    x: torch.Tensor,
    s: Scheme,
    enc: torch.Tensor,
    s_blk: torch.Tensor,
    dec: torch.Tensor,
    offset: int | torch.Tensor,
) -> torch.Tensor:
    """NVFP4 stage 2: round every element with its block's factors and decode, as `nvfp4.fake_tiles`
    does (`q * s_blk * dec`, in that order). The working layout is rebuilt from `x` (a view, or
    pointwise work fused into this pass) rather than stored by stage 1, so `x` is read twice in all."""
    xw, t = working_tiles(x, s)
    noise = noise_for(xw, t, s, offset)
    q = round_to_grid_fast(t * enc.unsqueeze(-1), s.element, s.rounding, noise)
    vals = q * s_blk.unsqueeze(-1) * dec
    xw = untile(vals, s, tuple(xw.shape))
    if s.hadamard:
        xw = rotate(xw, s.hadamard_signs, inverse=True)
    return from_working(xw, s, tuple(x.shape)).to(x.dtype)


def _two_stage(s: Scheme) -> bool:
    """Whether the compiled path splits the scheme's work in two kernels (NVFP4: see `_run_compiled`).

    Only for schemes whose block scales follow from the block amaxes and one tensor amax: plain NVFP4, not
    4over6 (its scale is chosen per block by the rounding error) nor row-scaled NVFP4 (one amax per row)."""
    return s.family == Family.NVFP4 and s.four_over_six is None and not s.row_scaled


_COMPILE_FAILED: set[Scheme] = set()


def _run_compiled(x: torch.Tensor, s: Scheme, scale: torch.Tensor | None, offset: int) -> torch.Tensor:
    """The fused function compiled for `x`'s (scheme, shape, dtype, device).

    NVFP4 compiles as two functions: in one kernel, inductor computes each 16-element block's scale
    (three divisions and an E4M3 cast) as scalar code inside the element loop, which makes the kernel
    compute-bound; compiled apart, stage 1 computes all block scales as one vectorised pass over the
    (16x smaller) block amaxes and stage 2 is a plain element-wise pass."""
    if s not in _COMPILE_FAILED:
        try:
            key = (s, tuple(x.shape), x.dtype, x.device.type)
            # the offset travels as a tensor so that a new stochastic-rounding offset is not a recompile
            off = torch.tensor(offset, dtype=torch.int64, device=x.device)
            if _two_stage(s):
                factors = compiled_copy(_nvfp4_factors, s.name, key)(x, s)
                return compiled_copy(_nvfp4_apply, s.name, key)(x, s, *factors, off)
            return compiled_copy(_fused, s.name, key)(x, s, scale, off)
        except Exception as err:  # compilers can be missing (no C++ toolchain, no Triton)
            _COMPILE_FAILED.add(s)
            warnings.warn(
                f"torch.compile failed for {s.name} ({err!r:.200}); using the eager path", stacklevel=3
            )
    return _fused(x, s, scale, offset)


def fake_quantize(
    x: torch.Tensor,
    scheme: Scheme,
    *,
    state: AmaxHistory | None = None,
    offset: int = 0,
    backend: str = "auto",
) -> torch.Tensor:
    """Values of `quantize(x, scheme).dequantize()`, same shape and dtype as `x`, by the fastest path.

    `state` is the amax history of delayed-scaling schemes (its amax is recorded, as `quantize` does);
    `offset` advances the stochastic-rounding counter.
    """
    check_input(x, scheme)
    if backend not in QUANT_PATHS:
        raise ValueError(f"unknown backend {backend!r}; valid: {', '.join(QUANT_PATHS)}")
    if backend == "reference" or x.numel() == 0:
        return quantize(x, scheme, state=state, offset=offset).dequantize()
    x = x.detach()
    scale = None
    if scheme.scaling == Scaling.DELAYED:
        if state is None:
            raise ValueError(f"{scheme.name}: delayed scaling needs an AmaxHistory passed as state=")
        state.observe(scale_amax(x, scheme.nonfinite).to(torch.float32))
        scale = state.scale.to(x.device).reshape(1)
    if backend == "compiled" or (backend == "auto" and x.numel() >= COMPILE_MIN_NUMEL):
        return _run_compiled(x, scheme, scale, offset)
    return _fused(x, scheme, scale, offset)
