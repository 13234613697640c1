"""Training step time, throughput and memory for a model, a cluster and a parallel layout.

`evaluate_plans()` is the model: numpy arrays in (one element per candidate plan), arrays out, so the grid
search and the single estimate run the same code. `estimate_training()` wraps it for one plan and returns a
frozen `TrainingEstimate`.

Step time (one optimizer step, per GPU of the busiest pipeline stage):
  t_mb   = Σ_layers on the stage [fwd + bwd + recompute + exposed TP/CP/EP communication]
           (+ the output head, loss and MTP modules, balanced across stages when the software does so)
           + exposed pipeline p2p + exposed ZeRO-3/FSDP gathers and reductions
  t_pipe = (m + bubble) · t_mb, bubble = (p - 1)/v for (interleaved) 1F1B (Narayanan et al. 2021),
           p/2 - 1 for DualPipe (DeepSeek-V3 §3.2.1); m = micro-batches per step per pipeline
  step   = t_pipe + exposed data-parallel gradient/parameter collectives + optimizer step
The overlap rules are in `stack.py`; layer compute in `compute.py`; collectives in `comm.py`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from tenfold.perf import comm
from tenfold.perf.calibration import Calibration, load_calibration
from tenfold.perf.errors import Infeasible
from tenfold.perf.flops import training_flops_per_token
from tenfold.perf.specs.catalog import GiB
from tenfold.perf.specs.hardware import Hardware, load_hardware
from tenfold.perf.specs.models import ModelSpec, load_model
from tenfold.perf.specs.precision import Precision, check_supported, get_precision
from tenfold.perf.training import memory
from tenfold.perf.training.compute import gemm_times, head_times, layer_times, rates
from tenfold.perf.training.layout import Layout, layout_problems
from tenfold.perf.training.stack import TP_OVERLAP_RESIDUAL, Stack, stack

RECOMPUTE_CODE = {"none": 0, "selective": 1, "full": 2}
BREAKDOWN = ("compute", "tp", "cp", "ep", "pp", "fsdp", "bubble", "dp", "optimizer")
MEMORY = ("weights", "grads", "optimizer", "activations", "other")
ADAM_BYTES_PER_PARAM = 38.0  # read master/m/v/grad (16), write master/m/v (12), bf16 param (2), clip+zero (8)


def uses_flash(model: ModelSpec, software: Stack) -> bool:
    """Fused (flash) attention, unless the software cannot fuse this model's attention (sinks)."""
    return software.flash_attention and (software.fused_sink_attention or not model.attention_sinks)


def _exposed(comm_s, hide_s, overlap: bool):
    if not overlap:
        return comm_s
    return np.maximum(comm_s - hide_s, 0.0) + TP_OVERLAP_RESIDUAL * comm_s


