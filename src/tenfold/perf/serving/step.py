"""Time of one serving-engine step on one GPU: prefill and decode tokens through every layer.

One step (continuous batching with chunked prefill, presets.py) carries `b` running sequences per attention
rank, each decoding `q` tokens (1, or 1 + draft tokens under speculative decoding), plus `p` prefill tokens
of new requests. The linear layers see T = b·q + p tokens at once; attention runs a decode kernel over the
cached context and a prefill kernel over the prompts (sources at the end):

* GEMM (roofline per op, [LLM-Viewer] / [llm-analysis]): t = max(2·T·W / R, (W·b_w + activations) / BW),
  W the weights on this GPU, R the sustained FLOP/s of the operand format, BW the sustained HBM bandwidth.
  Small batches are weight-bandwidth-bound (every weight byte is read once per step); large ones
  compute-bound: a weight byte yields 2·T/b_w FLOPs, so decode turns compute-bound near T ≈ ridge·b_w/2.
* Attention, decode: reads each sequence's KV cache once per step, t = max(flops / R_attn, KV bytes / BW),
  flops = 2·T_dec·ctx·heads·(d_qk + d_v) for MHA/GQA; MLA with absorbed weights acts as MQA over the
  latent ([TRT-LLM blog 3]): 2·(2·r_kv + d_rope) per head and cached token. Prefill: causal
  2·p·ctx·heads·(d_qk + d_v) with ctx = ISL/2 (flops.attention_context; sliding windows capped).
  Attention MMAs run at the KV format's tensor rate (FP8 KV -> FP8 MQA kernels, [TRT-LLM blog 3]), and
  each score also takes one exponential on the special-function units ([FA3]: H100 has 989 TFLOP/s of
  BF16 MMA but 3.9 T exponentials/s, so at d = 128 the 512 MMA FLOPs of a score and its exponential
  take comparable time). The two are charged one after the other, both scaled by the fitted attention
  efficiency, which rises above 1 where the kernel overlaps them (FA3's ping-pong). Its bound, 1.5,
  is the best published kernel: with the fitted Hopper GEMM efficiencies it gives 0.78 of H100's BF16
  peak and 1.1 PFLOP/s in FP8, where FA3 reports 0.75 (740 TFLOP/s) and "close to 1.2 PFLOPs/s". A GPU
  whose tensor cores are cut but whose SFUs are not (H20: 148 TFLOP/s BF16 on 78 SMs) thus runs
  attention nearer its MMA peak than H100 does, as the SGLang PP rows on H20 show.
* MoE: per GPU a step touches E_loc·(1 - (1 - k/E)^T_ep) of its E_loc experts, the expected number of
  distinct experts hit under uniform routing of the T_ep tokens the expert-parallel group sees: T_ep = 1
  gives k·E_loc/E ([GenZ]'s bound), large T_ep all of them ([llm-analysis]'s bound). Expert FLOPs are
  balanced: T_ep·k/ep token-expert pairs per EP rank. Grouped GEMMs compute at `moe_efficiency` of the
  dense-GEMM rate with each touched expert's rows padded to whole M tiles and a fixed cost per tile
  (grouped_gemm.py: small experts lose more), and stream the touched experts' weights at the HBM
  rate. A grouped GEMM is one kernel whose tiles, from all touched experts, run concurrently across the
  SMs, so a touched expert costs its weight bytes, not a serial fixed cost. TensorRT-LLM's measured MoE
  layers ([AIC], B200, DeepSeek-R1 shapes, 1-32 tokens) grow by 1.2-1.9x the touched experts' bytes at
  the HBM rate (1.3 us per extra expert under TP8 in FP8) above a floor of 20-100 us per layer (the MoE
  kernel chain, charged here as KERNELS_MOE kernel overheads). The previous fit's serial 3.5 us per
  touched expert came to 4.3 us per extra expert and put DeepSeek-R1 FP8 on 8 x B200 (TP8, 32 requests)
  at 62 ms per output token where 15.9 ms was measured (issue 16). Weight-only (W4A16) MoE layers on
  Hopper compute at a measured share of the BF16 rate, stream their experts no faster than the CUDA
  cores unpack them, and pay a cost per token entering the layer (WEIGHT_ONLY_* constants below).
* MLA under attention TP: the down-projections W_DQ, W_DKV and W_KR (fused into one "Fuse_A" GEMM) are
  replicated on every rank (data-parallel, [TRT-LLM blog 1] "Parallelism Strategy"; SGLang's
  `fused_qkv_a_proj_with_mqa` is a ReplicatedLinear); only the up-projections and W_O are split.
* Communication (comm.py links): TP all-reduce after attention and after the FFN (2 per layer) of T·h·2
  bytes, the faster of ring (2(n-1)/n·S/B + latency per step) and one-shot (each rank reads the other n-1
  buffers: (n-1)·S/B + one latency; TensorRT-LLM's oneshotAllReduce) inside the scale-up domain, ring
  across it. Under attention data parallelism + EP the MoE layer exchanges tokens in the activation
  format (e.g. FP4, [TRT-LLM blog 3]) and returns outputs in BF16, either as an all-gather +
  reduce-scatter over the EP group (TensorRT-LLM's CUTLASS path), a plain all-to-all with one copy per
  distinct remote rank holding one of the token's experts, or DeepEP (SGLang): prefill steps use its
  normal kernels, which send a token once per scale-up domain holding its experts (at most 4 under
  DeepSeek-V3's node-limited routing) over the network and forward it over NVLink inside the domain;
  decode steps use its low-latency kernels, one message per (token, expert) pair, over the network to
  other domains and NVLink within one (deepep_normal_time, deepep_low_latency_time). The share leaving
  the scale-up domain runs on the network (comm.py). Exposed unless the engine overlaps it.
* Overheads: a fitted fixed cost per kernel (CUDA-graph launched) and per step (scheduler, sampler); an
  MLA layer runs 4 more kernels than a GQA one (KERNELS_MLA_EXTRA).

Overlap rules: GEMM compute and weight reads overlap within a kernel (the max); kernels of a layer run one
after another (sum); prefill and decode tokens share the linear layers of a step; TP all-reduces are
exposed; the MoE exchange is exposed unless `ep_overlap` (two-batch overlap), which hides it behind the
other micro-batch's whole layer (attention projections, attention core and FFN: exposed = max(X - C, 0)
per MoE layer) and launches every kernel once per micro-batch (TBO_MICRO_BATCHES).

Sources: [LLM-Viewer] Yuan et al., "LLM Inference Unveiled: Survey and Roofline Model Insights", arXiv
2402.16363; [llm-analysis] https://github.com/cli99/llm-analysis (`infer` mode); [GenZ] Bambhaniya et
al., arXiv 2406.01698; [AIC] aiconfigurator-core's silicon-measured `moe_perf.parquet` tables
(https://github.com/ai-dynamo/aiconfigurator; tests/perf/serving/test_decode.py reads them where installed);
[FA3] Shah et al., "FlashAttention-3: Fast and Accurate Attention with Asynchrony and Low-precision",
arXiv 2407.08608, §3.1; [TRT-LLM blog 1] "Pushing Latency Boundaries: Optimizing DeepSeek-R1 Performance
on NVIDIA B200 GPUs" and [TRT-LLM blog 3] "Optimizing DeepSeek R1 Throughput on NVIDIA Blackwell GPUs",
TensorRT-LLM tech blogs 1 and 3, in
https://github.com/NVIDIA/TensorRT-LLM/tree/main/docs/source/blogs/tech_blog.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tenfold.perf import comm
from tenfold.perf.calibration import Calibration
from tenfold.perf.flops import attention_context
from tenfold.perf.serving.grouped_gemm import grouped_gemm_seconds, tile_k_overhead
from tenfold.perf.serving.kvcache import kv_bytes_per_sequence, stored_tokens
from tenfold.perf.specs.hardware import Hardware
from tenfold.perf.specs.models import ModelSpec
from tenfold.perf.specs.precision import (
    Precision,
    as_weight_only,
    block_scale_mma_fraction,
    weight_only_mma_fraction,
)

KERNELS_DENSE = 10  # norm, QKV GEMM, RoPE + KV append, decode attn, prefill attn, O GEMM, AR + norm, FFN x3
KERNELS_MOE = 16  # as dense + router, top-k, permute, 2 grouped GEMMs, activation, finalize, 2 collectives
KERNELS_HEAD = 3  # final norm, head GEMM, sampler
# MLA runs Fuse_A GEMM, the q/kv RMSNorms, UQ_QR GEMM, the UK and UV batched GEMMs, KV concat + RoPE,
# the MQA-like kernel and W_O ([TRT-LLM blog 1], "Everything in One Diagram", modules 1-8) where GQA runs a
# QKV GEMM, RoPE + append, attention and O: 4 more kernels per layer.
KERNELS_MLA_EXTRA = 4
# Two-batch overlap splits a step into two micro-batches that each run every operation of a layer, so the
# other's MoE exchange hides behind it; the kernels launch once per micro-batch (SGLang's
# `--enable-two-batch-overlap`, https://lmsys.org/blog/2025-05-05-large-scale-ep, "Two-batch Overlap").
TBO_MICRO_BATCHES = 2


# Seconds per routed token per MoE layer that a weight-only (W4A16 MXFP4) MoE layer costs on Hopper
# beyond its grouped GEMMs: NVIDIA's measured MoE layers (aiconfigurator-core moe_perf.parquet, gpt-oss
# 2880 x 2880 experts, balanced routing, 2,048-16,384 tokens, EP 1-128) fit latency = a per local
# token-expert pair + b per token entering the layer + c, with b = 57-64 ns on both H100 and H200 for
# TensorRT-LLM 1.3.0rc20's TRITON backend (65-76 ns for SGLang 0.5.14's), against 1-10 ns for the BF16
# and FP8 CUTLASS MoE layers of the same tables. Equal on both GPUs, so not HBM traffic: the routing,
# gather and scatter run over every token the layer receives, which under attention DP is the whole EP
# group's (all-gathered) tokens, however few of their experts are local.
WEIGHT_ONLY_MOE_TOKEN_S = {"hopper": 60e-9}
# Expert weights per second a Hopper GPU unpacks (E2M1 -> BF16, times the E8M0 scale) in a weight-only
# MoE layer when few tokens reach each expert: the same tables (64-256 tokens, every local expert
# touched) unpack 2.6-3.1e12 weights/s with 32 local experts, 3.6-4.4e12 with 64 and 4.5-5.1e12 with
# 128, on H200 and H100 alike (1.6-2.7 TB/s of MXFP4), so the CUDA-core conversion (13-22 weights per SM
# per clock), not HBM, bounds it; the BF16 and FP8 CUTLASS layers of the same shapes reach 0.8-0.9 of
# HBM peak. One value for all EP sizes, the middle of that spread (it could follow the local experts). At
# large batches each weight is converted once per 128-row tile, as long as the MMAs take, which is why
# the tensor rate falls to WEIGHT_ONLY_MMA_FRACTION (precision.py) there.
WEIGHT_ONLY_DEQUANT_PER_S = {"hopper": 4.0e12}


@dataclass(frozen=True, kw_only=True)
class Formats:
    """Number formats of one deployment: `weights` for dense FFN and expert GEMMs (`activations` their
    input format, which sets the tensor-core rate), `attention` for the attention projections, `kv` for the
    cache. The output head, router, embeddings and MTP modules stay BF16 (ModelOpt excludes lm_head; the
    TensorRT-LLM DeepSeek recipe keeps router and MTP in BF16, [TRT-LLM blog 1])."""

    weights: Precision
    activations: Precision
    attention: Precision
    kv: str


@dataclass(frozen=True, kw_only=True)
class ServingRates:
    """Sustained per-GPU rates (FLOP/s, bytes/s) and fixed costs (s) for one hardware, formats, fit."""

    ffn_flops: float
    attn_proj_flops: float
    bf16_flops: float
    attn_flops: float
    hbm_Bps: float
    kernel_s: float
    step_s: float
    moe_layer_s: float
    moe_efficiency: float
    moe_token_s: float = 0.0
    moe_weight_Bps: float = 0.0  # expert-weight streaming rate; 0 = hbm_Bps
    sm_count: int | None = None
    exp_per_s: float = float("inf")  # softmax exponentials per second, scaled like attn_flops


def gemm_efficiency(cal: Calibration, arch: str, bits_class: str) -> float:
    """Serving GEMM efficiency: the fitted value where the fit covers `arch` (or its predecessor), else
    a conservative one for hardware nobody calibrated: the lowest value fitted at this operand width on
    any architecture (the lowest fitted value of all if none is), never above the calibration's fixed
    fallback. Uncalibrated AMD and TPU parts therefore never look better than every calibrated NVIDIA
    part at the same width (issue 14); the estimate says `calibrated=False`."""
    if cal.is_calibrated(arch, bits_class):
        return cal.gemm(arch, bits_class)
    fitted = cal.gemm_efficiency
    same_width = [v for k, v in fitted.items() if k.endswith(f"/{bits_class}")]
    pool = same_width or list(fitted.values())
    return min([*pool, cal.fallback_gemm_efficiency])


def serving_rates(hw: Hardware, f: Formats, cal: Calibration, kv_compute: Precision) -> ServingRates:
    """Rates for the deployment's formats. `kv_compute` is the format attention MMAs run in."""

    def rate(p: Precision) -> float:
        return hw.peak(p.peak_key) * gemm_efficiency(cal, hw.arch, p.bits_class)

    # block-scaled FP8 weights (fp8_block) on Hopper: the CUDA cores apply the scales (precision.py)
    blocks = block_scale_mma_fraction(f.weights, hw) if f.activations.low else 1.0

    e16 = hw.peak("bf16") * gemm_efficiency(cal, hw.arch, "16")
    # weight-only GEMMs dequantise in the main loop: a share of the 16-bit rate (precision.py)
    ffn_as_run = as_weight_only(f.weights) if f.weights.low and not f.activations.low else f.weights
    hbm = hw.hbm_Bps * cal.hbm_efficiency
    dequant = WEIGHT_ONLY_DEQUANT_PER_S.get(hw.arch, 0.0) if ffn_as_run.weight_only else 0.0
    return ServingRates(
        ffn_flops=rate(f.activations) * weight_only_mma_fraction(ffn_as_run, hw.arch) * blocks,
        attn_proj_flops=rate(f.attention)
        * weight_only_mma_fraction(f.attention, hw.arch)
        * block_scale_mma_fraction(f.attention, hw),
        bf16_flops=e16,
        attn_flops=rate(kv_compute) * cal.attention_efficiency,
        hbm_Bps=hbm,
        kernel_s=cal.kernel_overhead_us * 1e-6,
        step_s=getattr(cal, "step_overhead_us", 0.0) * 1e-6,
        moe_layer_s=cal.moe_layer_overhead_us * 1e-6,
        moe_efficiency=getattr(cal, "moe_efficiency", 1.0),
        moe_token_s=WEIGHT_ONLY_MOE_TOKEN_S.get(hw.arch, 0.0) if ffn_as_run.weight_only else 0.0,
        moe_weight_Bps=min(hbm, dequant * ffn_as_run.operand_bytes) if dequant else hbm,
        sm_count=hw.sm_count,
        exp_per_s=hw.exp_per_s * cal.attention_efficiency,
    )


