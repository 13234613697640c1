"""Memory per GPU: model states under ZeRO-0/1/2/3 (FSDP), activations per Korthikanti et al., pipeline
in-flight micro-batches, MoE experts under expert parallelism.

Sources:
* ZeRO (Rajbhandari et al., SC'20, https://arxiv.org/abs/1910.02054 §5): mixed-precision Adam keeps 2Ψ
  bf16 weights + 2Ψ gradients + KΨ optimizer states (K = 12: fp32 master, m, v). ZeRO-1 shards the
  optimizer states over N_d data-parallel ranks, ZeRO-2 also the gradients, ZeRO-3 / FSDP also the weights.
  Paper example, Ψ = 7.5B, N_d = 64: 120 -> 31.4 -> 16.6 -> 1.9 GB.
* Activations (Korthikanti et al. 2022, https://arxiv.org/abs/2205.05198 §4): per layer, s·b·h·(34 + 5as/h)
  bytes without parallelism; with tensor parallelism t: s·b·h·(10 + 24/t + 5as/(ht)); with sequence
  parallelism too: s·b·h/t·(34 + 5as/h); selective recomputation drops the 5as/h term (the attention core);
  full recomputation keeps only the layer input, 2sbh (÷t with SP). The general count below derives the
  34 op by op, so GQA, gated FFNs, MoE, MLA and flash attention (no s x s scores) change it correctly.
* Selective recomputation frees what the stack's `recompute_modules` name (Megatron-Core
  `TransformerConfig.recompute_modules`, https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/
  transformer/transformer_config.py; default `core_attn` = Korthikanti's selective), or follows torchtitan's
  per-op policy (`op`); `Stack.activation_offload_layers` (Megatron `cpu_offloading_num_layers`) keeps that
  many layers per model chunk in host memory between forward and backward.
* 1F1B (Narayanan et al. 2021, https://arxiv.org/abs/2104.04473): the first stage holds p micro-batches
  in flight of L/p layers each; the interleaved schedule with v chunks holds (v-1)·p + 2(p-1) + 1
  chunk-micro-batches (Megatron-LM's warm-up count), about L·(1 + (p-1)/(p·v)) layers' worth.

All functions take numpy arrays (or scalars) for the layout so the search evaluates many plans at once;
`plan_memory` puts them together for every plan of a `PlanGrid`.
"""

from __future__ import annotations

import numpy as np

from tenfold.perf.specs.models import ModelSpec
from tenfold.perf.specs.precision import Precision
from tenfold.perf.training.grid import PlanGrid
from tenfold.perf.training.layout import (
    RECOMPUTE_FULL,
    RECOMPUTE_NONE,
    RECOMPUTE_SELECTIVE,
    embedding_loss_split,
)
from tenfold.perf.training.stack import Stack

# Fixed per-GPU overhead outside the model: CUDA context, NCCL and cuBLAS/TE workspaces (~2.5 GiB
# observed on H100 runs; order-of-magnitude figure, not fitted), plus 5 % allocator fragmentation.
FIXED_OVERHEAD_BYTES = 2.5 * 1024**3
FRAGMENTATION = 0.05


def zero_model_state_bytes(
    psi: float,
    n_d: int,
    stage: int,
    *,
    weight_bytes: float = 2.0,
    grad_bytes: float = 2.0,
    optimizer_bytes: float = 12.0,
) -> float:
    """Model-state bytes per GPU under ZeRO `stage` 0-3 (ZeRO paper §5, Figure 1)."""
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, got {stage}")
    if n_d < 1:
        raise ValueError(f"data-parallel degree must be >= 1, got {n_d}")
    w, g, o = weight_bytes * psi, grad_bytes * psi, optimizer_bytes * psi
    return [w + g + o, w + g + o / n_d, w + (g + o) / n_d, (w + g + o) / n_d][stage]


def korthikanti_activation_bytes(
    *, s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False, recompute: str = "none"
) -> float:
    """Activation bytes of one GPT layer, exactly as in Korthikanti et al. 2022 (Table 2 / Eq. 1-5)."""
    if recompute == "full":
        return 2.0 * s * b * h / (t if sp else 1)
    core = 0.0 if recompute == "selective" else 5.0 * a * s / h
    if sp:
        return s * b * h / t * (34.0 + core)
    if t == 1:
        return s * b * h * (34.0 + core)
    return s * b * h * (10.0 + 24.0 / t + core / t)