def plan_times(
    model: ModelSpec,
    hw: Hardware,
    *,
    precision: Precision,
    software: Stack,
    calibration: Calibration,
    seq_len: int,
    global_batch: int,
    tp,
    pp,
    vp,
    dp,
    cp,
    ep,
    mb,
    sp,
    rc,
    zero,
    rf=1.0,
) -> dict[str, np.ndarray]:
    """Step time and its breakdown (seconds) for every plan; arrays broadcast against each other.

    `rc` is the recompute code (0 none, 1 selective, 2 full), `rf` the fraction of layers that full
    recomputation applies to (Megatron `recompute_num_layers`), `sp` 0/1, `zero` the ZeRO stage 0-3.
    Structural validity is not checked here (see layout.rule_masks); every plan gets numbers.
    """
    tp, pp, vp, dp, cp, ep, mb, sp, rc, zero, rf = np.broadcast_arrays(
        *(np.asarray(x) for x in (tp, pp, vp, dp, cp, ep, mb, sp, rc, zero, rf))
    )
    tp, pp, vp, dp, cp, ep, mb, rf = (x.astype(float) for x in (tp, pp, vp, dp, cp, ep, mb, rf))
    sp = sp.astype(bool)
    L, h = model.layers, model.hidden
    n_dense, n_moe = model.n_dense_layers, model.moe_layers
    low = precision.low
    r = rates(hw, precision, calibration)
    links = calibration.links(hw)
    flash = uses_flash(model, software)
    gpus = tp * pp * dp * cp
    m = global_batch / (dp * mb)
    T = mb * seq_len / cp  # tokens per micro-batch on one TP group
    np.where(sp, tp, 1.0)

    # ---- per-layer compute ---------------------------------------------------------------------
    kinds = []
    if n_dense:
        kinds.append((n_dense, False))
    if n_moe:
        kinds.append((n_moe, True))
    tp_rs = comm.reduce_scatter_time(T * h * 2.0, tp, 1.0, links)
    kv_heads = model.heads if model.is_mla else model.kv_heads
    kv_chunk = T * kv_heads * (model.qk_head_dim + model.v_dim) * 2.0
    comps = {k: np.zeros_like(T) for k in ("compute", "tp", "cp", "ep", "recompute")}
    for count, moe in kinds:
        lt = layer_times(
            model, moe=moe, tokens=T, tp=tp, sp=sp, ep=ep, seq_len=seq_len, flash=flash, r=r, low=low
        )
        # tensor parallel: 2 AG + 2 RS per pass (AR = RS + AG without SP); SP re-gathers inputs for wgrad.
        n_f = 2.0 if moe else 4.0
        n_b = np.where(sp, 3.0 if moe else 6.0, n_f)
        tp_f = _exposed(n_f * tp_rs, lt.gemm_f, software.tp_overlap)
        tp_b = _exposed(n_b * tp_rs, lt.gemm_b, software.tp_overlap)
        # context parallel
        if software.cp_comm == "ring":
            hop = comm.p2p_time(kv_chunk, tp, links)
            cp_f = np.maximum((cp - 1) * hop - lt.attn_f, 0.0)
            cp_b = np.maximum(2 * (cp - 1) * hop - lt.attn_b, 0.0)
        elif software.cp_comm == "allgather":
            ag = comm.all_gather_time(cp * kv_chunk, cp, tp, links)
            cp_f, cp_b = ag, 2.0 * ag
        else:  # a2a (Ulysses): q, k, v, o each redistributed between sequence and head sharding
            n_in = comm.ranks_per_domain(cp, tp, links.domain)
            qkvo = T * (2 * model.heads * model.qk_head_dim + 2 * kv_heads * model.v_dim) * 2.0 / tp
            a2a = comm.all_to_all_time(qkvo * (n_in - 1) / cp, qkvo * (cp - n_in) / cp, cp, links)
            cp_f, cp_b = a2a, a2a
        cp_f = np.where(cp > 1, cp_f, 0.0)
        cp_b = np.where(cp > 1, cp_b, 0.0)
        # expert parallel all-to-all (dispatch + combine, forward and backward)
        ep_f = ep_b = np.zeros_like(T)
        if moe:
            tok = T / tp
            kw = dict(
                topk=model.topk,
                ep=ep,
                stride=1.0,
                hidden=h,
                links=links,
                dedup=software.ep_dedup,
                node_limit=model.node_limit,
            )
            i1, o1 = comm.moe_dispatch_bytes(tok, elem_bytes=1.0 if low else 2.0, **kw)
            i2, o2 = comm.moe_dispatch_bytes(tok, elem_bytes=2.0, **kw)
            disp = comm.all_to_all_time(i1, o1, ep, links)
            comb = comm.all_to_all_time(i2, o2, ep, links)
            raw_f, raw_b = disp + comb, 2.0 * comb
            if software.ep_overlap:
                ep_f, ep_b = np.maximum(raw_f - lt.fwd, 0.0), np.maximum(raw_b - lt.bwd, 0.0)
            else:
                ep_f, ep_b = raw_f, raw_b
        # recomputation: full = the whole forward again (with its communication); selective = the
        # attention core (Korthikanti et al. 2022 §5)
        rec_compute = np.where(rc == 2, rf * lt.fwd, np.where(rc == 1, lt.attn_f, 0.0))
        rec_tp = np.where(rc == 2, rf * tp_f, 0.0)
        rec_ep = np.where(rc == 2, rf * ep_f, 0.0)
        w = count / L
        comps["compute"] = comps["compute"] + w * (lt.fwd + lt.bwd + rec_compute)
        comps["recompute"] = comps["recompute"] + w * rec_compute
        comps["tp"] = comps["tp"] + w * (tp_f + tp_b + rec_tp)
        comps["cp"] = comps["cp"] + w * (cp_f + cp_b)
        comps["ep"] = comps["ep"] + w * (ep_f + ep_b + rec_ep)
    t_layer = comps["compute"] + comps["tp"] + comps["cp"] + comps["ep"]

    # ---- last-stage extras: head + loss, MTP modules --------------------------------------------
    hf, hb = head_times(model, tokens=T, tp=tp, r=r)
    extra = hf + hb
    if model.mtp_layers:
        lt = layer_times(
            model, moe=model.is_moe, tokens=T, tp=tp, sp=sp, ep=ep, seq_len=seq_len, flash=flash, r=r, low=low
        )
        pf, pb = gemm_times(T, h, 2 * h / tp, r, low=False)
        extra = extra + model.mtp_layers * (lt.fwd + lt.bwd + pf + pb + hf + hb)

    # ---- the busiest stage ------------------------------------------------------------------------
    slots = np.ceil(L / (pp * vp)) * vp
    if software.balanced_stages:
        grain = slots * t_layer
        balanced = (L * t_layer + extra) / pp
        use_grain = grain >= balanced
        scale = np.where(use_grain, slots, L / pp)
        extra_share = np.where(use_grain, 0.0, extra / pp)
    else:
        scale, extra_share = slots, extra
    per_mb = {
        "compute": scale * comps["compute"] + extra_share,
        "tp": scale * comps["tp"],
        "cp": scale * comps["cp"],
        "ep": scale * comps["ep"],
    }
    stage_busy = per_mb["compute"] + per_mb["tp"] + per_mb["cp"] + per_mb["ep"]

    # ---- parameters on that stage, and the data-parallel groups ---------------------------------
    dense_p, expert_p = memory.stage_params(model, t=tp, pp=pp, vp=vp, ep=ep)
    n_dense_grp = dp * cp  # Megatron shards the dense optimizer over DP x CP
    n_exp_grp = dp * cp * tp / ep  # expert-data-parallel group
    gb = software.grad_reduce_bytes

    # pipeline point-to-point; each TP rank sends 1/t of the activation (Narayanan 2021 §4.1
    # scatter-gather: the receiver all-gathers it over NVLink, which is cheap and ignored here)
    stride_pp = tp * cp * dp
    p2p = comm.p2p_time(T * h * 2.0 / tp, stride_pp, links)
    pp_raw = np.where(pp > 1, 2.0 * vp * p2p, 0.0)
    # Megatron overlaps p2p with compute only in the interleaved schedule (`overlap_p2p_comm` needs
    # vp > 1); plain 1F1B sends and receives block between steps. DualPipe overlaps them by design.
    if software.pp_schedule == "dualpipe":
        per_mb["pp"] = np.zeros_like(T)
    else:
        per_mb["pp"] = np.where(software.pp_overlap & (vp > 1), 0.0, pp_raw)

    # ZeRO-3 / FSDP: gather weights for forward and backward, reduce-scatter gradients, per micro-batch
    ag_w = comm.all_gather_time(dense_p * 2.0, n_dense_grp, tp, links) + comm.all_gather_time(
        expert_p * 2.0, n_exp_grp, ep, links
    )
    rs_g = comm.reduce_scatter_time(dense_p * gb, n_dense_grp, tp, links) + comm.reduce_scatter_time(
        expert_p * gb, n_exp_grp, ep, links
    )
    fsdp_raw = 2.0 * ag_w + rs_g
    fsdp = np.maximum(fsdp_raw - stage_busy, 0.0) if software.dp_overlap else fsdp_raw
    per_mb["fsdp"] = np.where((zero == 3) & software.fsdp_regather, fsdp, 0.0)
    t_mb = sum(per_mb.values())

    bubble_mb = np.maximum(pp / 2.0 - 1.0, 0.0) if software.pp_schedule == "dualpipe" else (pp - 1.0) / vp
    t_pipe = (m + bubble_mb) * t_mb

    # ZeRO-0/1/2 gradient reduction and parameter gather, once per step
    ar = comm.all_reduce_time(dense_p * gb, n_dense_grp, tp, links) + comm.all_reduce_time(
        expert_p * gb, n_exp_grp, ep, links
    )
    grad = np.where(zero == 0, ar, rs_g)
    gather = np.where(zero == 0, 0.0, ag_w)
    if software.dp_overlap:
        dp_exp = np.maximum(grad - stage_busy * 2 / 3, 0.0) + np.maximum(gather - stage_busy / 3, 0.0)
    else:
        dp_exp = grad + gather
    dp_exp = np.where((zero == 3) & software.fsdp_regather, 0.0, dp_exp)

    # optimizer step (memory-bound Adam over the local shard) + casting weights to the low precision
    shard = np.where(zero >= 1, dense_p / n_dense_grp + expert_p / n_exp_grp, dense_p + expert_p)
    t_opt = shard * ADAM_BYTES_PER_PARAM / r.hbm_Bps
    if low:
        local = np.where(zero == 3, shard, dense_p + expert_p)
        t_opt = t_opt + local * precision.quant_bytes / r.hbm_Bps
    step = t_pipe + dp_exp + t_opt

    out = {f"{k}_s": m * v for k, v in per_mb.items()}
    out["bubble_s"] = bubble_mb * t_mb
    out["dp_s"] = dp_exp
    out["optimizer_s"] = t_opt
    out["recompute_s"] = m * scale * comps["recompute"]
    out["step_s"] = step
    out["microbatches"] = m
    out["gpus"] = gpus

    return out


