"""`fake_quantize`: a tensor's values after a round trip through a scheme, with a fused fast path.

The reference is `quantize(x, s).dequantize()`. The fast path computes the same values without
materialising codes (on-grid values are kept as fp32 and multiplied by their scale directly) and, for
tensors large enough to repay it, is compiled with `torch.compile` so the amax reduction, scaling,
rounding and rescaling fuse into a few passes over memory. Tests hold every path bit-exact to the
reference; `backend=` picks one explicitly:

* ``"reference"``: quantize then dequantize;
* ``"eager"``: the fused function, uncompiled;
* ``"compiled"``: the fused function under torch.compile (falls back to eager if compilation fails);
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
from tenfold.formats.e8m0 import scale_amax
from tenfold.formats.hadamard import rotate
from tenfold.formats.quantize import check_input, noise_for, quantize, working_tiles
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


_COMPILE_FAILED: set[Scheme] = set()


def _run_compiled(x: torch.Tensor, s: Scheme, scale: torch.Tensor | None, offset: int) -> torch.Tensor:
    if s not in _COMPILE_FAILED:
        try:
            fn = compiled_copy(_fused, s.name, (s, tuple(x.shape), x.dtype, x.device.type))
            # the offset travels as a tensor so that a new stochastic-rounding offset is not a recompile
            return fn(x, s, scale, torch.tensor(offset, dtype=torch.int64, device=x.device))
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
