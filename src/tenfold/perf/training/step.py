"""Training step time of many plans at once (seconds, per GPU of the busiest pipeline stage).

One optimizer step, in the design's notation (B global batch, S sequence length, D hidden, L layers):
  t_mb   = Σ_layers on the stage [fwd + bwd + recompute + exposed TP/CP/EP communication]
           (+ the output head, loss and MTP modules, balanced across stages when the software does so)
           + exposed pipeline p2p + exposed ZeRO-3/FSDP gathers and reductions (`_fsdp_exposed`: the
           first layer's gathers of each pass, per-layer ring latency, what compute cannot cover)
  t_pipe = (m + bubble) · t_mb, bubble = (p - 1)/v for (interleaved) 1F1B with m >= p (Narayanan
           et al. 2021, https://arxiv.org/abs/2104.04473 §2.2; more when m < p, see `_bubble`),
           p/2 - 1 for DualPipe (DeepSeek-V3,
           https://arxiv.org/abs/2412.19437 §3.2.1); m = B / (dp · micro-batch) micro-batches per pipeline
  step   = t_pipe + exposed data-parallel gradient/parameter collectives (ZeRO-3: the last layer's
           reduce-scatter) + optimizer step
The overlap rules are in `stack.py`; layer compute in `compute.py`; collectives in `comm.py`; memory in
`memory.plan_memory`. `evaluate_plans` returns both, for the validation and the single estimate.
"""

from __future__ import annotations

import numpy as np

from tenfold.perf import comm
from tenfold.perf.calibration import Calibration
from tenfold.perf.comm import Links
from tenfold.perf.measured.gemm import shape_factors
from tenfold.perf.specs.hardware import Hardware
from tenfold.perf.specs.models import ModelSpec
from tenfold.perf.specs.precision import Precision
from tenfold.perf.training import memory
from tenfold.perf.training.compute import (
    LayerTimes,
    Rates,
    gemm_times,
    head_times,
    layer_times,
    module_recompute,
    op_sac_recompute,
    rates,
)
from tenfold.perf.training.grid import PlanGrid, PlanTerms
from tenfold.perf.training.layout import RECOMPUTE_FULL, RECOMPUTE_SELECTIVE
from tenfold.perf.training.stack import Stack, uses_flash

# Adam over one parameter, bytes of HBM traffic: read master/m/v/grad (16), write master/m/v (12),
# the bf16 parameter (2), gradient clipping and zeroing (8).
ADAM_BYTES_PER_PARAM = 38.0

# SMs the MoE dispatch/combine kernels hold while they overlap compute: DeepSeek-V3 gives 20 of the H800's
# 132 SMs to communication under DualPipe (https://arxiv.org/abs/2412.19437 §3.2.2), and 20 is
# Megatron-Core's `moe_deepep_num_sms` default (megatron/core/transformer/transformer_config.py).
EP_COMM_SMS = 20.0


def _exposed(comm_s, hide_s, software: Stack):
    """TP communication left exposed when it overlaps `hide_s` of GEMMs (see stack.py)."""
    if not software.tp_overlap:
        return comm_s
    return np.maximum(comm_s - hide_s, 0.0) + software.tp_overlap_residual * comm_s


def _cp_times(model: ModelSpec, p: PlanTerms, lt: LayerTimes, software: Stack, links: Links):
    """(forward, backward) exposed context-parallel communication of one layer."""
    T, tp, cp = p.tokens, p.tp, p.cp
    kv_heads = model.heads if model.is_mla else model.kv_heads
    # each TP rank exchanges only its own KV heads (one replicated head when tp > kv_heads)
    kv_chunk = T * np.maximum(kv_heads / tp, 1.0) * (model.qk_head_dim + model.v_dim) * 2.0
    if software.cp_comm == "ring":  # KV chunks passed cp - 1 times, hidden behind blockwise attention
        hop = comm.p2p_time(kv_chunk, tp, links)
        cp_f = np.maximum((cp - 1) * hop - lt.attn_f, 0.0)
        cp_b = np.maximum(2 * (cp - 1) * hop - lt.attn_b, 0.0)
    elif software.cp_comm == "allgather":  # Llama 3 (https://arxiv.org/abs/2407.21783 §3.3)
        ag = comm.all_gather_time(cp * kv_chunk, cp, tp, links)
        cp_f, cp_b = ag, 2.0 * ag
    else:  # a2a (Ulysses): q, k, v, o each redistributed between sequence and head sharding
        n_in = comm.ranks_per_domain(cp, tp, links.domain)
        qkvo = T * (2 * model.heads * model.qk_head_dim + 2 * kv_heads * model.v_dim) * 2.0 / tp
        a2a = comm.all_to_all_time(qkvo * (n_in - 1) / cp, qkvo * (cp - n_in) / cp, cp, links)
        cp_f, cp_b = a2a, a2a
    return np.where(cp > 1, cp_f, 0.0), np.where(cp > 1, cp_b, 0.0)