def plan_memory(
    model: ModelSpec,
    hw: Hardware,
    *,
    precision: Precision,
    software: Stack,
    seq_len: int,
    global_batch: int,
    tp,
    pp,
    vp,
    dp,
    cp,
    ep,
    mb,
    sp,
    rc,
    zero,
    rf=1.0,
) -> dict[str, np.ndarray]:
    """Memory per GPU of the busiest stage for every plan (bytes): weights, grads, optimizer states,
    activations, other (buffers, fragmentation, CUDA/NCCL context) and the total `memory_B`."""
    tp, pp, vp, dp, cp, ep, mb, sp, rc, zero, rf = np.broadcast_arrays(
        *(np.asarray(x) for x in (tp, pp, vp, dp, cp, ep, mb, sp, rc, zero, rf))
    )
    tp, pp, vp, dp, cp, ep, mb, rf = (x.astype(float) for x in (tp, pp, vp, dp, cp, ep, mb, rf))
    sp = sp.astype(bool)
    L, h = model.layers, model.hidden
    n_dense, n_moe = model.n_dense_layers, model.moe_layers
    low = precision.low
    flash = software.flash_attention
    m = global_batch / (dp * mb)
    T = mb * seq_len / cp
    slots = np.ceil(L / (pp * vp)) * vp
    dense_p, expert_p = memory.stage_params(model, t=tp, pp=pp, vp=vp, ep=ep)
    n_dense_grp = dp * cp
    n_exp_grp = dp * cp * tp / ep
    kinds = [k for k, n in ((False, n_dense), (True, n_moe)) if n]
    out: dict[str, np.ndarray] = {}
    flash = uses_flash(model, software)
    # ---- memory ---------------------------------------------------------------------------------
    ob = precision.operand_bytes if low else 2.0
    acts = []
    for moe in kinds:
        acts.append(
            memory.layer_activation_bytes_per_token(
                model, t=tp, sp=sp, recompute=rc, seq_len=seq_len, flash=flash, operand_bytes=ob, moe=moe
            )
        )
    acts_none = [
        memory.layer_activation_bytes_per_token(
            model, t=tp, sp=sp, recompute=0, seq_len=seq_len, flash=flash, operand_bytes=ob, moe=moe
        )
        for moe in kinds
    ]
    # partial full recomputation: the recomputed share stores layer inputs, the rest everything
    acts = [np.where(rc == 2, rf * a + (1 - rf) * n, a) for a, n in zip(acts, acts_none, strict=True)]
    if len(acts) == 2:
        a_avg = (n_dense * acts[0] + n_moe * acts[1]) / L
        a_none = np.maximum(
            *(
                memory.layer_activation_bytes_per_token(
                    model, t=tp, sp=sp, recompute=0, seq_len=seq_len, flash=flash, operand_bytes=ob, moe=k
                )
                for k in (False, True)
            )
        )
    else:
        a_avg = acts[0]
        a_none = memory.layer_activation_bytes_per_token(
            model, t=tp, sp=sp, recompute=0, seq_len=seq_len, flash=flash, operand_bytes=ob, moe=kinds[0]
        )
    inflight = memory.inflight_layer_microbatches(layers=L, pp=pp, vp=vp, m=m, schedule=software.pp_schedule)
    work = np.where(rc == 2, T * a_none, 0.0)  # one layer's full set while recomputing it
    logits = 6.0 * model.vocab / tp * T
    first = inflight * T * a_avg + work
    last = slots * T * a_avg + work + logits
    activations = np.where(pp > 1, np.maximum(first, last), first + logits)
    per_layer_dense = dense_p / slots
    gathered = 2.0 * 2.0 * (per_layer_dense + expert_p / slots)
    # FSDP that keeps the weights gathered through a step holds them like ZeRO-2 while it runs
    zero_held = np.where((zero == 3) & (not software.fsdp_regather), 2, zero)
    weights, grads, opt = memory.model_state_bytes(
        dense_p,
        expert_p,
        zero=zero_held,
        dp_dense=n_dense_grp,
        dp_expert=n_exp_grp,
        weight_bytes=2.0 + precision.weight_copy_bytes,
        grad_bytes=software.main_grad_bytes,
        gathered=gathered,
    )
    if software.pp_schedule == "dualpipe":  # two copies of the parameters (DeepSeek-V3 §3.2.1)
        weights, grads = 2.0 * weights, 2.0 * grads
    buffers = T * h * 2.0 * 2.0  # TP/SP gathered activations and p2p buffers
    if model.is_moe:
        buffers = buffers + 2.0 * (T / tp) * model.topk * h * 2.0
    core = weights + grads + opt + activations + buffers
    other = buffers + memory.FRAGMENTATION * core + memory.FIXED_OVERHEAD_BYTES
    out.update(weights_B=weights, grads_B=grads, optimizer_B=opt, activations_B=activations, other_B=other)
    out["memory_B"] = weights + grads + opt + activations + other
    return out