def _activation_terms(model: ModelSpec, *, seq_len: int, flash: bool, ob: float, moe: bool):
    """Per-token bytes one layer saves for backward, by tensor: {name: (bytes, split)} where split is
    "r" (norm/dropout/residual region: divided by TP only under SP) or "t" (inside TP regions)."""
    h, a, g = model.hidden, model.heads, model.kv_heads
    dqk, dv = model.qk_head_dim, model.v_dim
    drop = 1.0 if model.dropout > 0 else 0.0
    terms = {"attn_norm_in": (2 * h + drop * h, "r"), "qkv_in": (ob * h, "r")}  # + dropout mask
    if model.is_mla:
        terms["qkv"] = (2 * (a * dqk + a * dqk + a * dv), "t")  # after the up-projections
        terms["latent"] = (ob * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim), "t")
    else:
        terms["qkv"] = (2 * (a * dqk + g * dqk + g * dv), "t")
    terms["attn_out"] = (2 * a * dv + (0.0 if ob == 2 else ob * a * dv), "t")  # + out-proj input copy
    # flash keeps a log-sum-exp per head (fp32); unfused keeps the softmax output (+ dropout mask, output)
    terms["core"] = (4.0 * a if flash else (2.0 + 3.0 * drop) * a * seq_len, "t")
    terms["mlp_norm_in"] = (2 * h + drop * h, "r")
    gate = 2 if model.gated else 1
    if moe:
        k, fe = model.topk, model.moe_ffn
        terms["router_in"] = (2 * h, "r")
        # per routed copy: the FC1 input and output. The routing weight multiplies the activation output
        # (Megatron-Core experts.py `activation_func_with_probs`), so the combine is a plain sum that
        # keeps nothing for backward.
        terms["experts"] = (k * (ob * h + 2 * gate * fe), "t")
        terms["expert_act"] = (k * ob * fe, "t")  # FC2 input
        fs = model.shared_experts * fe
        terms["shared"] = (ob * h + 2 * gate * fs + ob * fs if fs else 0.0, "t")
    else:
        terms["fc1_in"] = (ob * h, "r")
        terms["fc"] = (2 * gate * model.ffn + ob * model.ffn, "t")
    return terms


# Tensors each Megatron-Core recompute module frees (transformer_config.py `recompute_modules`): the norms'
# outputs (the GEMM inputs only when those are kept in bf16; an FP8 GEMM keeps its own quantized copy),
# the MLA up-projections' q/k/v, the dense MLP, the MoE activation (FC2 input), the whole MoE layer, the
# shared experts; "core_attn" the attention core (Korthikanti's selective recomputation).
_FREED = {
    "core_attn": ("core",),
    "layernorm": ("qkv_in_bf16", "fc1_in_bf16", "router_in"),
    "mla_up_proj": ("qkv",),
    "mlp": ("fc1_in", "fc1_in_bf16", "fc"),
    "moe_act": ("expert_act",),
    "moe": ("router_in", "experts", "expert_act", "shared"),
    "shared_experts": ("shared",),
}


def _op_sac_bytes(model: ModelSpec, terms: dict, t, r, moe: bool):
    """torchtitan per-op selective checkpointing: the block input, the attention outputs (SDPA is in
    `_save_list`) and every other matmul output (the policy recomputes each even-numbered mm of a block:
    q, v, FC1/W1 and W2 are kept; k, o, W3 recomputed); norms and activations are recomputed."""
    a, g, dqk, dv = model.heads, model.kv_heads, model.qk_head_dim, model.v_dim
    ffn = model.topk * model.moe_ffn if moe else model.ffn
    attn = 2 * a * dqk + 2 * g * dv + 2 * a * dv + terms["core"][0]
    w2_out = 2.0 * model.hidden if model.gated else 0.0  # the 7th mm; before TP's reduction: not split
    return 2.0 * model.hidden / r + (attn + 2 * ffn) / t + w2_out


def layer_activation_bytes_per_token(
    model: ModelSpec,
    *,
    t,
    sp,
    recompute,
    seq_len: int,
    flash: bool,
    operand_bytes: float = 2.0,
    moe: bool = False,
    modules: tuple[str, ...] = ("core_attn",),
):
    """Bytes one layer stores per token of a micro-batch (per GPU), for the backward pass.

    `t` tensor-parallel degree, `sp` sequence parallelism (0/1), `recompute` the mode's code
    (layout.RECOMPUTE_CODE; arrays broadcast), `flash` attention without materialised scores,
    `operand_bytes` bytes of a saved GEMM input (TE keeps the quantized copy under FP8/FP4), `moe` an MoE
    layer instead of a dense one, `modules` what selective recomputation recomputes (Stack.recompute_modules).
    For GPT with flash=False and 2-byte operands this reproduces Korthikanti's 34 + 5as/h.
    """
    t = np.asarray(t, dtype=float)
    r = np.where(np.asarray(sp, dtype=bool), t, 1.0)  # norms/dropout/residual regions are split by SP only
    ob = operand_bytes
    terms = _activation_terms(model, seq_len=seq_len, flash=flash, ob=ob, moe=moe)
    if ob == 2:  # the norm outputs are the saved GEMM inputs themselves
        terms["qkv_in_bf16"], terms["fc1_in_bf16"] = terms.pop("qkv_in"), terms.pop("fc1_in", (0.0, "r"))

    def total(names) -> np.ndarray:
        return sum((b / (r if s == "r" else t) for n, (b, s) in terms.items() if n in names), 0.0 * t)

    stored = total(terms)
    if "op" in modules:
        selective = _op_sac_bytes(model, terms, t, r, moe)
    else:
        selective = stored - total({n for m in modules for n in _FREED[m]})
    rc = np.asarray(recompute)
    stored = np.where(rc == RECOMPUTE_SELECTIVE, selective, stored)
    return np.where(rc == RECOMPUTE_FULL, 2.0 * model.hidden / r, stored)