def _ep_times(
    model: ModelSpec,
    p: PlanTerms,
    lt: LayerTimes,
    software: Stack,
    links: Links,
    *,
    low: bool,
    sm_share: float,
):
    """(forward, backward) exposed expert-parallel all-to-all of one MoE layer: dispatch (in the low
    precision when there is one) and combine (16-bit) forward, the combine's gradient twice backward.
    Deduplicating dispatchers (DeepEP / HybridEP) run at the links' own efficiency
    (`comm.all_to_all_time`). Overlapped, what compute hides still costs time: the communication
    kernels hold `sm_share` of the SMs, so the compute beside them runs at 1 - sm_share of its speed."""
    kw = dict(
        topk=model.topk,
        ep=p.ep,
        stride=1.0,
        hidden=model.hidden,
        links=links,
        dedup=software.ep_dedup,
        node_limit=model.node_limit,
    )
    tok = p.tokens / p.tp
    i1, o1 = comm.moe_dispatch_bytes(tok, elem_bytes=1.0 if low else 2.0, **kw)
    i2, o2 = comm.moe_dispatch_bytes(tok, elem_bytes=2.0, **kw)
    fused = software.ep_dedup
    disp = comm.all_to_all_time(i1, o1, p.ep, links, fused=fused)
    comb = comm.all_to_all_time(i2, o2, p.ep, links, fused=fused)
    raw_f, raw_b = disp + comb, 2.0 * comb
    if software.ep_overlap:
        slow = sm_share / (1.0 - sm_share)

        def exposed(raw, compute):
            hidden = np.minimum(raw, compute)
            return raw - hidden + hidden * slow

        return exposed(raw_f, lt.fwd), exposed(raw_b, lt.bwd)
    return raw_f, raw_b


def _layer_costs(
    model: ModelSpec,
    p: PlanTerms,
    *,
    r: Rates,
    low: bool,
    software: Stack,
    links: Links,
    seq_len: int,
    sm_share: float,
) -> dict[str, np.ndarray]:
    """Seconds of one layer and one micro-batch, averaged over the model's dense and MoE layers:
    compute (fwd + bwd + recompute), exposed tp, cp and ep communication, and the recompute share."""
    T, tp, sp, rc, rf = p.tokens, p.tp, p.sequence_parallel, p.recompute, p.recompute_fraction
    D = model.hidden
    flash = uses_flash(model, software)
    kinds = [(n, moe) for n, moe in ((model.n_dense_layers, False), (model.moe_layers, True)) if n]
    tp_rs = comm.reduce_scatter_time(T * D * 2.0, tp, 1.0, links)
    out = {k: np.zeros_like(T) for k in ("compute", "tp", "cp", "ep", "recompute")}
    for count, moe in kinds:
        lt = layer_times(
            model, moe=moe, tokens=T, tp=tp, sp=sp, ep=p.ep, seq_len=seq_len, flash=flash, r=r, low=low
        )
        # tensor parallel: 2 AG + 2 RS per pass (AR = RS + AG without SP); SP re-gathers inputs for wgrad
        # (Korthikanti et al. 2022, https://arxiv.org/abs/2205.05198).
        n_f = 2.0 if moe else 4.0
        n_b = np.where(sp, 3.0 if moe else 6.0, n_f)
        tp_f = _exposed(n_f * tp_rs, lt.gemm_f, software)
        tp_b = _exposed(n_b * tp_rs, lt.gemm_b, software)
        cp_f, cp_b = _cp_times(model, p, lt, software, links)
        zero = np.zeros_like(T)
        ep_f, ep_b = (
            _ep_times(model, p, lt, software, links, low=low, sm_share=sm_share) if moe else (zero, zero)
        )
        # recomputation: full = the whole forward again (with its communication); selective = the
        # modules the stack names (`module_recompute`; "moe" with its dispatch and combine), or under
        # torchtitan's per-op policy every second matmul and the memory-bound ops, with the
        # sequence-parallel all-gathers feeding them (half the forward's TP collectives; the
        # reduce-scatters are saved)
        full, selective = rc == RECOMPUTE_FULL, rc == RECOMPUTE_SELECTIVE
        if software.selective_policy == "op":
            sel = op_sac_recompute(model, lt, moe=moe, tokens=T, tp=tp, r=r, low=low)
            sel_tp = 0.5 * tp_f
        else:
            sel, sel_tp = module_recompute(lt, software.recompute_modules, r=r), 0.0
        sel_ep = ep_f if moe and "moe" in software.recompute_modules else 0.0
        rec_compute = np.where(full, rf * lt.fwd, np.where(selective, sel, 0.0))
        rec_tp = np.where(full, rf * tp_f, np.where(selective, sel_tp, 0.0))
        rec_ep = np.where(full, rf * ep_f, np.where(selective, sel_ep, 0.0))
        w = count / model.layers
        out["compute"] = out["compute"] + w * (lt.fwd + lt.bwd + rec_compute)
        out["recompute"] = out["recompute"] + w * rec_compute
        out["tp"] = out["tp"] + w * (tp_f + tp_b + rec_tp)
        out["cp"] = out["cp"] + w * (cp_f + cp_b)
        out["ep"] = out["ep"] + w * (ep_f + ep_b + rec_ep)
    return out


