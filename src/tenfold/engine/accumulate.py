"""How an emulated GEMM accumulates: exact fp32 (`torch.mm`) or a model of a tensor core's narrow accumulator.

Emulation multiplies dequantized operands with fp32 matmuls. Real FP8 tensor cores do not keep an fp32
accumulator. DeepSeek-V3 (technical report §3.3.2 "Increasing Accumulation Precision",
https://arxiv.org/abs/2412.19437) measured that H800 FP8 GEMMs keep "around 14 bits" of the running sum,
a maximum relative error of nearly 2 % at K = 4096, and fixed it by promoting the partial sum to FP32
registers on the CUDA cores every N_C = 128 elements of K (4 WGMMAs); DeepGEMM does the same ("CUDA-core
two-level accumulation (promotion)", https://github.com/deepseek-ai/DeepGEMM). cuBLASLt exposes the
unpromoted path as `CUBLASLT_MATMUL_DESC_FAST_ACCUM` for FP8 (torch `_scaled_mm(use_fast_accum=True)`).

The model (`AccumulatorModel`), per output element:

    split K into k-steps of `k_step` elements (the MMA instruction's K: 32 for FP8 `wgmma.mma_async`,
        PTX ISA "Asynchronous Warpgroup Level Matrix Shape", shapes m64nNk32 for .e4m3/.e5m2,
        https://docs.nvidia.com/cuda/parallel-thread-execution/);
    s_j   = the k-step's products summed in fp64 (exact for FP8 operands with power-of-two scales: products
            have <= 8 significant bits and 32 of them span < 53 bits);
    acc   = round_m(acc + s_j)      after every k-step, m = `mantissa_bits` explicit fraction bits;
    every `promote_interval` elements (a multiple of k_step): total = fp32(total + acc); acc = 0;
    result = fp32(total + acc) (or fp32(acc) when nothing was promoted).

Modelling choices (the hardware's details are not public):
- 13 explicit fraction bits (14 significant bits with the implicit one) for `hopper_fp8`: DeepSeek's
  "around 14 bits" of precision. Bit-accurate models of the H100 FP8 multiplier are in Khattak & Mikaitis
  2025, "Accurate Models of NVIDIA Tensor Cores" (https://arxiv.org/abs/2512.07004); this model is coarser
  (exact k-step sums, one rounding per k-step).
- Rounding toward zero: Fasi, Higham, Mikaitis & Pranesh 2021, "Numerical behavior of NVIDIA tensor
  cores" (PeerJ Comput. Sci. 7:e330, https://doi.org/10.7717/peerj-cs.330) found V100/T4/A100 tensor cores
  keep products exact, align significands to the largest exponent and truncate (round toward zero).
  `nearest_even` is available for comparison.
- Operand scales are inside the dequantized values; the hardware applies them after the MMA (per tensor in
  the epilogue, per block at promotion). For power-of-two scales the two agree (scaling by 2^k commutes
  with the rounding, away from over/underflow).
- Blackwell's block-scaled MMA (MXFP8, NVFP4) accumulation is not public: those recipes keep "fp32".

The native path (`native.py`, `torch._scaled_mm`) runs on real tensor cores and ignores this model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

ROUNDINGS = ("toward_zero", "nearest_even")
FP64_FRACTION_BITS = 52
STEP_SUMS_BUDGET = 1 << 24  # fp64 k-step sums held at once (128 MiB): bounds memory for large GEMMs


@dataclass(frozen=True, kw_only=True)
class AccumulatorModel:
    """A GEMM accumulator.

    Fields:
        name: registry name.
        mantissa_bits: explicit fraction bits the running sum keeps (None: exact fp32 `torch.mm`).
        rounding: how the running sum is rounded after each k-step: toward_zero | nearest_even.
        k_step: K elements summed exactly before each rounding (the MMA instruction's K).
        description: one line: what it models and from where.
    """

    name: str
    mantissa_bits: int | None = None
    rounding: str = "toward_zero"
    k_step: int = 32
    description: str = ""

    def __post_init__(self) -> None:
        if self.mantissa_bits is not None and not 1 <= self.mantissa_bits <= 23:
            raise ValueError(
                f"{self.name}: mantissa_bits must be in [1, 23] or None, got {self.mantissa_bits}"
            )
        if self.rounding not in ROUNDINGS:
            raise ValueError(f"{self.name}: rounding {self.rounding!r} is not one of: {', '.join(ROUNDINGS)}")
        if self.k_step < 1:
            raise ValueError(f"{self.name}: k_step must be >= 1, got {self.k_step}")

    @property
    def exact(self) -> bool:
        """True for the fp32 accumulator (today's `torch.mm`)."""
        return self.mantissa_bits is None


ACCUMULATORS: dict[str, AccumulatorModel] = {
    m.name: m
    for m in (
        AccumulatorModel(name="fp32", description="fp32 accumulation (torch.mm of dequantized values)"),
        AccumulatorModel(
            name="hopper_fp8",
            mantissa_bits=13,
            rounding="toward_zero",
            k_step=32,
            description="Hopper FP8 WGMMA: ~14-bit accumulator, truncation, k-step 32 (DeepSeek-V3 §3.3.2)",
        ),
    )
}
ACCUMULATOR_NAMES: tuple[str, ...] = tuple(ACCUMULATORS)


def accumulator(name: str | AccumulatorModel) -> AccumulatorModel:
    """The named accumulator model (a model passes through)."""
    if isinstance(name, AccumulatorModel):
        return name
    if name not in ACCUMULATORS:
        raise ValueError(f"unknown accumulate model {name!r}; valid: {', '.join(ACCUMULATOR_NAMES)}")
    return ACCUMULATORS[name]


def check_promote_interval(model: AccumulatorModel, promote_interval: int | None) -> int:
    """`promote_interval` as an int (None -> 0: never); ValueError unless 0 or a multiple of k_step."""
    p = 0 if promote_interval is None else promote_interval
    if not isinstance(p, int) or isinstance(p, bool) or p < 0:
        raise ValueError(f"promote_interval must be a non-negative int or None, got {promote_interval!r}")
    if p % model.k_step:
        raise ValueError(
            f"promote_interval={p} must be 0 (never) or a multiple of {model.name}'s k_step {model.k_step}"
        )
    return p


def round_mantissa(x: torch.Tensor, bits: int, rounding: str) -> torch.Tensor:
    """fp64 `x` rounded to `bits` explicit fraction bits (toward zero or to nearest-even); inf/NaN kept."""
    return torch.where(torch.isfinite(x), round_mantissa_(x.clone(), bits, rounding), x)


def round_mantissa_(x: torch.Tensor, bits: int, rounding: str) -> torch.Tensor:
    """`round_mantissa` in place, for finite values, infinities and quiet NaNs (what arithmetic yields).

    Works on the bit pattern: fp64 is sign-magnitude, so clearing the low 52 - bits fraction bits rounds
    the magnitude down (toward zero); adding half an ulp minus one (plus the kept lsb) first rounds to
    nearest with ties to even, a carry moving into the exponent as it should. An infinity (zero fraction)
    stays one and a quiet NaN keeps its top fraction bit. Normal fp64 values only: sums of fp32 products
    never reach fp64's subnormal range."""
    assert x.dtype == torch.float64 and 1 <= bits <= FP64_FRACTION_BITS - 1
    drop = FP64_FRACTION_BITS - bits
    i = x.view(torch.int64)
    if rounding == "nearest_even":
        i.add_(((i >> drop) & 1) + ((1 << (drop - 1)) - 1))
    i.bitwise_and_(~((1 << drop) - 1))
    return x


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    accumulate: str | AccumulatorModel = "fp32",
    promote_interval: int | None = 128,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """a (M, K) · b (K, N) in fp32 with the named accumulator; "fp32" is exactly `torch.mm(a, b, out=out)`."""
    model = accumulator(accumulate)
    if model.exact:
        return torch.mm(a, b, out=out) if out is not None else torch.mm(a, b)
    p = check_promote_interval(model, promote_interval)
    (m, k), n = a.shape, b.shape[1]
    ks = model.k_step
    g = -(-k // ks)  # k-steps, the last one zero-padded
    a64 = torch.zeros((m, g * ks), dtype=torch.float64, device=a.device)
    b64 = torch.zeros((g * ks, n), dtype=torch.float64, device=b.device)
    a64[:, :k] = a
    b64[:k] = b
    a_steps, b_steps = a64.view(m, g, ks).transpose(0, 1), b64.view(g, ks, n)
    per_promo = p // ks if p else g
    chunk = max(1, STEP_SUMS_BUDGET // max(m * n, 1))  # k-steps whose (m, n) sums are held at once
    acc = torch.zeros((m, n), dtype=torch.float64, device=a.device)
    total: torch.Tensor | None = None
    for c0 in range(0, g, chunk):
        # each k-step's exact sum, one batched matmul over a chunk of k-steps: (chunk, m, n)
        steps = torch.bmm(a_steps[c0 : c0 + chunk], b_steps[c0 : c0 + chunk])
        for j in range(c0, min(c0 + chunk, g)):
            round_mantissa_(acc.add_(steps[j - c0]), model.mantissa_bits, model.rounding)  # type: ignore[arg-type]
            if p and ((j + 1) % per_promo == 0 or j == g - 1):
                a32 = acc.to(torch.float32)
                total = a32 if total is None else total + a32
                acc.zero_()
    res = total if total is not None else acc.to(torch.float32)
    if out is not None:
        return out.copy_(res)
    return res


def round_mantissa_reference(x: float, bits: int, rounding: str) -> float:
    """One Python float rounded to `bits` fraction bits via frexp: the plain reference of `round_mantissa`."""
    if x == 0.0 or not math.isfinite(x):
        return x
    frac, exp = math.frexp(x)  # x = frac * 2^exp, 0.5 <= |frac| < 1: bits + 1 significant bits kept
    scaled = frac * 2.0 ** (bits + 1)  # exact: only the exponent changes
    kept = math.trunc(scaled) if rounding == "toward_zero" else round(scaled)  # round(): ties to even
    try:
        return math.ldexp(float(kept), exp - bits - 1)
    except OverflowError:  # rounded up past the largest double
        return math.copysign(math.inf, x)


def matmul_reference(
    a: torch.Tensor,
    b: torch.Tensor,
    accumulate: str | AccumulatorModel = "fp32",
    promote_interval: int | None = 128,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """`matmul` written as loops over output elements and K, for small shapes in tests."""
    model = accumulator(accumulate)
    if model.exact:
        return matmul(a, b, model, out=out)
    p = check_promote_interval(model, promote_interval)
    av, bv = a.double().tolist(), b.double().tolist()
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    res = torch.empty((m, n), dtype=torch.float32)
    for r in range(m):
        for c in range(n):
            acc, total, since = 0.0, None, 0
            for start in range(0, k, model.k_step):
                s = 0.0
                for i in range(start, min(start + model.k_step, k)):
                    s += av[r][i] * bv[i][c]
                acc = round_mantissa_reference(acc + s, model.mantissa_bits, model.rounding)  # type: ignore[arg-type]
                since += model.k_step
                if p and (since == p or start + model.k_step >= k):
                    total = np.float32(acc) if total is None else np.float32(total + np.float32(acc))
                    acc, since = 0.0, 0
            res[r, c] = float(np.float32(acc) if total is None else total)
    if out is not None:
        return out.copy_(res)
    return res
