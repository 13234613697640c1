"""Compute time of one transformer layer on one GPU: per-GEMM roofline, flash attention, memory-bound ops.

* GEMM (roofline, scaling book https://jax-ml.github.io/scaling-book/roofline): t = max(F / (peak·η),
  bytes / (BW·η_mem)) + one kernel overhead, with F = 2·M·N·K and M rounded up to the 128-row tile the
  tensor-core kernels use (so a grouped expert GEMM with few tokens pays for its padding). MoE expert
  GEMMs are one kernel per local expert, each paying the kernel overhead: Transformer Engine's
  GroupedLinear (Megatron-Core's `TEGroupedMLP`) issues one cuBLAS GEMM per expert, spread over a few
  streams (transformer_engine/pytorch/module/grouped_linear.py -> general_grouped_gemm ->
  nvte_multi_stream_cublas_gemm, https://github.com/NVIDIA/TransformerEngine), so EP8 with 32 experts per
  GPU launches 8x the expert kernels of EP64 for the same FLOPs. Backward =
  dgrad (same F) + wgrad (same F, accumulating into the fp32 main gradient: 8 B per weight).
  η is the calibrated efficiency for the GPU's architecture and the operand width. With a calibration's
  `gemm_shapes = "measured"`, η of each GEMM and pass is that value times the shape's measured rate
  relative to a large reference layer (`Rates.lp_shape`, `tenfold.perf.measured.gemm.ShapeEfficiency`),
  and M is not padded (the tables time the real shape, padding included); with "measured-experts" only
  the routed experts' GEMMs are priced so (`Rates.shape_experts_only`).
* Flash attention: causal scores only; backward = 2.5x the forward FLOPs (five matmuls instead of two,
  Dao 2023); the softmax exponentials run on the special-function units, so t = max(MMA time, exp time)
  (FA3/FA4 overlap the two; on B200 for d=128 the exponentials are as slow as the MMAs, which is why
  Blackwell Ultra doubles them: NVIDIA, "Making Softmax More Efficient with Blackwell Ultra").
* Unfused attention (Megatron 2021): batched QK^T and PV GEMMs over the full s x s scores, then a fused
  scale-mask-softmax (read 2 B, write 2 B per score) and dropout (read 2, write 2 + 1 B mask); backward
  reads and writes about 11 B per score.
* Memory-bound ops per token (bytes, forward; backward = 2x): two norms (read + write h, 8h), two residual
  adds (read 2h, write h: 12h), RoPE on q and k, the FFN activation (gated: read 2f write f), MoE
  permute/unpermute (8·k·h), dropout masks; then quantization traffic of every low-precision GEMM input
  (see precision.py). Norm/residual regions are split by sequence parallelism, the rest by TP.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from tenfold.perf.calibration import Calibration
from tenfold.perf.flops import attention_context
from tenfold.perf.specs.hardware import Hardware
from tenfold.perf.specs.models import ModelSpec
from tenfold.perf.specs.precision import Precision

TILE_M = 128
ShapeFactor = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
"""(m, n, k) -> efficiency of that GEMM shape relative to the calibrated one (`Rates.lp_shape`)."""


@dataclass(frozen=True, kw_only=True)
class Rates:
    """Per-GPU rates for one (hardware, precision, calibration): FLOP/s and bytes/s actually sustained."""

    lp_flops: float  # block GEMMs in the training precision
    bf16_flops: float  # head, router, attention batched GEMMs
    attn_flops: float  # flash attention MMAs
    exp_per_s: float
    hbm_Bps: float
    kernel_s: float
    moe_layer_s: float
    operand_bytes: float
    quant_bytes: float
    lp_shape: ShapeFactor | None = None  # per-shape factor of the training-precision GEMMs (None: flat)
    bf16_shape: ShapeFactor | None = None  # ... and of the 16-bit ones
    shape_experts_only: bool = False  # the factors apply to the routed experts' GEMMs only


def rates(
    hw: Hardware,
    precision: Precision,
    cal: Calibration,
    *,
    kernels: str = "te",
    full_graph: bool = False,
    shapes: tuple[ShapeFactor | None, ShapeFactor | None] = (None, None),
) -> Rates:
    """Sustained rates; `kernels` is the stack's kernel family (`Stack.kernels`), whose factor
    (`Calibration.kernel_efficiency`) scales the tensor-core rates; `full_graph`
    (`Stack.full_iteration_graph`): the step is one CUDA graph, so no per-MoE-layer host cost; `shapes`:
    the per-shape factors of the training-precision and 16-bit GEMMs (`Calibration.gemm_shapes`)."""
    k = cal.kernel_efficiency(kernels)
    e16 = cal.gemm(hw.arch, "16") * k
    return Rates(
        lp_flops=hw.peak(precision.peak_key)
        * cal.gemm(hw.arch, precision.bits_class)
        * precision.training_gemm_factor
        * k,
        bf16_flops=hw.peak("bf16") * e16,
        attn_flops=hw.peak("bf16") * e16 * cal.attention_efficiency,
        exp_per_s=hw.exp_per_s,
        hbm_Bps=hw.hbm_Bps * cal.hbm_efficiency,
        kernel_s=cal.kernel_overhead_us * 1e-6,
        moe_layer_s=0.0 if full_graph else cal.moe_layer_overhead_us * 1e-6,
        operand_bytes=precision.operand_bytes,
        quant_bytes=precision.quant_bytes,
        lp_shape=shapes[0],
        bf16_shape=shapes[1],
        shape_experts_only=cal.gemm_shapes == "measured-experts",
    )


def gemm_times(M, N, K, r: Rates, *, count=1.0, low: bool = True, kernels=1.0, experts: bool = False):
    """(forward, backward) seconds of `count` GEMMs [M,K]x[K,N], issued as `kernels` kernels per GEMM
    kind and pass (1: one batched or grouped kernel; `count`: one kernel per GEMM, as for MoE experts);
    `experts`: they are routed experts' GEMMs (priced per shape under `Rates.shape_experts_only`)."""
    M, N, K, count, kernels = (np.asarray(x, dtype=float) for x in (M, N, K, count, kernels))
    flops_rate = r.lp_flops if low else r.bf16_flops
    ob = r.operand_bytes if low else 2.0
    shape = r.lp_shape if low else r.bf16_shape
    if r.shape_experts_only and not experts:
        shape = None
    if shape is None:
        t_fwd = t_dgrad = t_wgrad = 2.0 * np.ceil(M / TILE_M) * TILE_M * N * K * count / flops_rate
    else:
        t_flat = 2.0 * M * N * K * count / flops_rate
        t_fwd, t_dgrad, t_wgrad = (t_flat / shape(*s) for s in ((M, N, K), (M, K, N), (N, K, M)))
    fwd_bytes = count * (M * K * ob + K * N * ob + M * N * 2.0)
    dgrad_bytes = count * (M * N * ob + K * N * ob + M * K * 2.0)
    wgrad_bytes = count * (M * N * ob + M * K * ob + K * N * 8.0)
    fwd = np.maximum(t_fwd, fwd_bytes / r.hbm_Bps) + kernels * r.kernel_s
    bwd = (
        np.maximum(t_dgrad, dgrad_bytes / r.hbm_Bps)
        + np.maximum(t_wgrad, wgrad_bytes / r.hbm_Bps)
        + 2.0 * kernels * r.kernel_s
    )
    return fwd, bwd