def evaluate_plans(
    model: ModelSpec,
    hw: Hardware,
    *,
    precision: Precision,
    software: Stack,
    calibration: Calibration,
    seq_len: int,
    global_batch: int,
    **plans,
) -> dict[str, np.ndarray]:
    """`plan_times` and `plan_memory` together (keys of both)."""
    out = plan_times(
        model,
        hw,
        precision=precision,
        software=software,
        calibration=calibration,
        seq_len=seq_len,
        global_batch=global_batch,
        **plans,
    )
    out.update(
        plan_memory(
            model,
            hw,
            precision=precision,
            software=software,
            seq_len=seq_len,
            global_batch=global_batch,
            **plans,
        )
    )
    return out


# ---- one plan: the frozen result ----------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class StepBreakdown:
    """Seconds per optimizer step; the fields sum to the step time. `recompute_s` is part of compute_s."""

    compute_s: float
    tp_s: float
    cp_s: float
    ep_s: float
    pp_s: float
    fsdp_s: float
    bubble_s: float
    dp_s: float
    optimizer_s: float
    recompute_s: float


@dataclass(frozen=True, kw_only=True)
class MemoryBreakdown:
    """GiB per GPU on the busiest stage."""

    weights_GiB: float
    grads_GiB: float
    optimizer_GiB: float
    activations_GiB: float
    other_GiB: float
    total_GiB: float
    capacity_GiB: float