def attention_params_per_rank(model: ModelSpec, tp: int) -> float:
    """Attention projection weights one attention-TP rank holds and reads each step: all split over `tp`,
    except MLA's replicated down-projections (module docstring)."""
    total = model.attention_matmul_params()
    if not model.is_mla or tp <= 1:
        return total / tp
    replicated = model.hidden * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim)
    return (total - replicated) / tp + replicated


def _gemm(tokens, params, w_bytes: float, rate: float, bw: float, act_bytes=0.0):
    """Roofline time of a GEMM over `tokens` rows with `params` weights on this GPU."""
    return np.maximum(2.0 * tokens * params / rate, (params * w_bytes + act_bytes) / bw)


def all_reduce_time(size_bytes, n: int, links: comm.Links):
    """TP all-reduce: the faster of ring (comm.all_reduce_time) and one-shot inside a scale-up domain."""
    if n <= 1:
        return np.zeros_like(np.asarray(size_bytes, dtype=float))
    ring = comm.all_reduce_time(size_bytes, n, 1.0, links)
    if n > links.domain:
        return ring
    one_shot = links.up_latency_s + (n - 1) * np.asarray(size_bytes, dtype=float) / links.up_Bps
    return np.minimum(ring, one_shot)


def dispatch_time(tokens, *, ep: int, topk: int, hidden: int, elem_bytes: float, links: comm.Links):
    """One all-to-all moving each of `tokens` tokens (per GPU) to the distinct remote ranks holding its
    experts: under uniform routing a given other rank receives it with probability 1 - (1 - 1/ep)^k."""
    if ep <= 1:
        return np.zeros_like(np.asarray(tokens, dtype=float))
    remote = (ep - 1) * (1.0 - (1.0 - 1.0 / ep) ** topk)
    size = np.asarray(tokens, dtype=float) * hidden * elem_bytes * remote
    n_in = min(ep, links.domain)
    intra = size * (n_in - 1) / (ep - 1)
    return comm.all_to_all_time(intra, size - intra, ep, links)


