"""E8M0 shared scales of the MX formats: choosing the exponent of a block, encoding and decoding it.

E8M0 (OCP Microscaling Formats (MX) v1.0 spec §5.4,
https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf) is an unsigned
8-bit exponent with bias 127: code c in 0..254 means 2^(c-127), 0xFF is NaN; there is no zero and no
infinity. Code 0 = 2^-127 is an fp32 subnormal.

Scale modes (how the block amax picks the exponent):

* ``floor`` (OCP MX v1.0 spec §6.3; Rouhani et al. 2023, https://arxiv.org/abs/2310.10537, Algorithm 1):
  floor(log2 amax) - emax_elem. The scaled block maximum lands in [2^emax, 2^(emax+1)), which can exceed
  the element max and clip: up to 12.5 % on E4M3 (448 vs 512) and 25 % on E2M1 (6 vs 8).
* ``rceil`` (cuBLAS docs, "1D block quantization", https://docs.nvidia.com/cuda/cublas/#d-block-quantization;
  Transformer Engine `float_to_e8m0(amax * max_norm_rcp)`): round amax / elem_max up to a power of two,
  so the scaled maximum never exceeds the element max.
* ``ceil`` (torchao CEIL): floor(log2 amax) + [mantissa(amax) != 0] - emax_elem.
* ``even`` (torchao EVEN): round amax to `mbits` mantissa bits before taking floor(log2).

Non-finite amax: NaN always gives 0xFF. Inf gives 0xFF under the OCP policy (``"nan"``) and 0xFE under
TE's satfinite policy (``"satfinite"``), which then saturates the block's elements to +-max.

The policy (`NonFinite`) covers every scheme family; `scale_amax` is its one rule for the amax a
second-level or FP8 scale is computed from (see `NonFinite`).
"""

from __future__ import annotations

from enum import StrEnum

import torch

from tenfold.formats.elements import ElementFormat

E8M0_BIAS = 127
E8M0_NAN = 0xFF


class ScaleMode(StrEnum):
    FLOOR = "floor"
    RCEIL = "rceil"
    CEIL = "ceil"
    EVEN = "even"


class NonFinite(StrEnum):
    """What an Inf in the input does to the scales (NaN always propagates: a NaN element stays NaN and a
    scale computed over it is NaN).

    * ``nan``: the scale over an Inf is non-finite. MX: the block's E8M0 scale is NaN (0xFF; OCP MX v1.0
      §6.3). NVFP4: TE's reference (`_quantize_blockwise_reference`, reference_nvfp4.py at d0067d0)
      replaces the zero global encode scale by 1, so codes stay finite, but the decode scale
      amax / 2688 is Inf and the whole tensor dequantizes non-finite. FP8: TE's
      `compute_scale_from_amax` gives an Inf amax scale 1, so the Inf saturates and the finite values
      are cast unscaled.
    * ``satfinite``: an Inf is a saturated finite value. Its element saturates to +-max (TE casts with
      PTX `cvt...satfinite`, https://docs.nvidia.com/cuda/parallel-thread-execution/#data-movement-and-
      conversion-instructions-cvt: +-Inf -> +-MAX_NORM); a block scale over it takes the largest finite
      code (E8M0 0xFE as TE's `float_to_e8m0` gives, E4M3 448 by the clamp of the NVFP4 recipe); the
      scales shared beyond one block (NVFP4's per-tensor amax, FP8's per-tensor, row and block scales)
      come from the finite values only (`scale_amax`), so one Inf does not move any other element.
    """

    NAN = "nan"
    SATFINITE = "satfinite"


def scale_amax(
    x: torch.Tensor, nonfinite: NonFinite, dim: int | tuple[int, ...] | None = None, keepdim: bool = False
) -> torch.Tensor:
    """max |x| (over `dim`, or over everything) for a scale shared beyond one block: under
    ``satfinite`` infinities count as 0, so the scale comes from the finite values (NaN stays)."""
    a = x.abs()
    if nonfinite == NonFinite.SATFINITE:
        a = torch.where(torch.isinf(a), torch.zeros_like(a), a)
    return a.amax() if dim is None else a.amax(dim=dim, keepdim=keepdim)