@dataclass(frozen=True, kw_only=True)
class TrainingEstimate:
    """The estimate for one plan. Throughput fields are NaN when the plan is structurally invalid.

    model_tflops_per_gpu counts model FLOPs only (6 per active matmul weight per token + causal attention,
    no recomputation: NVIDIA's convention); mfu_bf16 divides by the dense BF16 peak, mfu_precision by the
    dense peak of the precision the block GEMMs use.
    """

    model: str
    hardware: str
    layout: Layout
    precision: str
    software: str
    seq_len: int
    global_batch: int
    num_gpus: int
    feasible: bool
    reason: str
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    mfu_bf16: float
    mfu_precision: float
    microbatches: int
    breakdown: StepBreakdown | None
    memory: MemoryBreakdown | None
    calibrated: bool
    notes: tuple[str, ...] = field(default_factory=tuple)

    def raise_if_infeasible(self) -> TrainingEstimate:
        if not self.feasible:
            raise Infeasible(self.reason)
        return self

    def to_dict(self) -> dict:
        d = asdict(self)
        d["layout"] = asdict(self.layout)
        return d


def plan_arrays(layout: Layout, software: Stack, layers: int) -> dict[str, np.ndarray]:
    """One layout as the 1-element arrays `evaluate_plans` takes."""
    rf = 1.0 if layout.recompute_layers is None else min(1.0, layout.recompute_layers * layout.pp / layers)
    return {
        "rf": np.array([rf]),
        "tp": np.array([layout.tp]),
        "pp": np.array([layout.pp]),
        "vp": np.array([layout.vp]),
        "dp": np.array([layout.dp]),
        "cp": np.array([layout.cp]),
        "ep": np.array([layout.ep]),
        "mb": np.array([layout.micro_batch]),
        "sp": np.array([int(layout.sequence_parallel)]),
        "rc": np.array([RECOMPUTE_CODE[layout.recompute]]),
        "zero": np.array([software.default_zero if layout.zero is None else layout.zero]),
    }