def inflight_layer_microbatches(*, layers: int, pp, vp, m, schedule: str = "1f1b"):
    """Layer x micro-batch activation sets resident on the first pipeline stage at the peak."""
    pp, vp, m = (np.asarray(x, dtype=float) for x in (pp, vp, m))
    slots = np.ceil(layers / (pp * vp))  # layers per chunk
    if schedule == "dualpipe":
        # DualPipe (DeepSeek-V3, https://arxiv.org/abs/2412.19437 §3.2.1) keeps PP + 1 micro-batches of
        # activations.
        return np.minimum(m, pp + 1) * slots * vp
    one = np.minimum(m, pp) * slots * vp
    interleaved = np.minimum(m * vp, (vp - 1) * pp + 2 * (pp - 1) + 1) * slots
    return np.where(vp > 1, interleaved, one)


def stage_params(model: ModelSpec, *, t, pp, vp, ep):
    """(dense, expert) parameters held by the busiest pipeline stage's GPU, after TP and EP sharding.

    Dense = everything but routed experts (attention, norms, router, shared experts, dense MLPs, and the
    embedding/head on the first/last stage: both when pp = 1 or embeddings are tied)."""
    t, pp, vp, ep = (np.asarray(x, dtype=float) for x in (t, pp, vp, ep))
    slots = np.ceil(model.layers / (pp * vp)) * vp
    per_layer_dense = (
        model.n_dense_layers * model.dense_layer_params()
        + model.moe_layers * (model.moe_layer_params() - model.experts * model.expert_params())
    ) / model.layers
    per_layer_expert = model.moe_layers * model.experts * model.expert_params() / model.layers
    emb = model.vocab * model.hidden
    first = model.embedding_params()
    last = model.head_params() + (emb if model.tied_embeddings else 0)
    edge = np.where(pp > 1, np.maximum(first, last), first + model.head_params())
    dense = slots * per_layer_dense / t + edge / t
    expert = slots * per_layer_expert / ep
    return dense, expert


def model_state_bytes(
    dense,
    expert,
    *,
    zero,
    dp_dense,
    dp_expert,
    weight_bytes: float,
    grad_bytes: float,
    optimizer_bytes: float = 12.0,
    gathered=0.0,
):
    """(weights, grads, optimizer) bytes per GPU; ZeRO stage per plan; `gathered` = unsharded bf16 weights
    resident under ZeRO-3 (the layers being computed and prefetched)."""
    z = np.asarray(zero)
    nd, ne = np.asarray(dp_dense, dtype=float), np.asarray(dp_expert, dtype=float)

    def part(psi, n):
        w = np.where(z >= 3, weight_bytes * psi / n, weight_bytes * psi)
        g = np.where(z >= 2, grad_bytes * psi / n, grad_bytes * psi)
        o = np.where(z >= 1, optimizer_bytes * psi / n, optimizer_bytes * psi)
        return w, g, o

    wd, gd, od = part(dense, nd)
    we, ge, oe = part(expert, ne)
    return wd + we + np.where(z >= 3, gathered, 0.0), gd + ge, od + oe


def _kept_after_offload(offload_layers: int, *, slots, chunks):
    """Share of the layer activations left on the GPU when `offload_layers` layers of each model chunk
    send theirs to host memory between forward and backward (Megatron-Core `cpu_offloading_num_layers`:
    the offload of layer i overlaps the forward of layer i+1 and its reload the backward of layer i+1, so
    only the layers not offloaded stay resident at the peak)."""
    per_chunk = np.asarray(slots, dtype=float) / np.asarray(chunks, dtype=float)
    return 1.0 - np.minimum(float(offload_layers), per_chunk) / per_chunk


