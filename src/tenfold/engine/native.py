"""Native low-precision GEMMs: the formats core's codes and scales multiplied by `torch._scaled_mm`.

Operands are quantized by `tenfold.formats.quantize` (bit-exact codes, the same as the emulated path
uses), so native and emulated differ only in how the products are accumulated. Supported pairings:

* per-tensor FP8 (`TensorWise`) and row-wise FP8 (`RowWise`): SM89+ (Ada, Hopper, Blackwell); torch also
  has CPU kernels for these two, which the tests use to check the layouts here;
* MXFP8 / MXFP4 (`BlockWise1x32`, E8M0 scales) and NVFP4 (`BlockWise1x16` E4M3 scales plus the fp32
  tensor scale): SM100 (B200/GB200), through `torch.nn.functional.scaled_mm` (torch >= 2.10).

Scales of block formats go to cuBLAS in its swizzled layout (cuBLAS docs §3.1.5.1, "1D Block Scaling
Factors Layout", https://docs.nvidia.com/cuda/cublas/: 128x4 tiles of the (rows, K/block) scale matrix,
stored as 32 x 16 with row 32i+j of a tile at offset 16j + 4i). E5M2 x E5M2 is not a cuBLAS FP8
combination; FP6, MX INT8 and the DeepSeek block-FP8 layouts have no native path here and run emulated.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tenfold.formats import AmaxHistory, QuantizedTensor, Scheme, quantize
from tenfold.formats.elements import E2M1, E4M3, E5M2
from tenfold.formats.nvfp4 import decode_scale, global_e4m3_max
from tenfold.formats.scheme import Family, Scaling

ALIGN = 16  # cuBLAS FP8 GEMMs want every dimension divisible by 16


def _ceil_to(n: int, m: int) -> int:
    return -(-n // m) * m


def pairing(sa: Scheme, sb: Scheme) -> str | None:
    """The `_scaled_mm` scaling pairing of two operand schemes, or None when there is none."""
    if sa.family != sb.family:
        return None
    fam = sa.family
    if fam in (Family.TENSOR, Family.ROW):
        if sa.element == E5M2 and sb.element == E5M2:
            return None
        return "tensorwise" if fam == Family.TENSOR else "rowwise"
    if fam == Family.MX and sa.element == sb.element and sa.element in (E4M3, E5M2, E2M1):
        return "mx"
    if fam == Family.NVFP4 and not (sa.row_scaled or sb.row_scaled):
        return "nvfp4"  # a row-scaled operand's per-row second level is no TensorWise scale
    return None


def unsupported_reason(sa: Scheme, sb: Scheme, capability: tuple[int, int] | None) -> str | None:
    """Why this operand pair cannot run natively on a device (None when it can).

    `capability` is the CUDA compute capability, or None for the CPU."""
    kind = pairing(sa, sb)
    if kind is None:
        return f"no native GEMM for {sa.name} x {sb.name}"
    if capability is None:
        if kind in ("tensorwise", "rowwise"):
            return None
        return f"{kind} GEMMs need a Blackwell GPU (SM100); this is a CPU"
    need = (8, 9) if kind in ("tensorwise", "rowwise") else (10, 0)
    if capability < need:
        return f"{kind} GEMMs need SM{need[0]}{need[1]}+, this GPU is SM{capability[0]}{capability[1]}"
    if kind in ("mx", "nvfp4"):
        if capability[0] != 10:
            sm = f"SM{capability[0]}{capability[1]}"
            return f"{kind} GEMMs are implemented for SM100/SM103 here, this GPU is {sm}"
        if not hasattr(F, "scaled_mm"):
            return f"{kind} GEMMs need torch.nn.functional.scaled_mm (torch >= 2.10)"
    return None


def swizzle_scales(s: torch.Tensor) -> torch.Tensor:
    """A (rows, cols) scale matrix in cuBLAS's 128x4-tile layout, zero padded, flattened."""
    rows, cols = s.shape
    r, c = _ceil_to(rows, 128), _ceil_to(cols, 4)
    raw = s.view(torch.uint8)
    p = torch.zeros(r, c, dtype=torch.uint8, device=s.device)
    p[:rows, :cols] = raw
    # [row tile, i, j, col tile, k] with row = 32 i + j inside a tile -> [row tile, col tile, j, i, k]
    t = p.view(r // 128, 4, 32, c // 4, 4).permute(0, 3, 2, 1, 4)
    return t.reshape(-1).contiguous().view(s.dtype)


def _quantize(
    x: torch.Tensor, s: Scheme, scales: torch.Tensor | None, tensor: str, offset: torch.Tensor
) -> QuantizedTensor:
    state = None
    if s.scaling == Scaling.DELAYED:
        assert scales is not None
        state = AmaxHistory(length=1, fp8_max=s.element.max)
        state.scale = scales[{"x": 0, "w": 1, "dy": 2}[tensor]].detach().to(torch.float32).clone()
    return quantize(x, s, state=state, offset=int(offset))


def _pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    if t.shape[0] == rows:
        return t
    dtype = t.dtype
    raw = t.view(torch.uint8) if t.element_size() == 1 else t
    p = torch.zeros((rows, *raw.shape[1:]), dtype=raw.dtype, device=t.device)
    p[: t.shape[0]] = raw
    return p.view(dtype) if t.element_size() == 1 else p


def _out_dtype(kind: str, device: torch.device) -> torch.dtype:
    # CUDA row-wise and block-scaled GEMMs write bf16 only; per-tensor and CPU kernels can write fp32
    return torch.float32 if device.type == "cpu" or kind == "tensorwise" else torch.bfloat16


def scaled_mm(
    a: torch.Tensor,
    sa: Scheme,
    b: torch.Tensor,
    sb: Scheme,
    scales: torch.Tensor | None,
    tensors: tuple[str, str],
    offset: torch.Tensor,
) -> torch.Tensor:
    """a · bᵀ (fp32 result) for a (M, K), b (N, K), both quantized along K, on the tensor cores."""
    kind = pairing(sa, sb)
    assert kind is not None, f"no native pairing for {sa.name} x {sb.name}"
    m, n = a.shape[0], b.shape[0]
    qa = _quantize(a, sa, scales, tensors[0], offset)
    qb = _quantize(b, sb, scales, tensors[1], offset)
    dev = a.device
    out_dtype = _out_dtype(kind, dev)
    if kind in ("tensorwise", "rowwise"):
        # pad M, N and K to multiples of 16 with zero codes (zero rows/columns add nothing)
        mp, np_, kp = (_ceil_to(v, ALIGN) for v in (m, n, a.shape[1]))
        ca = _pad_cols(_pad_rows(qa.codes, mp), kp)
        cb = _pad_cols(_pad_rows(qb.codes, np_), kp)
        if kind == "tensorwise":
            sa_t = qa.scales.reshape(()).to(torch.float32)
            sb_t = qb.scales.reshape(()).to(torch.float32)
        else:
            sa_t = _pad_rows(qa.scales.reshape(m, 1).to(torch.float32), mp)
            sb_t = _pad_rows(qb.scales.reshape(n, 1).to(torch.float32), np_).reshape(1, np_).contiguous()
        out = torch._scaled_mm(
            ca, cb.t(), scale_a=sa_t, scale_b=sb_t, out_dtype=out_dtype, use_fast_accum=False
        )
        return out[:m, :n].to(torch.float32)
    from torch.nn.functional import ScalingType, SwizzleType

    if kind == "mx":
        ca, cb = _mx_codes(qa, m), _mx_codes(qb, n)
        mp, np_ = _ceil_to(m, ALIGN), _ceil_to(n, ALIGN)
        ca, cb = _pad_rows(ca, mp), _pad_rows(cb, np_)
        out = F.scaled_mm(
            ca,
            cb.t(),
            swizzle_scales(mx_row_scales(qa, m)),
            ScalingType.BlockWise1x32,
            swizzle_scales(mx_row_scales(qb, n)),
            ScalingType.BlockWise1x32,
            swizzle_a=SwizzleType.SWIZZLE_32_4_4,
            swizzle_b=SwizzleType.SWIZZLE_32_4_4,
            output_dtype=out_dtype,
        )
        return out[:m, :n].to(torch.float32)
    # NVFP4: E2M1 codes packed two per byte, E4M3 block scales per 1x16, fp32 tensor scale as the second level
    ca, sca = _nvfp4_operand(qa, m)
    cb, scb = _nvfp4_operand(qb, n)
    mp, np_ = _ceil_to(m, ALIGN), _ceil_to(n, ALIGN)
    ca, cb = _pad_rows(ca, mp), _pad_rows(cb, np_)
    assert qa.amax is not None and qb.amax is not None
    out = F.scaled_mm(
        ca.view(torch.float4_e2m1fn_x2),
        cb.view(torch.float4_e2m1fn_x2).t(),
        [swizzle_scales(sca), decode_scale(qa.amax, global_e4m3_max(qa.scheme)).reshape(1).to(torch.float32)],
        [ScalingType.BlockWise1x16, ScalingType.TensorWise],
        [swizzle_scales(scb), decode_scale(qb.amax, global_e4m3_max(qb.scheme)).reshape(1).to(torch.float32)],
        [ScalingType.BlockWise1x16, ScalingType.TensorWise],
        swizzle_a=[SwizzleType.SWIZZLE_32_4_4, SwizzleType.NO_SWIZZLE],
        swizzle_b=[SwizzleType.SWIZZLE_32_4_4, SwizzleType.NO_SWIZZLE],
        output_dtype=out_dtype,
    )
    return out[:m, :n].to(torch.float32)


def _pad_cols(t: torch.Tensor, cols: int) -> torch.Tensor:
    if t.shape[1] == cols:
        return t
    raw = t.view(torch.uint8)
    p = torch.zeros(t.shape[0], cols, dtype=torch.uint8, device=t.device)
    p[:, : t.shape[1]] = raw
    return p.view(t.dtype)


def _mx_codes(q: QuantizedTensor, rows: int) -> torch.Tensor:
    """MX element codes of the first `rows` rows as the dtype `scaled_mm` takes (FP8 as is, FP4 packed
    pairs); 32x32-block codes are padded to whole tiles along the rows too."""
    codes = q.codes[:rows]
    if q.scheme.element == E2M1:
        return codes.view(torch.float4_e2m1fn_x2)
    return codes


def mx_row_scales(q: QuantizedTensor, rows: int) -> torch.Tensor:
    """E8M0 scales (rows, K/32) of a 1x32-scaled GEMM operand; 32x32 tile scales are repeated over their 32
    rows, which reproduces them exactly (TE hands 2-D MXFP8 weights to cuBLAS this way, as rowwise
    scales: NVIDIA/TransformerEngine pull request 2634)."""
    sc = q.scales
    if q.scheme.is_2d:
        sc = sc.view(torch.uint8).repeat_interleave(q.scheme.block[0], dim=0)[:rows].view(sc.dtype)
    return sc.reshape(rows, -1).contiguous()


def _nvfp4_operand(q: QuantizedTensor, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed codes (rows, K/2) uint8, E4M3 scales (rows, K/16)); 2-D 16x16 block scales are repeated
    over their 16 rows, which is what a 1x16-scaled GEMM needs to reproduce them."""
    codes = q.codes[:rows]
    sc = q.scales
    if q.scheme.is_2d:
        sc = sc.view(torch.uint8).repeat_interleave(16, dim=0)[:rows].view(torch.float8_e4m3fn)
    return codes.contiguous(), sc.reshape(rows, -1).contiguous()
