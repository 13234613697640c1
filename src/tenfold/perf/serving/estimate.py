"""Serving performance: TTFT, TPOT, tokens/s per GPU and per user, cost per million tokens, and the
throughput-versus-interactivity curve over concurrency (the InferenceMAX view).

`estimate_inference(...)` -> frozen `InferenceEstimate`; `inference_curve(...)` -> `InferenceCurve` (both in
inference_results.py, with `Deployment`).
The step time comes from `inference_step.py`, the memory and batch limit from `inference_memory.py`.

Steady state at concurrency C (closed-loop clients, continuous batching; shared/research/inference.md §A8):
each request is a prefill of ISL tokens (which yields the first token) and D = (OSL - 1)/a decode steps,
a = accepted tokens per step (1 without speculative decoding). With b = ceil(C/dp) sequences on the busiest
attention rank, an engine step carries their b·q decode tokens (q = 1 + draft tokens) and, to keep the
batch full, p = b·ISL/D prompt tokens of arriving requests:

    output tok/s/GPU = C·OSL / (D · t_step · GPUs)        total (input + output) = C·(ISL + OSL) / (...)
    TPOT = t_step / a,  output tok/s/user = 1/TPOT (InferenceMAX "interactivity")
    TTFT = the step(s) that carry one whole prompt next to the running batch (chunks of max_num_tokens),
           plus the wait for a free slot when C exceeds what fits: (C - capacity)·D·t_step/capacity
    $/M tokens = $/GPU-h · 1e6 / (3600 · tok/s/GPU)        (stated for output and for input + output)

Beyond the batch limit (KV memory, max_batch_size, or max_num_tokens) requests queue: tok/s/GPU and
tok/s/user stay at their values at the limit and TTFT grows. A prefill-only workload (OSL = 1) runs steps of
min(b·ISL, max_num_tokens) prompt tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tenfold.perf.calibration import Calibration, load_calibration
from tenfold.perf.errors import Infeasible
from tenfold.perf.serving.kvcache import KV_PRECISIONS
from tenfold.perf.serving.memory import ServingMemory, serving_memory
from tenfold.perf.serving.presets import Engine, engine
from tenfold.perf.serving.results import (
    STEP_PARTS,
    CurvePoint,
    Deployment,
    InferenceCurve,
    InferenceEstimate,
    ServingStepBreakdown,
)
from tenfold.perf.serving.step import Formats, serving_rates, step_times
from tenfold.perf.specs.catalog import GiB
from tenfold.perf.specs.hardware import Hardware, load_hardware
from tenfold.perf.specs.models import ModelSpec, load_model
from tenfold.perf.specs.precision import check_supported, get_precision

__all__ = [
    "CurvePoint",
    "Deployment",
    "InferenceCurve",
    "InferenceEstimate",
    "ServingStepBreakdown",
    "estimate_inference",
    "inference_curve",
]

WEIGHT_PRECISIONS = ("bf16", "fp16", "fp8", "mxfp8", "nvfp4", "mxfp4")


# ---- resolving the inputs ------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class _Setup:
    model: ModelSpec
    hw: Hardware
    dep: Deployment
    formats: Formats
    eng: Engine
    cal: Calibration
    memory: ServingMemory | None
    problems: tuple[str, ...]
    notes: tuple[str, ...]
    input_len: int
    output_len: int
    q: float
    a: float
    draft: int
    usd_h: float
    calibrated: bool


def default_activations(weights: str, hw: Hardware) -> str:
    """GEMM input format for a weight format: the same, except MXFP4 weights, which TensorRT-LLM runs as
    W4A8 (MXFP8 activations) on Blackwell and weight-only (BF16 activations) on Hopper (blog 9)."""
    if weights == "mxfp4":
        return "mxfp8" if "mxfp8" in hw.block_scaled_formats else "bf16"
    return weights


def _setup(
    model,
    hardware,
    deployment,
    *,
    input_len,
    output_len,
    precision,
    activations,
    attention_precision,
    kv_precision,
    engine_,
    draft_tokens,
    accepted_tokens,
    usd_per_gpu_hour,
    calibration,
) -> _Setup:
    model = load_model(model) if isinstance(model, str) else model
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    dep = deployment or Deployment()
    eng = engine(engine_) if isinstance(engine_, str) else engine_
    cal = calibration or load_calibration(kind="inference")
    if input_len < 1 or output_len < 1:
        raise ValueError(f"input_len and output_len must be >= 1, got {input_len} and {output_len}")
    for label, name, allowed in (
        ("precision", precision, WEIGHT_PRECISIONS),
        ("attention_precision", attention_precision or precision, WEIGHT_PRECISIONS),
        ("kv_precision", kv_precision, KV_PRECISIONS),
    ):
        if name not in allowed:
            raise ValueError(f"{label} {name!r} not in {allowed}")
    if draft_tokens < 0:
        raise ValueError(f"draft_tokens must be >= 0, got {draft_tokens}")
    if not 1.0 <= accepted_tokens <= 1 + draft_tokens:
        raise ValueError(
            f"accepted_tokens must be in [1, 1 + draft_tokens = {1 + draft_tokens}], got {accepted_tokens}"
        )
    w = get_precision(precision)
    act = get_precision(activations or default_activations(precision, hw))
    attn = get_precision(attention_precision or precision)
    fmts = Formats(weights=w, activations=act, attention=attn, kv=kv_precision)
    problems = dep.problems(model)
    for p in {act.name: act, attn.name: attn}.values():
        why = check_supported(p, hw)
        if why:
            problems.append(why)
    if draft_tokens and not model.mtp_layers:
        problems.append(f"{model.name} has no MTP module to draft {draft_tokens} tokens with")
    notes = []
    calibrated = cal.is_calibrated(hw.arch, act.bits_class)
    if not calibrated and not check_supported(act, hw):
        notes.append(
            f"no inference calibration for {hw.arch}/{act.bits_class}-bit GEMMs: using the fallback "
            f"efficiency {cal.fallback_gemm_efficiency}"
        )
    usd_h = usd_per_gpu_hour
    if usd_h is None:
        usd_h = hw.ondemand_usd_h if hw.ondemand_usd_h is not None else math.nan
        if math.isfinite(usd_h):
            notes.append(f"cost at the catalog's on-demand price ${usd_h:.2f}/GPU-hour")
    memory = None
    if not problems:
        memory = serving_memory(
            model,
            eng,
            capacity_B=hw.hbm_bytes,
            tp=dep.tp,
            gpus=dep.gpus,
            formats=fmts,
            input_len=input_len,
            output_len=output_len,
            draft_tokens=draft_tokens,
        )
        if memory.shortfall():
            problems.append(memory.shortfall())
    return _Setup(
        model=model,
        hw=hw,
        dep=dep,
        formats=fmts,
        eng=eng,
        cal=cal,
        memory=memory,
        problems=tuple(problems),
        notes=tuple(notes),
        input_len=input_len,
        output_len=output_len,
        q=1.0 + draft_tokens,
        a=float(accepted_tokens),
        draft=draft_tokens,
        usd_h=float(usd_h),
        calibrated=calibrated,
    )


def _capacity(s: _Setup) -> tuple[int, str]:
    """Most sequences per attention rank and what limits them."""
    limits = {"kv_memory": s.memory.max_batch_memory, "max_batch_size": s.eng.max_batch_size}
    if s.output_len > 1:
        per_seq = s.q + s.input_len * s.a / (s.output_len - 1)
        limits["max_num_tokens"] = max(int(s.memory.max_num_tokens // per_seq), 1)
    name = min(limits, key=limits.get)
    return int(limits[name]), name


def _evaluate(s: _Setup, concurrency: np.ndarray) -> dict[str, np.ndarray]:
    """Rates and latencies (arrays over concurrency) for a feasible setup."""
    dep, eng = s.dep, s.eng
    cap_rank, _ = _capacity(s)
    cap = cap_rank * dep.dp
    c = np.asarray(concurrency, dtype=float)
    running = np.minimum(c, cap)
    b = np.ceil(running / dep.dp)
    kv = s.formats.kv
    kv_compute = get_precision("fp8" if kv in ("fp8", "nvfp4") and "fp8" in s.hw.peak_flops else "bf16")
    rates = serving_rates(s.hw, s.formats, s.cal, kv_compute)
    links = s.cal.links(s.hw)
    isl, osl = s.input_len, s.output_len
    kw = dict(
        formats=s.formats,
        rates=rates,
        links=links,
        tp=dep.tp,
        dp=dep.dp,
        ep=dep.ep,
        isl=isl,
        draft_tokens=s.draft,
        ep_overlap=eng.ep_overlap,
        ep_comm=eng.ep_comm,
    )
    gpus = dep.gpus
    out: dict[str, np.ndarray] = {"running": running, "b": b, "cap": np.full_like(c, cap)}
    if osl == 1:  # prefill only
        tokens = np.minimum(b * isl, s.memory.max_num_tokens)
        st = step_times(s.model, b=0.0 * b, p=tokens, q=s.q, ctx_dec=0.0, **kw)
        t = st["step_s"]
        req_rate = tokens / isl / t * dep.dp  # requests finishing per second on the instance
        out["tpot_s"] = np.full_like(c, np.nan)
        out["per_user"] = np.full_like(c, np.nan)
        out["ttft_s"] = np.maximum((b + 1) / 2 * isl / tokens, 1.0) * t
    else:
        d_steps = (osl - 1) / s.a
        p = b * isl / d_steps
        cap_prompts = np.floor(np.maximum(s.memory.max_num_tokens - b * s.q, 0.0) / isl)
        p_busy = isl * busiest_prompts(b / d_steps, dep.dp, cap_prompts) if dep.dp > 1 else p
        ctx = isl + osl / 2
        st = step_times(s.model, b=b, p=np.maximum(p_busy, p), p_mean=p, q=s.q, ctx_dec=ctx, **kw)
        t = st["step_s"]
        req_rate = running / (d_steps * t)
        out["tpot_s"] = t / s.a
        out["per_user"] = s.a / t
        chunk = np.maximum(s.memory.max_num_tokens - b * s.q, 1.0)
        n_chunks = np.ceil(isl / chunk)
        first = step_times(s.model, b=b, p=np.maximum(p, np.minimum(isl, chunk)), q=s.q, ctx_dec=ctx, **kw)[
            "step_s"
        ]
        out["ttft_s"] = n_chunks * first
    wait = np.where(c > cap, (c - cap) / np.maximum(req_rate, 1e-30), 0.0)
    out["ttft_s"] = out["ttft_s"] + wait
    out["out_gpu"] = req_rate * osl / gpus
    out["total_gpu"] = req_rate * (isl + osl) / gpus
    out["step_s"] = t
    for k in STEP_PARTS:
        out[f"{k}_s"] = st[f"{k}_s"]
    return out


def busiest_prompts(lam, ranks: int, cap) -> np.ndarray:
    """Expected most prompts any of `ranks` attention-DP ranks admits in one step, E[max of `ranks`
    Poisson(lam)], each capped at `cap` (the step's token budget). At max load a rank admits a new prompt
    whenever one of its sequences finishes, so admissions per step are Poisson with mean lam = b/D; the
    ranks meet at every MoE layer, so a step lasts as long as its busiest rank (lockstep)."""
    lam, cap = np.broadcast_arrays(np.asarray(lam, dtype=float), np.asarray(cap, dtype=float))
    pmf = np.exp(-lam)
    cdf = pmf.copy()
    total = np.zeros_like(lam)
    top = int(np.max(np.minimum(cap, lam + 12 * np.sqrt(lam) + 12))) if lam.size else 0
    for k in range(1, top + 1):
        total = total + np.where(k <= cap, 1.0 - cdf**ranks, 0.0)  # P(max >= k)
        pmf = pmf * lam / k
        cdf = cdf + pmf
    return total


def _cost(usd_h: float, tok_s: float) -> float:
    return usd_h * 1e6 / (3600.0 * tok_s) if tok_s > 0 and math.isfinite(usd_h) else math.nan


def estimate_inference(
    model: ModelSpec | str,
    hardware: Hardware | str,
    deployment: Deployment | None = None,
    *,
    input_len: int,
    output_len: int,
    concurrency: int | None = None,
    precision: str = "bf16",
    activations: str | None = None,
    attention_precision: str | None = None,
    kv_precision: str = "bf16",
    engine: Engine | str = "trtllm",
    draft_tokens: int = 0,
    accepted_tokens: float = 1.0,
    usd_per_gpu_hour: float | None = None,
    calibration: Calibration | None = None,
) -> InferenceEstimate:
    """Estimate one serving configuration.

    Args:
        model, hardware: catalog names or loaded specs. deployment: TP / attention-DP / EP (default TP1).
        input_len, output_len: tokens per request (ISL, OSL).
        concurrency: requests in flight; None = as many as fit (the engine's max-load throughput).
        precision: weight format of the FFN and expert GEMMs (bf16, fp16, fp8, mxfp8, nvfp4, mxfp4);
            activations: their input format (default: default_activations); attention_precision: format of
            the attention projections (default: precision); kv_precision: bf16, fp16, fp8 or nvfp4.
        engine: serving-engine preset or Engine (KV sizing, batch caps; engines.py).
        draft_tokens, accepted_tokens: speculative decoding with the model's MTP module: tokens drafted per
            step and mean tokens accepted per step (1 <= accepted <= 1 + draft).
        usd_per_gpu_hour: price for the cost per million tokens (default: the catalog's on-demand price).
        calibration: fitted efficiencies (default: the committed inference fit).
    Raises ValueError for malformed input; an infeasible configuration is returned with feasible=False
    and the reason (numbers printed).
    """
    s = _setup(
        model,
        hardware,
        deployment,
        input_len=input_len,
        output_len=output_len,
        precision=precision,
        activations=activations,
        attention_precision=attention_precision,
        kv_precision=kv_precision,
        engine_=engine,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted_tokens,
        usd_per_gpu_hour=usd_per_gpu_hour,
        calibration=calibration,
    )
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    nan = math.nan
    base = dict(
        model=s.model.name,
        hardware=s.hw.name,
        deployment=s.dep,
        precision=s.formats.weights.name,
        activations=s.formats.activations.name,
        attention_precision=s.formats.attention.name,
        kv_precision=s.formats.kv,
        engine=s.eng.name,
        input_len=input_len,
        output_len=output_len,
        draft_tokens=s.draft,
        accepted_tokens=s.a,
        num_gpus=s.dep.gpus,
        usd_per_gpu_hour=s.usd_h,
        calibrated=s.calibrated,
        notes=s.notes,
    )
    mem = s.memory
    mem_fields = dict(
        weights_GiB=mem.weights_B / GiB if mem else nan,
        workspace_GiB=mem.workspace_B / GiB if mem else nan,
        kv_budget_GiB=mem.kv_budget_B / GiB if mem else nan,
        kv_per_sequence_GiB=mem.kv_per_sequence_B / GiB if mem else nan,
        capacity_GiB=s.hw.hbm_bytes / GiB,
    )
    if s.problems:
        return InferenceEstimate(
            **base,
            **mem_fields,
            feasible=False,
            reason="; ".join(s.problems),
            concurrency=concurrency or 0,
            batch_per_rank=0,
            capacity=0,
            limited_by="",
            ttft_s=nan,
            tpot_s=nan,
            step_time_s=nan,
            output_tokens_per_s_per_gpu=nan,
            total_tokens_per_s_per_gpu=nan,
            output_tokens_per_s_per_user=nan,
            usd_per_m_output_tokens=nan,
            usd_per_m_total_tokens=nan,
            breakdown=None,
        )
    cap_rank, limit = _capacity(s)
    conc = concurrency if concurrency is not None else cap_rank * s.dep.dp
    v = {k: float(np.asarray(x).ravel()[0]) for k, x in _evaluate(s, np.array([conc])).items()}
    notes = s.notes
    if concurrency is not None and conc > v["cap"]:
        notes = (
            *notes,
            f"concurrency {conc} exceeds the {int(v['cap'])} sequences that fit ({limit}); the "
            "rest queue (TTFT includes the wait)",
        )
    return InferenceEstimate(
        **{**base, "notes": notes},
        **mem_fields,
        feasible=True,
        reason="",
        concurrency=int(conc),
        batch_per_rank=int(v["b"]),
        capacity=int(v["cap"]),
        limited_by=limit,
        ttft_s=v["ttft_s"],
        tpot_s=v["tpot_s"],
        step_time_s=v["step_s"],
        output_tokens_per_s_per_gpu=v["out_gpu"],
        total_tokens_per_s_per_gpu=v["total_gpu"],
        output_tokens_per_s_per_user=v["per_user"],
        usd_per_m_output_tokens=_cost(s.usd_h, v["out_gpu"]),
        usd_per_m_total_tokens=_cost(s.usd_h, v["total_gpu"]),
        breakdown=ServingStepBreakdown(**{f"{k}_s": v[f"{k}_s"] for k in STEP_PARTS}, step_s=v["step_s"]),
    )


def default_concurrencies(capacity: int) -> list[int]:
    """Powers of two up to the capacity, the capacity itself, and twice it (to show saturation)."""
    out, c = [], 1
    while c < capacity:
        out.append(c)
        c *= 2
    return [*out, capacity, 2 * capacity]


def inference_curve(
    model: ModelSpec | str,
    hardware: Hardware | str,
    deployment: Deployment | None = None,
    *,
    input_len: int,
    output_len: int,
    concurrencies: list[int] | None = None,
    precision: str = "bf16",
    activations: str | None = None,
    attention_precision: str | None = None,
    kv_precision: str = "bf16",
    engine: Engine | str = "trtllm",
    draft_tokens: int = 0,
    accepted_tokens: float = 1.0,
    usd_per_gpu_hour: float | None = None,
    calibration: Calibration | None = None,
) -> InferenceCurve:
    """The throughput-versus-interactivity curve of one configuration: tok/s/GPU (y) against tok/s/user
    (x) at each concurrency (default: powers of two up to what fits, and twice that). Raises `Infeasible`
    with the reason when the configuration cannot run at all."""
    s = _setup(
        model,
        hardware,
        deployment,
        input_len=input_len,
        output_len=output_len,
        precision=precision,
        activations=activations,
        attention_precision=attention_precision,
        kv_precision=kv_precision,
        engine_=engine,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted_tokens,
        usd_per_gpu_hour=usd_per_gpu_hour,
        calibration=calibration,
    )
    if s.problems:
        raise Infeasible("; ".join(s.problems))
    cap = _capacity(s)[0] * s.dep.dp
    conc = sorted(set(concurrencies or default_concurrencies(cap)))
    if conc[0] < 1:
        raise ValueError(f"concurrencies must be >= 1, got {conc[0]}")
    v = _evaluate(s, np.array(conc, dtype=float))
    points = tuple(
        CurvePoint(
            concurrency=int(c),
            batch_per_rank=int(v["b"][i]),
            saturated=bool(c > cap),
            output_tokens_per_s_per_gpu=float(v["out_gpu"][i]),
            total_tokens_per_s_per_gpu=float(v["total_gpu"][i]),
            output_tokens_per_s_per_user=float(v["per_user"][i]),
            ttft_s=float(v["ttft_s"][i]),
            tpot_s=float(v["tpot_s"][i]),
            usd_per_m_output_tokens=_cost(s.usd_h, float(v["out_gpu"][i])),
        )
        for i, c in enumerate(conc)
    )
    return InferenceCurve(
        model=s.model.name,
        hardware=s.hw.name,
        deployment=s.dep,
        precision=s.formats.weights.name,
        kv_precision=s.formats.kv,
        engine=s.eng.name,
        input_len=input_len,
        output_len=output_len,
        capacity=cap,
        usd_per_gpu_hour=s.usd_h,
        points=points,
    )