def experts_touched(tokens, *, experts_local: float, topk: int, experts: int):
    """Expected distinct experts of a GPU's `experts_local` that a step of `tokens` tokens routes to,
    E_loc·(1 - (1 - k/E)^T) under uniform routing (module docstring)."""
    t = np.asarray(tokens, dtype=float)
    return experts_local * (1.0 - (1.0 - topk / experts) ** t)


def deepep_normal_time(tokens, *, ep: int, topk: int, hidden: int, elem_bytes: float, links, node_limit=0):
    """One DeepEP normal-kernel dispatch (or combine) of `tokens` tokens per GPU: each token crosses the
    network once per scale-up domain holding one of its experts (node-limited routing caps them) and is
    forwarded inside that domain over the scale-up links, one copy per rank holding its experts; the two
    tiers run concurrently. Inside one domain it is a direct copy per distinct rank.

    Volumes count the home domain's (rank's) share, as DeepEP's reported "bottleneck bandwidth" does
    (its tests/test_internode.py counts (token, node) pairs including the local node; the V2 README notes
    "the results are logical bandwidth"), and move at the tier's link rate: 43-58 GB/s logical per
    400 Gb/s CX7 NIC and 153-158 GB/s over H800's ~160 GB/s NVLink for EP8-64, 4096 tokens, hidden 7168,
    top-8 (https://github.com/deepseek-ai/DeepEP, "Normal kernels with NVLink and RDMA forwarding")."""
    t = np.asarray(tokens, dtype=float)
    if ep <= 1:
        return np.zeros_like(t)
    n_in = min(ep, links.domain)
    size = t * hidden * elem_bytes
    ranks = comm.groups_touched(float(ep), topk)
    nvlink = size * ranks / links.up_Bps + links.up_latency_s
    if ep <= links.domain:
        return nvlink
    nodes = comm.groups_touched(ep / n_in, topk, node_limit)
    return np.maximum(nvlink, size * nodes / links.out_Bps + links.out_latency_s)