def _last_stage_extra(
    model: ModelSpec, p: PlanTerms, *, r: Rates, low: bool, software: Stack, seq_len: int
) -> np.ndarray:
    """Seconds per micro-batch of the work only the last stage does: output head and loss, and the
    multi-token-prediction modules (one layer, a 2D x D projection and the head each; DeepSeek-V3 §2.2)."""
    T, tp, D = p.tokens, p.tp, model.hidden
    hf, hb = head_times(model, tokens=T, tp=tp, r=r)
    extra = hf + hb
    if model.mtp_layers:
        flash = uses_flash(model, software)
        lt = layer_times(
            model,
            moe=model.is_moe,
            tokens=T,
            tp=tp,
            sp=p.sequence_parallel,
            ep=p.ep,
            seq_len=seq_len,
            flash=flash,
            r=r,
            low=low,
        )
        pf, pb = gemm_times(T, D, 2 * D / tp, r, low=False)
        extra = extra + model.mtp_layers * (lt.fwd + lt.bwd + pf + pb + hf + hb)
    return extra


def _pipeline_p2p(model: ModelSpec, p: PlanTerms, software: Stack, links: Links) -> np.ndarray:
    """Exposed pipeline point-to-point seconds per micro-batch. Each TP rank sends 1/t of the activation
    (Narayanan et al. 2021 §4.1 scatter-gather; the receiver's NVLink all-gather is cheap and ignored).
    Megatron overlaps p2p with compute only in the interleaved schedule (`overlap_p2p_comm` needs vp > 1);
    plain 1F1B sends and receives block between steps. DualPipe overlaps them by design."""
    if software.pp_schedule == "dualpipe":
        return np.zeros_like(p.tokens)
    p2p = comm.p2p_time(p.tokens * model.hidden * 2.0 / p.tp, p.tp * p.cp * p.dp, links)
    pp_raw = np.where(p.pp > 1, 2.0 * p.vp * p2p, 0.0)
    return np.where(software.pp_overlap & (p.vp > 1), 0.0, pp_raw)


def _bubble(p: PlanTerms, software: Stack) -> np.ndarray:
    """Pipeline bubble in micro-batch times: p/2 - 1 for DualPipe; for (interleaved) 1F1B
    (p - 1)/v + max(p - m, 0)·(1 - 1/v).

    With m >= p micro-batches the interleaved schedule's bubble is (p - 1)/v (Narayanan et al. 2021 §2.2).
    With m < p a micro-batch's chunk comes back to the first stage after p chunk-slots but only m slots
    are busy, so each of the v rounds takes p slots: the step is v·p + m - 1 chunk-slots (of 1/v
    micro-batch time each) against m·v of work. At m = 1 this is p - 1, interleaving gains nothing;
    at v = 1 it is plain 1F1B's p - 1."""
    if software.pp_schedule == "dualpipe":
        return np.maximum(p.pp / 2.0 - 1.0, 0.0)
    return (p.pp - 1.0) / p.vp + np.maximum(p.pp - p.microbatches, 0.0) * (1.0 - 1.0 / p.vp)