def _fields(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    bits = x.view(torch.int32)
    return (bits >> 23) & 0xFF, bits & 0x7FFFFF


def select_exponent(
    amax: torch.Tensor,
    elem: ElementFormat,
    mode: ScaleMode = ScaleMode.FLOOR,
    nonfinite: NonFinite = NonFinite.NAN,
) -> torch.Tensor:
    """E8M0 codes (uint8) for blocks whose absolute maximum is `amax` (fp32, >= 0 or NaN)."""
    if amax.dtype != torch.float32:
        raise TypeError(f"amax must be float32, got {amax.dtype}")
    if mode == ScaleMode.RCEIL:
        # TE/cuBLAS: d = amax * (1/elem_max) in fp32, then round d up to a power of two:
        # biased exponent + 1 when the mantissa is non-zero, except at the top (0xFE saturates) and
        # for subnormal d <= 2^-127, which rounds to code 0 (TE `ptx_arch_spec.cuh` software path).
        rcp = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(elem.max, dtype=torch.float32)
        d = amax * rcp.to(amax.device)
        e_field, mant = _fields(d)
        round_up = (mant != 0) & (e_field != 0xFE) & ~((e_field == 0) & (mant <= 0x400000))
        code = (e_field + round_up.to(torch.int32)).clamp(max=0xFE)
    else:
        a = amax
        if mode == ScaleMode.EVEN:
            bits = a.view(torch.int32)
            bits = (bits + (1 << (23 - elem.mbits - 1))) & 0x7F800000
            a = bits.view(torch.float32)
        e_field, mant = _fields(a)
        unbiased = e_field - E8M0_BIAS - elem.emax
        if mode == ScaleMode.CEIL:
            unbiased = unbiased + (mant != 0).to(torch.int32)
        code = unbiased.clamp(min=-E8M0_BIAS, max=E8M0_BIAS) + E8M0_BIAS
    inf = torch.isinf(amax)
    inf_code = 0xFE if nonfinite == NonFinite.SATFINITE else E8M0_NAN
    code = torch.where(inf, torch.full_like(code, inf_code), code)
    code = torch.where(torch.isnan(amax), torch.full_like(code, E8M0_NAN), code)
    return code.to(torch.uint8)


def _value_table(device: torch.device) -> torch.Tensor:
    codes = torch.arange(256, dtype=torch.int32)
    vals = torch.where(codes == 0, torch.tensor(0x00400000, dtype=torch.int32), codes << 23)
    out = vals.view(torch.float32).clone()
    out[255] = float("nan")
    return out.to(device)


def _reciprocal_table(device: torch.device) -> torch.Tensor:
    codes = torch.arange(256, dtype=torch.int32)
    # 1 / 2^(c-127) = 2^(127-c): biased exponent 254 - c; 2^-127 (c = 254) is the subnormal 0x00400000.
    vals = torch.where(codes == 254, torch.tensor(0x00400000, dtype=torch.int32), (254 - codes) << 23)
    out = vals.view(torch.float32).clone()
    out[255] = float("nan")
    return out.to(device)


_CACHE: dict[tuple[str, str], torch.Tensor] = {}


def _cached(kind: str, device: torch.device) -> torch.Tensor:
    key = (kind, str(device))
    if key not in _CACHE:
        _CACHE[key] = _value_table(device) if kind == "value" else _reciprocal_table(device)
    return _CACHE[key]


def decode_e8m0(codes: torch.Tensor) -> torch.Tensor:
    """fp32 value 2^(c-127) of each E8M0 code (NaN for 0xFF). Accepts uint8 or float8_e8m0fnu."""
    c = codes.view(torch.uint8) if codes.dtype == torch.float8_e8m0fnu else codes
    return _cached("value", c.device)[c.to(torch.int64)]


def reciprocal_e8m0(codes: torch.Tensor) -> torch.Tensor:
    """fp32 value 2^(127-c), the exact reciprocal of each E8M0 code (NaN for 0xFF)."""
    c = codes.view(torch.uint8) if codes.dtype == torch.float8_e8m0fnu else codes
    return _cached("reciprocal", c.device)[c.to(torch.int64)]


def quantization_reciprocal(codes: torch.Tensor, mode: ScaleMode) -> torch.Tensor:
    """The multiplier applied to a block's elements before rounding them.

    The exact reciprocal 2^(127-c) (OCP: P_i = V_i / X), except that in ``rceil`` mode code 0 uses 1.0:
    TE's `exp2f_rcp` (transformer_engine/common/util/ptx.cuh) and torchao's RCEIL path return 1 for a
    biased exponent of 0, so blocks whose amax is at most 448 * 2^-127 quantize unscaled (to zero).
    """
    rec = reciprocal_e8m0(codes)
    if mode == ScaleMode.RCEIL:
        rec = torch.where(codes == 0, torch.ones_like(rec), rec)
    return rec


def encode_e8m0(values: torch.Tensor) -> torch.Tensor:
    """E8M0 codes of exact powers of two in [2^-127, 2^127] (NaN -> 0xFF); the inverse of decode_e8m0."""
    e_field, mant = _fields(values.to(torch.float32))
    code = torch.where(e_field == 0, torch.zeros_like(e_field), e_field)
    bad = torch.isnan(values) | torch.isinf(values) | (values <= 0) | ((e_field != 0) & (mant != 0))
    bad = bad | ((e_field == 0) & (mant != 0x400000))
    return torch.where(bad, torch.full_like(code, E8M0_NAN), code).to(torch.uint8)