def deepep_low_latency_time(tokens, *, ep: int, topk: int, hidden: int, elem_bytes: float, links):
    """One DeepEP low-latency dispatch (or combine) of `tokens` tokens per GPU: one message per (token,
    expert) pair straight to the expert's rank, no deduplication, over the network (RDMA with IBGDA)
    or, inside the scale-up domain, NVLink; the tiers run concurrently at their link rates. DeepEP
    reports 39-98 GB/s per 400 Gb/s NIC (dispatch) counting every (token, expert) pair, for EP8-256 at
    128 tokens, hidden 7168, top-8 ("Low-latency kernels with pure RDMA", DeepEP README)."""
    t = np.asarray(tokens, dtype=float)
    if ep <= 1:
        return np.zeros_like(t)
    n_in = min(ep, links.domain)
    pairs = t * topk * hidden * elem_bytes
    nvlink = pairs * n_in / ep / links.up_Bps + links.up_latency_s
    if ep <= links.domain:
        return nvlink
    return np.maximum(nvlink, pairs * (ep - n_in) / ep / links.out_Bps + links.out_latency_s)


def moe_exchange_time(
    t_loc, t_ep, *, model: ModelSpec, formats: Formats, ep: int, ep_comm: str, links, prefill=False
):
    """Seconds of one MoE layer's token exchange under attention data parallelism: tokens leave in the
    activation format (e.g. FP4) and return in BF16, either all-gathered and reduce-scattered over the EP
    group (`ep_comm` "allgather", `t_ep` tokens in the group), dispatched to the ranks holding each of
    the `t_loc` local tokens' experts by a plain all-to-all ("alltoall"), or by DeepEP ("deepep"): its
    normal kernels for steps that carry prefill tokens (`prefill`), its low-latency kernels for pure
    decode steps, as SGLang's default `--deepep-mode auto` does ("low_latency for decode batch and normal
    for prefill batch", SGLang server arguments, https://docs.sglang.ai/advanced_features/server_arguments.html)."""
    h, k = model.hidden, model.topk
    disp_bytes = formats.activations.operand_bytes
    if ep_comm == "allgather":
        gather = comm.all_gather_time(t_ep * h * disp_bytes, ep, 1.0, links)
        return gather + comm.reduce_scatter_time(t_ep * h * 2.0, ep, 1.0, links)
    if ep_comm == "deepep":
        kw = dict(ep=ep, topk=k, hidden=h, links=links)
        normal = sum(
            deepep_normal_time(t_loc, elem_bytes=e, node_limit=model.node_limit, **kw)
            for e in (disp_bytes, 2.0)
        )
        low = sum(deepep_low_latency_time(t_loc, elem_bytes=e, **kw) for e in (disp_bytes, 2.0))
        return np.where(prefill, normal, low)
    out = dispatch_time(t_loc, ep=ep, topk=k, hidden=h, elem_bytes=disp_bytes, links=links)
    return out + dispatch_time(t_loc, ep=ep, topk=k, hidden=h, elem_bytes=2.0, links=links)