@dataclass(frozen=True, kw_only=True)
class LayerTimes:
    """Seconds for one layer and one micro-batch on one GPU (arrays over plans).

    gemm_f/gemm_b: linear layers; attn_f/attn_b: attention core; other_f/other_b: memory-bound ops and
    quantization. For selective recomputation (`module_recompute`), by module part: part_f the forward
    seconds of each `GEMM_PARTS` part's GEMMs, part_quant the low-precision input elements they quantize,
    mem_bytes the forward bytes of each memory-bound op (`memory_op_bytes`).
    """

    gemm_f: np.ndarray
    gemm_b: np.ndarray
    attn_f: np.ndarray
    attn_b: np.ndarray
    other_f: np.ndarray
    other_b: np.ndarray
    part_f: Mapping[str, np.ndarray] = field(default_factory=dict)
    part_quant: Mapping[str, np.ndarray] = field(default_factory=dict)
    mem_bytes: Mapping[str, np.ndarray] = field(default_factory=dict)

    @property
    def fwd(self) -> np.ndarray:
        return self.gemm_f + self.attn_f + self.other_f

    @property
    def bwd(self) -> np.ndarray:
        return self.gemm_b + self.attn_b + self.other_b


def attention_times(model: ModelSpec, *, tokens, tp, seq_len: int, flash: bool, r: Rates):
    """(forward, backward) seconds of the attention core for `tokens` queries on one GPU."""
    tokens, tp = np.asarray(tokens, dtype=float), np.asarray(tp, dtype=float)
    heads = model.heads / tp
    dsum = model.qk_head_dim + model.v_dim
    if flash:
        ctx = attention_context(model, seq_len, causal=True)
        flops = 2.0 * tokens * ctx * heads * dsum
        exps = tokens * ctx * heads
        fwd = np.maximum(flops / r.attn_flops, exps / r.exp_per_s) + r.kernel_s
        bwd = np.maximum(2.5 * flops / r.attn_flops, exps / r.exp_per_s) + r.kernel_s
        return fwd, bwd
    scores = tokens * seq_len * heads
    # batched QK^T and PV over all s keys (masking happens after the GEMM), in 16-bit
    qk_f, qk_b = gemm_times(tokens, seq_len, model.qk_head_dim, r, count=heads, low=False)
    pv_f, pv_b = gemm_times(tokens, model.v_dim, seq_len, r, count=heads, low=False)
    drop = 5.0 if model.dropout > 0 else 0.0
    soft_f = scores * (4.0 + drop) / r.hbm_Bps + 2 * r.kernel_s
    soft_b = scores * (6.0 + drop) / r.hbm_Bps + 2 * r.kernel_s
    return qk_f + pv_f + soft_f, qk_b + pv_b + soft_b