def estimate_training(
    model: ModelSpec | str,
    hardware: Hardware | str,
    layout: Layout,
    *,
    seq_len: int,
    global_batch: int,
    precision: str = "bf16",
    num_gpus: int | None = None,
    software: Stack | str = "megatron-core",
    calibration: Calibration | None = None,
) -> TrainingEstimate:
    """Estimate one training plan.

    Args:
        model, hardware: catalog names or loaded specs.
        layout: the parallel plan; its GPU count is tp·pp·dp·cp.
        seq_len: tokens per sequence; global_batch: sequences per optimizer step.
        precision: bf16, fp16, fp8, mxfp8 or nvfp4 for the transformer blocks' GEMMs.
        num_gpus: the cluster size, if given it must equal the layout's GPU count.
        software: a Stack or preset name (see stack.py).
        calibration: fitted efficiencies (default: the committed fit).
    Raises ValueError for malformed input (unknown names, non-positive sizes); an infeasible plan is
    returned with feasible=False and the reason.
    """
    model = load_model(model) if isinstance(model, str) else model
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    prec = get_precision(precision)
    sw = stack(software) if isinstance(software, str) else software
    cal = calibration or load_calibration()
    if seq_len < 1 or global_batch < 1:
        raise ValueError(f"seq_len and global_batch must be >= 1, got {seq_len} and {global_batch}")
    problems = layout_problems(model, layout, seq_len=seq_len, global_batch=global_batch)
    if num_gpus is not None and num_gpus != layout.gpus:
        problems.append(f"TP·PP·DP·CP = {layout.gpus} but the cluster has {num_gpus} GPUs")
    unsupported = check_supported(prec, hw)
    if unsupported:
        problems.append(unsupported)
    if layout.vp > 1 and not sw.interleaving:
        problems.append(f"VP={layout.vp}: the {sw.name} pipeline engine has no interleaved schedule")
    calibrated = cal.is_calibrated(hw.arch, prec.bits_class)
    notes = (
        ()
        if calibrated
        else (
            f"no calibration for {hw.arch}/{prec.bits_class}-bit GEMMs: using the fallback efficiency "
            f"{cal.fallback_gemm_efficiency}",
        )
    )
    base = dict(
        model=model.name,
        hardware=hw.name,
        layout=layout,
        precision=prec.name,
        software=sw.name,
        seq_len=seq_len,
        global_batch=global_batch,
        num_gpus=layout.gpus,
        calibrated=calibrated,
        notes=notes,
    )
    if problems:
        nan = float("nan")
        return TrainingEstimate(
            **base,
            feasible=False,
            reason="; ".join(problems),
            step_time_s=nan,
            tokens_per_s=nan,
            tokens_per_s_per_gpu=nan,
            model_tflops_per_gpu=nan,
            mfu_bf16=nan,
            mfu_precision=nan,
            microbatches=0,
            breakdown=None,
            memory=None,
        )
    x = plan_arrays(layout, sw, model.layers)
    out = evaluate_plans(
        model,
        hw,
        precision=prec,
        software=sw,
        calibration=cal,
        seq_len=seq_len,
        global_batch=global_batch,
        **x,
    )
    v = {k: float(np.asarray(a).ravel()[0]) for k, a in out.items()}
    return _result(model, hw, prec, v, base)