def draft_pass_time(b, *, model: ModelSpec, rates: ServingRates, links, tp: int, dp: int, ep: int):
    """Seconds of one speculative draft pass for `b` sequences per attention rank: the MTP module
    (DeepSeek-V3 technical report, arXiv 2412.19437 §2.2) in BF16, one layer + the 2h -> h projection +
    the shared head, run once per draft token ([TRT-LLM blog 1], its "MTP3_Autoregressive" setting)."""
    r, bw, h = rates, rates.hbm_Bps, model.hidden
    layer = model.moe_layer_params(active=False) if model.is_moe else model.dense_layer_params()
    routed_all = model.experts * model.expert_params() if model.is_moe else 0
    attn = model.attention_matmul_params()
    dense_part = (layer - routed_all - attn + 2 * h * h) / tp + attention_params_per_rank(model, tp)
    one = _gemm(b, dense_part, 2.0, r.bf16_flops, bw)
    if model.is_moe:
        t_ep, moe_tp = b * dp, tp * dp // ep
        touched = experts_touched(
            t_ep, experts_local=model.experts / ep, topk=model.topk, experts=model.experts
        )
        e_params = model.expert_params() / moe_tp
        grouped = grouped_gemm_seconds(
            t_ep * model.topk / ep,
            touched,
            hidden=h,
            width=model.moe_ffn // moe_tp,
            gated=model.gated,
            rate=r.bf16_flops * r.moe_efficiency,
            k_overhead=tile_k_overhead(r.bf16_flops, r.sm_count),
        )
        one = one + np.maximum(grouped, touched * e_params * 2.0 / bw)
    one = one + _gemm(b, model.vocab * h / tp, 2.0, r.bf16_flops, bw)
    kernels = KERNELS_MOE + KERNELS_HEAD + (KERNELS_MLA_EXTRA if model.is_mla else 0)
    return one + kernels * r.kernel_s + 2.0 * all_reduce_time(b * h * 2.0, tp, links)