GEMM_PARTS = ("attn_proj", "mla_up", "router", "experts", "shared", "ffn")
"""attn_proj: QKV (or MLA's down-projections) and the output projection; mla_up: MLA's q and kv
up-projections; router; experts: routed experts; shared: shared experts; ffn: a dense layer's MLP."""


@dataclass(frozen=True, kw_only=True)
class GemmShape:
    """One linear layer's forward GEMM [M, K] x [K, N], issued as `count` GEMMs in one (grouped) kernel.

    low: whether it runs in the training precision (False for the MoE router, which stays 16-bit).
    kernels: kernels launched per pass for the `count` GEMMs (see `gemm_times`).
    part: which module of the layer it belongs to (`GEMM_PARTS`), for selective recomputation.
    Its backward is dgrad [M, N] x [N, K] and wgrad [N, M] x [M, K] (see `gemm_times`).
    """

    M: np.ndarray
    N: np.ndarray
    K: np.ndarray
    count: np.ndarray | float = 1.0
    low: bool = True
    kernels: np.ndarray | float = 1.0
    part: str = "attn_proj"

    def __post_init__(self) -> None:
        if self.part not in GEMM_PARTS:
            raise ValueError(f"part {self.part!r} not in {GEMM_PARTS}")


def layer_gemms(model: ModelSpec, *, moe: bool, tokens, tp, ep) -> list[GemmShape]:
    """The linear layers of one dense (moe=False) or MoE layer for `tokens` tokens per TP group: QKV (or
    MLA's down/up projections), the attention output projection, and the FFN (up/gate, down), or the
    router, the experts (tokens/tp per rank dispatched over `ep` ranks, balanced) and shared experts.
    Shapes are per GPU (N or K split by tp); arrays broadcast over plans. `layer_times` prices them."""
    T = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    ep = np.asarray(ep, dtype=float)
    h, a, g, d = model.hidden, model.heads, model.kv_heads, model.head_dim
    gate = 2 if model.gated else 1
    out: list[GemmShape] = []

    def add(M, N, K, count=1.0, low=True, kernels=1.0, part="attn_proj"):
        out.append(GemmShape(M=M, N=N, K=K, count=count, low=low, kernels=kernels, part=part))

    if model.is_mla:
        dn, dr, dv = model.qk_nope_head_dim, model.qk_rope_head_dim, model.v_head_dim
        if model.q_lora_rank:
            add(T, model.q_lora_rank, h)
            add(T, a * (dn + dr) / tp, model.q_lora_rank, part="mla_up")
        else:
            add(T, a * (dn + dr) / tp, h)
        add(T, model.kv_lora_rank + dr, h)
        add(T, a * (dn + dv) / tp, model.kv_lora_rank, part="mla_up")
        add(T, h, a * dv / tp)
    else:
        add(T, (a + 2 * g) * d / tp, h)
        add(T, h, a * d / tp)
    if moe:
        k, fe = model.topk, model.moe_ffn
        t_moe = T / tp  # sequence-parallel shard entering the router
        add(t_moe, model.experts, h, low=False, part="router")
        m_e = t_moe * k * ep / model.experts
        local = model.experts / ep
        add(m_e, fe * gate, h, count=local, kernels=local, part="experts")
        add(m_e, h, fe, count=local, kernels=local, part="experts")
        if model.shared_experts:
            fs = model.shared_experts * fe
            add(T, fs * gate / tp, h, part="shared")
            add(T, h, fs / tp, part="shared")
    else:
        add(T, model.ffn * gate / tp, h, part="ffn")
        add(T, h, model.ffn / tp, part="ffn")
    return out