def _result(
    model: ModelSpec, hw: Hardware, prec: Precision, v: dict[str, float], base: dict
) -> TrainingEstimate:
    step = v["step_s"]
    tokens = base["global_batch"] * base["seq_len"]
    gpus = base["num_gpus"]
    flops = training_flops_per_token(model, base["seq_len"]) * tokens
    rate = flops / step / gpus
    mem = MemoryBreakdown(
        **{f"{k}_GiB": v[f"{k}_B"] / GiB for k in MEMORY},
        total_GiB=v["memory_B"] / GiB,
        capacity_GiB=hw.hbm_bytes / GiB,
    )
    feasible = v["memory_B"] <= hw.hbm_bytes
    reason = "" if feasible else f"needs {mem.total_GiB:.1f} GiB of {mem.capacity_GiB:.0f} GiB per GPU"
    bd = StepBreakdown(**{f"{k}_s": v[f"{k}_s"] for k in BREAKDOWN}, recompute_s=v["recompute_s"])
    return TrainingEstimate(
        **base,
        feasible=feasible,
        reason=reason,
        step_time_s=step,
        tokens_per_s=tokens / step,
        tokens_per_s_per_gpu=tokens / step / gpus,
        model_tflops_per_gpu=rate / 1e12,
        mfu_bf16=rate / hw.peak("bf16"),
        mfu_precision=rate / hw.peak(prec.peak_key),
        microbatches=round(v["microbatches"]),
        breakdown=bd,
        memory=mem,
    )