def routed_expert_seconds(
    t_ep, *, model: ModelSpec, formats: Formats, rates: ServingRates, ep: int, moe_tp: int
):
    """Seconds of one MoE layer's routed experts on one GPU for `t_ep` tokens routed by the expert-parallel
    group: the grouped GEMMs (grouped_gemm.py) or, when larger, the touched experts' weight stream plus the
    tokens' activations, then the per-layer and per-token fixed costs (weight-only kernels). Router, shared
    experts, elementwise work and collectives are step_times'."""
    r, h, k = rates, model.hidden, model.topk
    t_ep = np.asarray(t_ep, dtype=float)
    pairs = t_ep * k / ep
    e_params = model.expert_params() / moe_tp
    touched = experts_touched(t_ep, experts_local=model.experts / ep, topk=k, experts=model.experts)
    grouped = grouped_gemm_seconds(
        pairs,
        touched,
        hidden=h,
        width=model.moe_ffn // moe_tp,
        gated=model.gated,
        rate=r.ffn_flops * r.moe_efficiency,
        k_overhead=tile_k_overhead(r.ffn_flops, r.sm_count),
    )
    stream = touched * e_params * formats.weights.operand_bytes / (r.moe_weight_Bps or r.hbm_Bps)
    moe = np.maximum(grouped, stream + pairs * 4 * h * 2.0 / r.hbm_Bps)
    return moe + r.moe_layer_s + r.moe_token_s * t_ep