def memory_op_bytes(model: ModelSpec, *, moe: bool, tokens, tp, sp) -> dict[str, np.ndarray]:
    """Forward HBM bytes of one layer's memory-bound ops for `tokens` tokens per TP group, by op (the
    backward moves about twice as much): "norms" (two norms, read + write h: 8h), "residual" (two adds,
    read 2h write h: 12h), "rope" (q and k), "qk_norm", "dropout" (masks), "act" (the dense FFN's or the
    routed experts' activation; gated: read gate and up, write one), "shared_act" (the shared experts'),
    "permute" (MoE permute and unpermute, 8·k·h per routed token). Norm and residual regions are split by
    sequence parallelism, the rest by TP."""
    T = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    rsp = np.where(np.asarray(sp, dtype=bool), tp, 1.0)
    h, a, g, d = model.hidden, model.heads, model.kv_heads, model.head_dim
    rope_elems = (a / tp + 1) * model.qk_rope_head_dim if model.is_mla else (a + g) * d / tp
    act = 3 if model.gated else 2  # elements touched per FFN element
    zero = np.zeros_like(T)
    out = {
        "norms": 8 * h * T / rsp,
        "residual": 12 * h * T / rsp,
        "rope": 4 * rope_elems * T,
        "qk_norm": 4 * (a + g) * d / tp * T if model.qk_norm else zero,
        "dropout": 2 * h * T / rsp if model.dropout > 0 else zero,
        "shared_act": zero,
    }
    if moe:
        k, fe = model.topk, model.moe_ffn
        t_moe = T / tp  # sequence-parallel shard entering the router
        if model.shared_experts:
            out["shared_act"] = 2 * act * model.shared_experts * fe / tp * T
        out["act"] = 2 * act * k * fe * t_moe
        out["permute"] = 8 * k * h * t_moe
    else:
        out["act"] = 2 * act * model.ffn / tp * T
        out["permute"] = zero
    return out