def _fsdp_exposed(dense_p, expert_p, p: PlanTerms, hide_s, *, software: Stack, links: Links):
    """Exposed ZeRO-3 / FSDP communication of the busiest stage (seconds): "per_mb" per micro-batch when the
    weights are re-gathered for every micro-batch, "tail" once per step, and one unit's gather "ag_unit".

    FSDP gathers and reduces one unit at a time (a unit = one transformer layer, the usual wrapping; PyTorch
    FSDP, Zhao et al. 2023, https://arxiv.org/abs/2304.11277 §3.2-3.3; ZeRO-3, Rajbhandari et al. 2020,
    https://arxiv.org/abs/1910.02054 §5.3), u = stage_layers units of 1/u of the stage's parameters each,
    so every unit's collective pays its own latency: a ring all-gather or reduce-scatter over n ranks takes
    (n - 1) steps of α (comm.reduce_scatter_time: (n_in - 1)·α_up + (n_dom - 1)·α_out; NCCL runs
    all-gather and reduce-scatter as rings across nodes, its tree being for all-reduce only, and its
    logarithmic PAT algorithm only with one GPU per node: NVIDIA/nccl src/graph/tuning.cc, "nInterSteps").
    Per micro-batch and model chunk, the unit's forward gather, backward gather and gradient
    reduce-scatter cost u·(2·AG_unit + RS_unit). Prefetching hides unit i+1's gather behind unit i's
    compute (FSDP paper §3.3.2 backward/forward prefetch), but nothing hides
      * the first unit's gather of each forward and each backward pass of each of the vp chunks:
        2·vp·AG_unit per micro-batch (compute waits for its weights);
      * the last unit's reduce-scatter after the last backward compute of the step: RS_unit per step
        (the earlier micro-batches' last reduce-scatter overlaps the next micro-batch's forward).
    The rest hides behind `hide_s` (the stage's per-micro-batch compute) when that is longer.
    """
    u = p.stage_layers
    gb = software.grad_reduce_bytes

    def unit(coll, elem_bytes):  # dense and expert groups; no expert collective in a dense model
        expert = coll(expert_p * elem_bytes / u, p.expert_dp, p.ep, links)
        return coll(dense_p * elem_bytes / u, p.dense_dp, p.tp, links) + np.where(expert_p > 0, expert, 0.0)

    ag_unit = unit(comm.all_gather_time, 2.0)
    rs_unit = unit(comm.reduce_scatter_time, gb)
    head = 2.0 * p.vp * ag_unit
    rest = u * (2.0 * ag_unit + rs_unit) - head - rs_unit
    hidden_rest = np.maximum(rest - hide_s, 0.0) if software.dp_overlap else rest
    return {"per_mb": head + hidden_rest, "tail": rs_unit, "ag_unit": ag_unit}


def _optimizer_time(dense_p, expert_p, p: PlanTerms, *, r: Rates, precision: Precision) -> np.ndarray:
    """Memory-bound Adam over the local shard, plus casting the weights to the low precision."""
    zero = p.zero
    shard = np.where(zero >= 1, dense_p / p.dense_dp + expert_p / p.expert_dp, dense_p + expert_p)
    t_opt = shard * ADAM_BYTES_PER_PARAM / r.hbm_Bps
    if precision.low:
        local = np.where(zero == 3, shard, dense_p + expert_p)
        t_opt = t_opt + local * precision.quant_bytes / r.hbm_Bps
    return t_opt