def step_times(
    model: ModelSpec,
    *,
    formats: Formats,
    rates: ServingRates,
    links: comm.Links,
    tp: int,
    dp: int,
    ep: int,
    b,
    p,
    q: float,
    ctx_dec: float,
    isl: int,
    p_mean=None,
    draft_tokens: int = 0,
    ep_overlap: bool = False,
    ep_comm: str = "alltoall",
) -> dict[str, np.ndarray]:
    """Seconds of one engine step on one GPU, by part, for `b` decoding sequences and `p` prefill tokens
    on the busiest attention rank (arrays broadcast); `p_mean` is the mean prefill per rank, which sets
    the tokens the expert-parallel group routes (default p). `ctx_dec` is the mean cached context of a
    decoding sequence, `isl` the prompt length (for prefill attention). Parts: attention projections,
    attention core, FFN (dense + MoE GEMMs and elementwise), TP all-reduce, EP all-to-all, head, draft
    (MTP) passes, fixed overheads, and their sum `step`. `ep_comm` is the engine's MoE exchange under
    attention DP ("alltoall" or "allgather")."""
    p_mean = p if p_mean is None else p_mean
    b, p, p_mean = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (b, p, p_mean)))
    r = rates
    bw = r.hbm_Bps
    h, a = model.hidden, model.heads
    gpus = tp * dp
    moe_tp = gpus // ep
    t_loc = b * q + p  # tokens through the linear layers on this attention rank
    heads = a / tp
    out: dict[str, np.ndarray] = {}

    # ---- attention projections (per layer, same for dense and MoE layers) -----------------------
    p_attn = attention_params_per_rank(model, tp)
    proj = _gemm(t_loc, p_attn, formats.attention.operand_bytes, r.attn_proj_flops, bw, t_loc * 4 * h * 2.0)

    # ---- attention core over all layers -----------------------------------------------------------
    if model.is_mla:
        dec_per = 2.0 * (2 * model.kv_lora_rank + model.qk_rope_head_dim)
    else:
        dec_per = 2.0 * (model.qk_head_dim + model.v_dim)
    dec_scores = b * q * heads * stored_tokens(model, ctx_dec)  # one exponential per score
    dec_bytes = b * kv_bytes_per_sequence(model, formats.kv, ctx_dec, tp=tp)
    pf_ctx = attention_context(model, isl, causal=True) if isl > 0 else 0.0
    pf_scores = p * heads * pf_ctx * model.layers
    pf_per = 2.0 * (model.qk_head_dim + model.v_dim)
    kv_write = p * kv_bytes_per_sequence(model, formats.kv, 1.0, tp=tp)
    dec_compute = dec_scores * (dec_per / r.attn_flops + 1.0 / r.exp_per_s)
    pf_compute = pf_scores * (pf_per / r.attn_flops + 1.0 / r.exp_per_s)
    out["attention_s"] = np.maximum(dec_compute, dec_bytes / bw) + pf_compute + kv_write / bw
    out["attn_proj_s"] = model.layers * proj

    # ---- FFN: dense layers, then MoE layers --------------------------------------------------------
    wb = formats.weights.operand_bytes
    gate = 3 if model.gated else 2
    ffn = np.zeros_like(b)
    if model.n_dense_layers:
        f_loc = model.ffn / tp
        dense = _gemm(
            t_loc, model.mlp_matmul_params(model.ffn) / tp, wb, r.ffn_flops, bw, t_loc * 4 * h * 2.0
        )
        dense = dense + t_loc * (16 * h + gate * f_loc * 2.0) / bw  # add+norm x2, activation
        ffn = ffn + model.n_dense_layers * dense
    ep_time = np.zeros_like(b)
    if model.moe_layers:
        k, fe, n_exp = model.topk, model.moe_ffn, model.experts
        t_ep = (b * q + p_mean) * dp  # tokens the expert-parallel group routes per step
        pairs = t_ep * k / ep  # token-expert pairs per EP rank
        moe = routed_expert_seconds(t_ep, model=model, formats=formats, rates=r, ep=ep, moe_tp=moe_tp)
        moe = moe + _gemm(t_loc, h * n_exp, 2.0, r.bf16_flops, bw)  # router (BF16)
        if model.shared_experts:
            fs = model.shared_experts * fe
            moe = moe + _gemm(
                t_loc, model.mlp_matmul_params(fs) / tp, wb, r.ffn_flops, bw, t_loc * 4 * h * 2.0
            )
        moe = moe + (t_loc * 16 * h * 2.0 + pairs * gate * fe / moe_tp * 2.0 + 4 * k * h * t_loc) / bw
        ffn = ffn + model.moe_layers * moe
        if dp > 1:
            per_layer = moe_exchange_time(
                t_loc, t_ep, model=model, formats=formats, ep=ep, ep_comm=ep_comm, links=links, prefill=p > 0
            )
            if ep_overlap:  # the other micro-batch's layer (attention + FFN) runs meanwhile
                compute = proj + out["attention_s"] / model.layers + moe
                per_layer = np.maximum(per_layer - compute, 0.0)
            ep_time = model.moe_layers * per_layer
    out["ffn_s"] = ffn
    out["ep_s"] = ep_time
    out["tp_s"] = 2.0 * model.layers * all_reduce_time(t_loc * h * 2.0, tp, links)

    # ---- output head (BF16, vocabulary-parallel over TP) and speculative draft passes --------------
    head_tokens = b * q + np.where(p > 0, np.maximum(p / max(isl, 1), 1.0), 0.0)
    out["head_s"] = _gemm(head_tokens, model.vocab * h / tp, 2.0, r.bf16_flops, bw)
    draft = np.zeros_like(b)
    if draft_tokens:
        draft = draft_tokens * draft_pass_time(b, model=model, rates=r, links=links, tp=tp, dp=dp, ep=ep)
    out["draft_s"] = draft

    kernels = model.n_dense_layers * KERNELS_DENSE + model.moe_layers * KERNELS_MOE + KERNELS_HEAD
    kernels += model.layers * KERNELS_MLA_EXTRA if model.is_mla else 0
    parts = ("attn_proj_s", "attention_s", "ffn_s", "tp_s", "ep_s", "head_s", "draft_s")
    if ep_overlap and dp > 1 and model.moe_layers:
        kernels *= TBO_MICRO_BATCHES  # each micro-batch launches the layer's kernels
    out["overhead_s"] = np.full_like(b, kernels * r.kernel_s + r.step_s)
    out["step_s"] = sum(out[k] for k in parts) + out["overhead_s"]
    return out