def layer_times(
    model: ModelSpec, *, moe: bool, tokens, tp, sp, ep, seq_len: int, flash: bool, r: Rates, low: bool
) -> LayerTimes:
    """Compute time of one dense (moe=False) or MoE layer for one micro-batch of `tokens` tokens per rank.

    Tokens here are per TP group (b·s/cp); GEMMs split their N or K by tp, and MoE layers see tokens/tp
    (sequence-parallel shards) dispatched over `ep` ranks with balanced routing (etp = 1).
    """
    T = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    ep = np.asarray(ep, dtype=float)
    gf = np.zeros_like(T)
    gb = np.zeros_like(T)
    q_in = np.zeros_like(T)  # low-precision elements quantized in the forward (GEMM inputs)
    q_out = np.zeros_like(T)  # ... and in the backward (output gradients)
    part_f: dict[str, np.ndarray] = {}
    part_quant: dict[str, np.ndarray] = {}

    for g in layer_gemms(model, moe=moe, tokens=T, tp=tp, ep=ep):
        lowp = low and g.low
        f, b = gemm_times(
            g.M, g.N, g.K, r, count=g.count, low=lowp, kernels=g.kernels, experts=g.part == "experts"
        )
        gf = gf + f
        gb = gb + b
        part_f[g.part] = part_f.get(g.part, 0.0) + f
        if lowp:
            q = np.asarray(g.M) * g.K * g.count
            q_in = q_in + q
            q_out = q_out + np.asarray(g.M) * g.N * g.count
            part_quant[g.part] = part_quant.get(g.part, 0.0) + q
    attn_f, attn_b = attention_times(model, tokens=T, tp=tp, seq_len=seq_len, flash=flash, r=r)
    mem_ops = memory_op_bytes(model, moe=moe, tokens=T, tp=tp, sp=sp)
    mem = sum(mem_ops.values())
    kernels_f = 13.0 if moe else 7.0
    other_f = mem / r.hbm_Bps + kernels_f * r.kernel_s
    other_b = 2.0 * mem / r.hbm_Bps + 1.5 * kernels_f * r.kernel_s
    if moe:
        other_f = other_f + r.moe_layer_s
        other_b = other_b + r.moe_layer_s
    if low:
        other_f = other_f + q_in * r.quant_bytes / r.hbm_Bps
        other_b = other_b + q_out * r.quant_bytes / r.hbm_Bps
    return LayerTimes(
        gemm_f=gf,
        gemm_b=gb,
        attn_f=attn_f,
        attn_b=attn_b,
        other_f=other_f,
        other_b=other_b,
        part_f=part_f,
        part_quant=part_quant,
        mem_bytes=mem_ops,
    )


def head_times(model: ModelSpec, *, tokens, tp, r: Rates):
    """(forward, backward) of the output head and the vocab-parallel cross-entropy (16-bit)."""
    T, tp = np.asarray(tokens, dtype=float), np.asarray(tp, dtype=float)
    f, b = gemm_times(T, model.vocab / tp, model.hidden, r, low=False)
    logits = T * model.vocab / tp
    # write logits 2 B, softmax in fp32 (read 2, write 4), backward read 4 write 2
    return f + logits * 8.0 / r.hbm_Bps + 2 * r.kernel_s, b + logits * 6.0 / r.hbm_Bps + 2 * r.kernel_s