def plan_times(
    model: ModelSpec,
    hw: Hardware,
    grid: PlanGrid,
    *,
    precision: Precision,
    software: Stack,
    calibration: Calibration,
    seq_len: int,
    global_batch: int,
) -> dict[str, np.ndarray]:
    """Step time and its breakdown (seconds) for every plan of `grid` (see the module docstring).

    Keys: compute_s, tp_s, cp_s, ep_s, pp_s, fsdp_s, bubble_s, dp_s, optimizer_s (they sum to step_s),
    recompute_s (part of compute_s), step_s, microbatches, gpus. Structural validity is not checked here
    (see PlanGrid.rule_masks); every plan gets numbers.
    """
    p = grid.terms(layers=model.layers, seq_len=seq_len, global_batch=global_batch)
    low = precision.low
    r = rates(
        hw,
        precision,
        calibration,
        kernels=software.kernels,
        full_graph=software.full_iteration_graph,
        shapes=shape_factors(hw, precision, calibration),
    )
    links = calibration.links(hw)
    zero, m = p.zero, p.microbatches
    sm_share = EP_COMM_SMS / hw.sm_count if hw.sm_count else 0.0
    layer = _layer_costs(
        model, p, r=r, low=low, software=software, links=links, seq_len=seq_len, sm_share=sm_share
    )
    t_layer = layer["compute"] + layer["tp"] + layer["cp"] + layer["ep"]
    extra = _last_stage_extra(model, p, r=r, low=low, software=software, seq_len=seq_len)

    # the busiest stage: whole layers, or an even share of layers and head when stages are balanced
    slots = p.stage_layers
    if software.balanced_stages:
        use_grain = slots * t_layer >= (model.layers * t_layer + extra) / p.pp
        scale = np.where(use_grain, slots, model.layers / p.pp)
        extra_share = np.where(use_grain, 0.0, extra / p.pp)
    else:
        scale, extra_share = slots, extra
    per_mb = {
        "compute": scale * layer["compute"] + extra_share,
        "tp": scale * layer["tp"],
        "cp": scale * layer["cp"],
        "ep": scale * layer["ep"],
    }
    stage_busy = per_mb["compute"] + per_mb["tp"] + per_mb["cp"] + per_mb["ep"]
    per_mb["pp"] = _pipeline_p2p(model, p, software, links)

    # data parallelism: parameter all-gathers and gradient reduce-scatters over the dense and expert groups
    dense_p, expert_p = memory.stage_params(model, t=p.tp, pp=p.pp, vp=p.vp, ep=p.ep)
    gb = software.grad_reduce_bytes
    ag_w = comm.all_gather_time(dense_p * 2.0, p.dense_dp, p.tp, links) + comm.all_gather_time(
        expert_p * 2.0, p.expert_dp, p.ep, links
    )
    rs_g = comm.reduce_scatter_time(dense_p * gb, p.dense_dp, p.tp, links) + comm.reduce_scatter_time(
        expert_p * gb, p.expert_dp, p.ep, links
    )
    regather = (zero == 3) & software.fsdp_regather
    # FSDP traffic hides behind compute only: while the exposed TP/CP/EP collectives run, the same links
    # (EP beyond a node: the same NIC) are busy, so they cannot carry the gathers as well
    fsdp = _fsdp_exposed(dense_p, expert_p, p, per_mb["compute"], software=software, links=links)
    per_mb["fsdp"] = np.where(regather, fsdp["per_mb"], 0.0)
    t_mb = sum(per_mb.values())
    bubble_mb = _bubble(p, software)

    # ZeRO-0/1/2 gradient reduction and parameter gather, once per step
    ar = comm.all_reduce_time(dense_p * gb, p.dense_dp, p.tp, links) + comm.all_reduce_time(
        expert_p * gb, p.expert_dp, p.ep, links
    )
    grad = np.where(zero == 0, ar, rs_g)
    gather = np.where(zero == 0, 0.0, ag_w)
    if software.dp_overlap:
        dp_exp = np.maximum(grad - stage_busy * 2 / 3, 0.0) + np.maximum(gather - stage_busy / 3, 0.0)
    else:
        dp_exp = grad + gather
    # ZeRO-3 regathering per micro-batch: the last unit's reduce-scatter after the last backward
    fsdp_tail = np.where(regather, fsdp["tail"], 0.0)
    dp_exp = np.where(regather, 0.0, dp_exp)
    t_opt = _optimizer_time(dense_p, expert_p, p, r=r, precision=precision)

    out = {f"{k}_s": m * v for k, v in per_mb.items()}
    out["fsdp_s"] = out["fsdp_s"] + fsdp_tail
    out["bubble_s"] = bubble_mb * t_mb
    out["dp_s"] = dp_exp
    out["optimizer_s"] = t_opt
    out["recompute_s"] = m * scale * layer["recompute"]
    out["step_s"] = (m + bubble_mb) * t_mb + fsdp_tail + dp_exp + t_opt
    out["microbatches"] = m
    out["gpus"] = p.tp * p.pp * p.dp * p.cp
    return out


def evaluate_plans(
    model: ModelSpec,
    hw: Hardware,
    grid: PlanGrid,
    *,
    precision: Precision,
    software: Stack,
    calibration: Calibration,
    seq_len: int,
    global_batch: int,
) -> dict[str, np.ndarray]:
    """`plan_times` and `memory.plan_memory` together (the keys of both)."""
    out = plan_times(
        model,
        hw,
        grid,
        precision=precision,
        software=software,
        calibration=calibration,
        seq_len=seq_len,
        global_batch=global_batch,
    )
    out.update(
        memory.plan_memory(
            model,
            grid,
            precision=precision,
            software=software,
            seq_len=seq_len,
            global_batch=global_batch,
        )
    )
    return out
