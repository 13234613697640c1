"""One training plan: `estimate_training()` returns a frozen `TrainingEstimate`.

It resolves names to specs once (the edge), checks the structural rules, and runs the same array kernels
as the search (`step.evaluate_plans`) on a one-plan `PlanGrid`, so the search and the single estimate agree.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from tenfold.perf.calibration import Calibration, load_calibration
from tenfold.perf.errors import Infeasible
from tenfold.perf.flops import training_flops_per_token
from tenfold.perf.specs.catalog import GiB
from tenfold.perf.specs.hardware import Hardware, load_hardware
from tenfold.perf.specs.models import ModelSpec, load_model
from tenfold.perf.specs.precision import Precision, check_supported, get_precision
from tenfold.perf.training.grid import PlanGrid
from tenfold.perf.training.layout import Layout, layout_problems
from tenfold.perf.training.memory import FIXED_OVERHEAD_BYTES
from tenfold.perf.training.stack import Stack, stack
from tenfold.perf.training.step import evaluate_plans
from tenfold.perf.uncertainty import group_key

BREAKDOWN = ("compute", "tp", "cp", "ep", "pp", "fsdp", "bubble", "dp", "optimizer")
MEMORY = ("weights", "grads", "optimizer", "activations", "other")


# ---- one plan: the frozen result ----------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class TrainingBreakdown:
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

    interval: the 80 % range of tokens_per_s_per_gpu, from the calibration's cross-validated error for
    this GPU generation and dense/MoE model (`uncertainty_group`); interval_factor f gives the same range for
    any throughput or time v as [v / f, v x f]. NaN when the calibration carries no uncertainty.
    gemm_source: where the GEMM efficiency came from (a measured kernel table scaled by the fit, a fitted
    value, or the fallback); communication, memory-bound kernels and overheads are analytic with fitted
    efficiencies.
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
    breakdown: TrainingBreakdown | None
    memory: MemoryBreakdown | None
    calibrated: bool
    notes: tuple[str, ...] = field(default_factory=tuple)
    interval: tuple[float, float] = (math.nan, math.nan)
    interval_factor: float = math.nan
    uncertainty_group: str = ""
    gemm_source: str = ""

    def scaled_interval(self, value: float) -> tuple[float, float]:
        """80 % range of a quantity that scales with this estimate's throughput or time: [v / f, v x f]
        (NaN, NaN without a measured uncertainty)."""
        f = self.interval_factor
        return value / f, value * f

    def raise_if_infeasible(self) -> TrainingEstimate:
        """This estimate, or `Infeasible` with the reason when the plan cannot run."""
        if not self.feasible:
            raise Infeasible(self.reason)
        return self

    def to_dict(self) -> dict:
        """Plain data for JSON (the layout as a dict)."""
        d = asdict(self)
        d["layout"] = asdict(self.layout)
        return d


def estimate_training(
    model: ModelSpec | str,
    hardware: Hardware | str,
    layout: Layout,
    *,
    seq_len: int,
    global_batch: int,
    precision: Precision | str = "bf16",
    num_gpus: int | None = None,
    software: Stack | str = "megatron-core",
    calibration: Calibration | None = None,
    headroom_GiB: float | None = None,
) -> TrainingEstimate:
    """Estimate one training plan.

    Args:
        model, hardware: catalog names or loaded specs.
        layout: the parallel plan; its GPU count is tp·pp·dp·cp.
        seq_len: tokens per sequence; global_batch: sequences per optimizer step.
        precision: a Precision or its name (bf16, fp16, fp8, mxfp8, nvfp4, mxfp4) for the transformer
            blocks' GEMMs.
        num_gpus: the cluster size, if given it must equal the layout's GPU count.
        software: a Stack or preset name (see stack.py).
        calibration: fitted efficiencies (default: the committed fit).
        headroom_GiB: memory per GPU left outside the model (None: what the framework needs,
            memory.FIXED_OVERHEAD_BYTES).
    Raises ValueError for malformed input (unknown names, non-positive sizes); an infeasible plan is
    returned with feasible=False and the reason.
    """
    model = load_model(model) if isinstance(model, str) else model
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    prec = get_precision(precision) if isinstance(precision, str) else precision
    sw = stack(software) if isinstance(software, str) else software
    cal = calibration or load_calibration()
    extra_B = headroom_extra_bytes(headroom_GiB)
    if seq_len < 1 or global_batch < 1:
        raise ValueError(f"seq_len and global_batch must be >= 1, got {seq_len} and {global_batch}")
    problems = layout_problems(model, layout, seq_len=seq_len, global_batch=global_batch, software=sw)
    if num_gpus is not None and num_gpus != layout.gpus:
        problems.append(f"TP·PP·DP·CP = {layout.gpus} but the cluster has {num_gpus} GPUs")
    unsupported = check_supported(prec, hw)
    if unsupported:
        problems.append(unsupported)
    calibrated = cal.is_calibrated(hw.arch, prec.bits_class)
    notes = (
        ()
        if calibrated
        else (
            f"uncalibrated: no published runs fitted for {hw.arch}/{prec.bits_class}-bit GEMMs; using the "
            f"lowest fitted {prec.bits_class}-bit efficiency, {cal.gemm(hw.arch, prec.bits_class):.2f}",
        )
    )
    group = group_key(hw.arch, model.is_moe)
    base = dict(
        uncertainty_group=group,
        gemm_source=cal.gemm_source(hw.arch, prec.bits_class),
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
    grid = PlanGrid.from_layouts([layout], default_zero=sw.default_zero)
    out = evaluate_plans(
        model,
        hw,
        grid,
        precision=prec,
        software=sw,
        calibration=cal,
        seq_len=seq_len,
        global_batch=global_batch,
    )
    v = {k: float(np.asarray(a).ravel()[0]) for k, a in out.items()}
    v["memory_B"] += extra_B
    v["other_B"] += extra_B
    est = _result(model, hw, prec, v, base)
    if cal.uncertainty is None:
        return est
    est = replace(est, interval_factor=cal.uncertainty.factor(group))
    return replace(est, interval=est.scaled_interval(est.tokens_per_s_per_gpu))


def headroom_extra_bytes(headroom_GiB: float | None) -> float:
    """Bytes to add to the modelled memory for a headroom of `headroom_GiB` per GPU instead of the
    framework's fixed overhead (0 for None); ValueError for a negative or non-finite headroom."""
    if headroom_GiB is None:
        return 0.0
    if not math.isfinite(headroom_GiB) or headroom_GiB < 0:
        raise ValueError(f"headroom must be a finite number of GiB >= 0, got {headroom_GiB}")
    return headroom_GiB * GiB - FIXED_OVERHEAD_BYTES


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
    bd = TrainingBreakdown(**{f"{k}_s": v[f"{k}_s"] for k in BREAKDOWN}, recompute_s=v["recompute_s"])
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