def _first_stage_layer_share(layers: int, pp, vp, software: Stack):
    """Share of the first stage's layer slots that hold a transformer layer. When the split counts the
    embedding as a layer (balanced stages whose L layers do not split evenly but L + 2 do), one slot of the
    first stage holds only the embedding (Megatron-Core account_for_embedding_in_pipeline_split; Llama 3,
    arXiv 2407.21783 §3.3.2), so its activations are (k·v - 1)/(k·v) of a full stage's."""
    pp, vp = np.asarray(pp, dtype=float), np.asarray(vp, dtype=float)
    chunks = pp * vp
    if not software.balanced_stages:
        return np.ones_like(chunks)
    slots = (layers + 2) / chunks * vp
    return np.where(embedding_loss_split(layers, chunks), (slots - 1.0) / slots, 1.0)


def plan_memory(
    model: ModelSpec,
    grid: PlanGrid,
    *,
    precision: Precision,
    software: Stack,
    seq_len: int,
    global_batch: int,
) -> dict[str, np.ndarray]:
    """Memory per GPU of the busiest stage for every plan of `grid` (bytes): weights_B, grads_B,
    optimizer_B, activations_B, other_B (buffers, fragmentation, CUDA/NCCL context) and the total memory_B."""
    p = grid.terms(layers=model.layers, seq_len=seq_len, global_batch=global_batch)
    T, tp, rc, rf, slots = p.tokens, p.tp, p.recompute, p.recompute_fraction, p.stage_layers
    L, D = model.layers, model.hidden
    full = rc == RECOMPUTE_FULL
    kinds = [moe for moe, n in ((False, model.n_dense_layers), (True, model.moe_layers)) if n]
    kw = dict(
        t=tp,
        sp=p.sequence_parallel,
        seq_len=seq_len,
        flash=software.flash_attention,
        operand_bytes=precision.operand_bytes if precision.low else 2.0,
        modules=software.recompute_modules,
    )
    acts = [layer_activation_bytes_per_token(model, recompute=rc, moe=moe, **kw) for moe in kinds]
    acts_none = [
        layer_activation_bytes_per_token(model, recompute=RECOMPUTE_NONE, moe=moe, **kw) for moe in kinds
    ]
    # partial full recomputation: the recomputed share stores layer inputs, the rest everything
    acts = [np.where(full, rf * a + (1 - rf) * n, a) for a, n in zip(acts, acts_none, strict=True)]
    if len(kinds) == 2:
        a_avg = (model.n_dense_layers * acts[0] + model.moe_layers * acts[1]) / L
        a_none = np.maximum(*acts_none)
    else:
        a_avg, a_none = acts[0], acts_none[0]
    inflight = inflight_layer_microbatches(
        layers=L, pp=p.pp, vp=p.vp, m=p.microbatches, schedule=software.pp_schedule
    )
    work = np.where(full, T * a_none, 0.0)  # one layer's full set while recomputing it
    logits = 6.0 * model.vocab / tp * T
    kept = _kept_after_offload(software.activation_offload_layers, slots=slots, chunks=p.vp)
    first = kept * inflight * _first_stage_layer_share(L, p.pp, p.vp, software) * T * a_avg + work
    last = kept * slots * T * a_avg + work + logits
    activations = np.where(p.pp > 1, np.maximum(first, last), first + logits)

    dense_p, expert_p = stage_params(model, t=tp, pp=p.pp, vp=p.vp, ep=p.ep)
    gathered = 2.0 * 2.0 * (dense_p / slots + expert_p / slots)
    # FSDP that keeps the weights gathered through a step holds them like ZeRO-2 while it runs; a step of a
    # single micro-batch gathers once anyway and reshards after the forward (torchtitan sets
    # reshard_after_forward = not pp_enabled, torchtitan/parallelisms/parallelize_llama.py at 9dec370)
    keep = (p.zero == 3) & (not software.fsdp_regather) & (np.asarray(p.microbatches) > 1)
    zero_held = np.where(keep, 2, p.zero)
    weights, grads, opt = model_state_bytes(
        dense_p,
        expert_p,
        zero=zero_held,
        dp_dense=p.dense_dp,
        dp_expert=p.expert_dp,
        weight_bytes=2.0 + precision.weight_copy_bytes,
        grad_bytes=software.main_grad_bytes,
        gathered=gathered,
    )
    if software.pp_schedule == "dualpipe":  # two copies of the parameters (DeepSeek-V3 §3.2.1)
        weights, grads = 2.0 * weights, 2.0 * grads
    buffers = T * D * 2.0 * 2.0  # TP/SP gathered activations and p2p buffers
    if model.is_moe:
        buffers = buffers + 2.0 * (T / tp) * model.topk * D * 2.0
    core = weights + grads + opt + activations + buffers
    other = buffers + FRAGMENTATION * core + FIXED_OVERHEAD_BYTES
    return {
        "weights_B": weights,
        "grads_B": grads,
        "optimizer_B": opt,
        "activations_B": activations,
        "other_B": other,
        "memory_B": weights + grads + opt + activations + other,
    }
