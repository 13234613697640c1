"""`quantize`: the plain reference path from a high-precision tensor to a `QuantizedTensor`.

Steps, for every scheme: check the input; build the fp32 working layout (blocked axis last, zero padded);
optionally rotate it with the 16-point Hadamard transform; gather each scale's elements into tiles;
compute scales from tile amaxes; round elements (RNE, ties-away or stochastic, saturating); encode.
"""

from __future__ import annotations

import torch

from tenfold.formats import fp8, mx, nvfp4
from tenfold.formats.blocking import tiles, to_working, untile
from tenfold.formats.e8m0 import scale_amax
from tenfold.formats.hadamard import rotate
from tenfold.formats.rounding import Rounding, sr_noise
from tenfold.formats.scheme import Family, Scaling, Scheme
from tenfold.formats.state import AmaxHistory
from tenfold.formats.tensor import QuantizedTensor

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def check_input(x: object, s: object) -> None:
    """Raise TypeError/ValueError naming the problem with a quantize() call's arguments."""
    if not isinstance(s, Scheme):
        raise TypeError(f"scheme must be a tenfold.formats.Scheme (use scheme(name)), got {type(s).__name__}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{s.name}: cannot quantize a {x.dtype} tensor; "
            "expected one of float32, bfloat16, float16, float64"
        )


def working_tiles(x: torch.Tensor, s: Scheme) -> tuple[torch.Tensor, torch.Tensor]:
    """(working layout, its tiles) for `x`, Hadamard-rotated when the scheme asks for it."""
    xw = to_working(x.detach(), s)
    if s.hadamard:
        xw = rotate(xw, s.hadamard_signs)
    return xw, tiles(xw, s)


def noise_for(
    xw: torch.Tensor, t: torch.Tensor, s: Scheme, offset: int | torch.Tensor
) -> torch.Tensor | None:
    """Stochastic-rounding noise indexed by position in the working layout, shaped like the tiles."""
    if s.rounding != Rounding.STOCHASTIC:
        return None
    return tiles(sr_noise(xw.shape, s.seed, offset, xw.device), s).reshape(t.shape)


def tile_scale_fp8(t: torch.Tensor, s: Scheme, state: AmaxHistory | None) -> torch.Tensor:
    """Per-tile FP8 scale; delayed scaling takes it from `state` and records this tensor's amax there."""
    amax = scale_amax(t, s.nonfinite, dim=-1)
    if s.scaling == Scaling.DELAYED:
        if state is None:
            raise ValueError(f"{s.name}: delayed scaling needs an AmaxHistory passed as state=")
        state.observe(amax)
        return state.scale.to(t.device).reshape(1)
    return fp8.scale_from_amax(amax, s)


def quantize(
    x: torch.Tensor, scheme: Scheme, *, state: AmaxHistory | None = None, offset: int = 0
) -> QuantizedTensor:
    """Quantize `x` with `scheme` and return its codes, scales and metadata.

    `state` carries the amax history for delayed-scaling schemes; `offset` advances the stochastic
    rounding counter (the noise for element i is a function of (seed, offset + i) only).
    """
    check_input(x, scheme)
    s = scheme
    shape, dtype = tuple(x.shape), x.dtype
    if x.numel() == 0:
        return _empty(x, s)
    xw, t = working_tiles(x, s)
    noise = noise_for(xw, t, s, offset)
    amax = None
    if s.family == Family.MX:
        codes, scale_codes = mx.quantize_tiles(t, s, noise)
        codes, scales = mx.store(untile(codes, s, tuple(xw.shape)), scale_codes, s)
    elif s.family == Family.NVFP4:
        amax = nvfp4.tensor_amax(xw, s)
        codes, scales = nvfp4.quantize_tiles(t, amax, s, noise)
        codes = nvfp4.store(_untile_codes(codes, s, xw.shape))
    else:
        scale = tile_scale_fp8(t, s, state)
        codes, scale_inv = fp8.quantize_tiles(t, scale, s, noise)
        codes = _untile_codes(codes, s, xw.shape)
        scales = scale_inv.reshape(()) if s.family == Family.TENSOR else scale_inv
    return QuantizedTensor(
        codes=codes,
        scales=scales,
        amax=amax,
        scheme=s,
        shape=shape,
        dtype=dtype,
        working_shape=tuple(xw.shape),
    )


def _untile_codes(codes: torch.Tensor, s: Scheme, working_shape: tuple[int, ...]) -> torch.Tensor:
    if codes.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return untile(codes.view(torch.uint8), s, working_shape).view(codes.dtype)
    return untile(codes, s, working_shape)


def _empty(x: torch.Tensor, s: Scheme) -> QuantizedTensor:
    """An empty tensor quantizes to empty codes and scales of the right dtypes."""
    dev = x.device
    if s.family == Family.MX:
        codes = torch.empty(0, dtype=torch.int8 if s.element.is_int else torch.uint8, device=dev)
        scales = torch.empty(0, dtype=torch.float8_e8m0fnu, device=dev)
    elif s.family == Family.NVFP4:
        codes = torch.empty(0, dtype=torch.uint8, device=dev)
        scales = torch.empty(0, dtype=torch.float8_e4m3fn, device=dev)
    else:
        codes = torch.empty(0, dtype=s.element.torch_dtype, device=dev)
        scales = torch.ones((), dtype=torch.float32, device=dev)
    amax = torch.zeros((), device=dev) if s.family == Family.NVFP4 else None
    return QuantizedTensor(
        codes=codes,
        scales=scales,
        amax=amax,
        scheme=s,
        shape=tuple(x.shape),
        dtype=x.dtype,
        working_shape=(0,),
    )