def op_sac_recompute(model: ModelSpec, lt: LayerTimes, *, moe: bool, tokens, tp, r: Rates, low: bool):
    """Forward seconds that torchtitan's per-op selective activation checkpointing runs again in one layer.

    The policy (`_apply_ac_to_transformer_block`, torchtitan/parallelisms/parallelize_llama.py at commit
    9dec370, https://github.com/pytorch/torchtitan) counts a block's `aten.mm` calls and saves the output of
    the odd-numbered ones, of flash/efficient SDPA, of TP reduce-scatters and of max/abs (float8 scales);
    every other op is recomputed in the backward. torchtitan's Llama block issues seven mm in the order wq,
    wk, wv (`self.wq(x), self.wk(x), self.wv(x)`), wo, then w1, w3, w2 (`self.w2(F.silu(self.w1(x)) *
    self.w3(x))`, torchtitan/models/llama/model.py), so wk, wo and w3 run again, about 36 % of an 8B
    layer's GEMM FLOPs (Megatron's selective recompute runs only the attention core). The memory-bound ops
    (norms, residual adds, RoPE, SiLU and product, float8 casts) are not on the save list: all of
    `lt.other_f` runs again. The attention core is saved. Layers of another structure (MLA projections,
    MoE experts) are priced at half their GEMM forward, the average of the alternation.
    """
    if moe or model.is_mla:
        return 0.5 * lt.gemm_f + lt.other_f
    T, tp = np.asarray(tokens, dtype=float), np.asarray(tp, dtype=float)
    h, a, g, d = model.hidden, model.heads, model.kv_heads, model.head_dim
    wk, _ = gemm_times(T, g * d / tp, h, r, low=low)
    wo, _ = gemm_times(T, h, a * d / tp, r, low=low)
    # w3 (gated) or, in a two-matmul FFN, w2: the same FLOPs either way
    ffn_mm, _ = gemm_times(T, model.ffn / tp, h, r, low=low)
    return wk + wo + ffn_mm + lt.other_f


# The parts of a layer each Megatron-Core recompute module runs again (transformer_config.py
# `recompute_modules`, https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/transformer/
# transformer_config.py): GEMM parts (`GEMM_PARTS`) and memory-bound ops (`memory_op_bytes` keys).
# "mlp" recomputes a dense layer's MLP only (transformer_layer.py: `if not self.is_moe_layer`), "moe" the
# whole MoE layer (its dispatch and combine too: see step.py), "core_attn" the attention core.
_MODULE_PARTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "core_attn": ((), ()),
    "layernorm": ((), ("norms",)),
    "mla_up_proj": (("mla_up",), ("rope",)),
    "mlp": (("ffn",), ("act",)),
    "moe_act": ((), ("act",)),
    "moe": (("router", "experts", "shared"), ("act", "shared_act", "permute")),
    "shared_experts": (("shared",), ("shared_act",)),
}


def module_recompute(lt: LayerTimes, modules: tuple[str, ...], *, r: Rates) -> np.ndarray:
    """Forward seconds Megatron-Core's selective recomputation runs again in one layer when it recomputes
    `modules`: the attention core for "core_attn" (Korthikanti et al. 2022 §5), and for the others their
    GEMMs (with the quantization of their low-precision inputs) and memory-bound ops, each op's kernel
    once, as `layer_times` priced them. A module the layer lacks ("mlp" in an MoE layer, "mla_up_proj"
    without MLA) costs nothing."""
    gemm_parts = {p for m in modules for p in _MODULE_PARTS[m][0]}
    mem_parts = {p for m in modules for p in _MODULE_PARTS[m][1]}
    out = np.zeros_like(lt.attn_f) + (lt.attn_f if "core_attn" in modules else 0.0)
    quant = 0.0
    for part in gemm_parts:
        out = out + lt.part_f.get(part, 0.0)
        quant = quant + lt.part_quant.get(part, 0.0)
    for name in mem_parts:
        if np.any(lt.mem_bytes[name] > 0):
            out = out + lt.mem_bytes[name] / r.hbm_Bps + r.kernel_s
    return out + quant * r.quant_bytes / r.hbm_Bps
