"""The serving model's core: a `ServingQuery` made ready (memory, batch limit, what stops it), and its
rates and latencies at any concurrency, in seconds and tokens/s. `estimate.py` reads one concurrency off
it, `curve.py` many.

Steady state at concurrency C (closed-loop clients, continuous batching): each request is a prefill of ISL
tokens (which yields the first token) and D = (OSL - 1)/a decode steps, a = accepted tokens per step (1
without speculative decoding). With b = ceil(C/dp) sequences on the busiest attention rank, an engine step
carries their b·q decode tokens (q = 1 + draft tokens) and, to keep the batch full, p = b·ISL/D prompt
tokens of arriving requests:

    output tok/s/GPU = C·OSL / (D · t_step · GPUs)        total (input + output) = C·(ISL + OSL) / (...)
    TPOT = t_step / a,  output tok/s/user = 1/TPOT
    TTFT = the step(s) that carry one whole prompt next to the running batch (chunks of max_num_tokens),
           plus the wait for a free slot when C exceeds what fits: (C - capacity)·D·t_step/capacity
    $/M tokens = $/GPU-h · 1e6 / (3600 · tok/s/GPU)        (stated for output and for input + output)

The metrics are InferenceMAX's (tok/s/GPU, "interactivity" = 1/TPOT tok/s/user, TTFT; SemiAnalysis,
https://developer.nvidia.com/blog/nvidia-blackwell-leads-on-new-semianalysis-inferencemax-benchmarks);
TPOT = t_step and TTFT = queueing + prefill follow the roofline serving models LLM-Viewer (arXiv
2402.16363) and llm-analysis (github.com/cli99/llm-analysis), whose cost per token this is too.

Under attention data parallelism an MoE model's ranks exchange tokens at every MoE layer, so a step lasts
as long as its busiest rank (`busiest_prompts`); a dense model's replicas never meet and each runs its own
steps, exactly as dp single-GPU instances would.

Under pipeline parallelism (pipeline.py) pp micro-batches of b/pp sequences are in flight, each stage
runs the heaviest stage's layers (`pipeline.stage_model`) on one micro-batch at a time and sends it on, and
a token crosses all pp stages: the step above becomes t_step = pp·(t_stage + t_send), so TPOT and the
rates keep the formulas above; a prompt's chunks are pipelined, so TTFT is
sum of chunk stage times + (pp - 1) times the slowest (`pipeline.pipelined_time`).

Beyond the batch limit (KV memory, max_batch_size, or max_num_tokens) requests queue: tok/s/GPU and
tok/s/user stay at their values at the limit and TTFT grows. A prefill-only workload (OSL = 1) runs steps of
min(b·ISL, max_num_tokens) prompt tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tenfold.perf.calibration import Calibration, load_calibration
from tenfold.perf.serving.fit_advice import what_fits
from tenfold.perf.serving.memory import ServingMemory, serving_memory
from tenfold.perf.serving.pipeline import pipelined_time, stage_model, stage_send_time
from tenfold.perf.serving.query import ServingQuery
from tenfold.perf.serving.results import STEP_PARTS
from tenfold.perf.serving.step import gemm_efficiency, serving_rates, step_times
from tenfold.perf.specs.precision import check_supported, get_precision


@dataclass(frozen=True, kw_only=True)
class ServingSetup:
    """A query ready to evaluate.

    Fields:
        query: the configuration.
        calibration: the fitted efficiencies it runs with.
        memory: weights, workspace and KV budget per GPU; None when a structural problem stops the
            configuration before memory is sized.
        problems: why it cannot run, numbers printed (empty = feasible).
        notes: assumptions worth reporting (fallback efficiency, the price used).
        usd_per_gpu_hour: the price for the cost per million tokens (NaN when none is known).
        calibrated: whether the fit covers this GPU architecture at every GEMM width it runs (the
            activations', the attention projections' and BF16 for the head); if not, step.gemm_efficiency
            uses a conservative value.
    """

    query: ServingQuery
    calibration: Calibration
    memory: ServingMemory | None
    problems: tuple[str, ...]
    notes: tuple[str, ...]
    usd_per_gpu_hour: float
    calibrated: bool


def setup_serving(query: ServingQuery, calibration: Calibration | None = None) -> ServingSetup:
    """Size memory and collect what stops `query` (default calibration: the committed inference fit)."""
    cal = calibration or load_calibration(kind="inference")
    model, hw, dep, fmts = query.model, query.hardware, query.deployment, query.formats
    act, attn = fmts.activations, fmts.attention
    problems = dep.problems(model)
    for p in {act.name: act, attn.name: attn}.values():
        why = check_supported(p, hw)
        if why:
            problems.append(why)
    if query.draft_tokens and not model.mtp_layers:
        problems.append(f"{model.name} has no MTP module to draft {query.draft_tokens} tokens with")
    notes = list(query.notes)
    widths = sorted({p.bits_class for p in (act, attn, get_precision("bf16"))})
    missing = [w for w in widths if not cal.is_calibrated(hw.arch, w)]
    calibrated = not missing
    if missing and not check_supported(act, hw):
        used = ", ".join(f"{w}-bit {gemm_efficiency(cal, hw.arch, w):.2f}" for w in missing)
        notes.append(
            f"uncalibrated: no inference calibration for {hw.arch} ({'/'.join(missing)}-bit GEMMs); using "
            f"the lowest efficiency fitted on any GPU at that width ({used})"
        )
    usd_h = query.usd_per_gpu_hour
    if usd_h is None:
        usd_h = hw.ondemand_usd_h if hw.ondemand_usd_h is not None else math.nan
        if math.isfinite(usd_h):
            notes.append(f"cost at the catalog's on-demand price ${usd_h:.2f}/GPU-hour")
    memory = None
    if not problems:
        memory = serving_memory(
            stage_model(model, dep.pp),
            query.engine,
            capacity_B=hw.hbm_bytes,
            tp=dep.tp,
            gpus=dep.stage_gpus,
            pp=dep.pp,
            formats=fmts,
            input_len=query.input_len,
            output_len=query.output_len,
            draft_tokens=query.draft_tokens,
        )
        short = memory.shortfall(query.engine.kv_fraction, query.engine.kv_basis)
        if short:
            problems.append(f"{short}; {what_fits(query, memory)}")
    return ServingSetup(
        query=query,
        calibration=cal,
        memory=memory,
        problems=tuple(problems),
        notes=tuple(notes),
        usd_per_gpu_hour=float(usd_h),
        calibrated=calibrated,
    )


def batch_capacity(s: ServingSetup) -> tuple[int, str]:
    """Most sequences per attention rank of a feasible setup, and what limits them (kv_memory,
    max_batch_size or max_num_tokens; the token budget is per micro-batch, pp of them in flight)."""
    q = s.query
    limits = {"kv_memory": s.memory.max_batch_memory, "max_batch_size": q.engine.max_batch_size}
    if q.output_len > 1:
        per_seq = q.tokens_per_step + q.input_len * q.accepted_tokens / (q.output_len - 1)
        limits["max_num_tokens"] = max(int(s.memory.max_num_tokens // per_seq), 1) * q.deployment.pp
    name = min(limits, key=limits.get)
    return int(limits[name]), name


def evaluate(s: ServingSetup, concurrency: np.ndarray) -> dict[str, np.ndarray]:
    """Rates and latencies of a feasible setup, arrays over concurrency: running, b, cap (sequences),
    tpot_s, ttft_s, step_s and its parts `<part>_s` (seconds), per_user, out_gpu, total_gpu (tokens/s).
    Under pipeline parallelism step_s is pp stage steps (one token through every stage)."""
    query, mem = s.query, s.memory
    dep, eng, fmts, hw = query.deployment, query.engine, query.formats, query.hardware
    q, a, pp = query.tokens_per_step, query.accepted_tokens, dep.pp
    stage = stage_model(query.model, pp)
    cap_rank, _ = batch_capacity(s)
    cap = cap_rank * dep.dp
    c = np.asarray(concurrency, dtype=float)
    running = np.minimum(c, cap)
    b = np.ceil(running / dep.dp)
    kv_compute = get_precision("fp8" if fmts.kv in ("fp8", "nvfp4") and "fp8" in hw.peak_flops else "bf16")
    rates = serving_rates(hw, fmts, s.calibration, kv_compute)
    links = s.calibration.links(hw)
    isl, osl = query.input_len, query.output_len
    kw = dict(
        formats=fmts,
        rates=rates,
        links=links,
        tp=dep.tp,
        dp=dep.dp,
        ep=dep.ep,
        draft_tokens=query.draft_tokens,
        ep_overlap=eng.ep_overlap,
        ep_comm=eng.ep_comm,
    )

    def send(tokens):
        return stage_send_time(tokens, hidden=stage.hidden, stage_gpus=dep.stage_gpus, pp=pp, links=links)

    out: dict[str, np.ndarray] = {"running": running, "b": b, "cap": np.full_like(c, cap)}
    if osl == 1:  # prefill only: micro-batches of up to max_num_tokens prompt tokens
        tokens = np.minimum(b * isl, mem.max_num_tokens)
        st = step_times(stage, b=0.0 * b, p=tokens, q=q, ctx_dec=0.0, isl=isl, **kw)
        t = st["step_s"] + send(tokens)
        chunks = b * isl / tokens  # micro-batches per round of b prompts
        slowest = t
        if pp > 1:
            slowest = last_chunk_time(stage, 0.0 * b, tokens, tokens, isl=isl, ctx_dec=0.0, q=q, kw=kw)
            slowest = slowest + send(tokens)
        req_rate = b * dep.dp / pipelined_time(t, slowest, chunks, pp)
        out["tpot_s"] = np.full_like(c, np.nan)
        out["per_user"] = np.full_like(c, np.nan)
        out["ttft_s"] = pipelined_time(t, slowest, np.maximum((b + 1) / 2 * isl / tokens, 1.0), pp)
        scale = 1.0
    else:
        d_steps = (osl - 1) / a
        p = b * isl / d_steps
        cap_prompts = np.floor(np.maximum(mem.max_num_tokens - b / pp * q, 0.0) / isl)
        lockstep = dep.dp > 1 and query.model.is_moe  # ranks meet at every MoE layer; dense replicas don't
        p_busy = isl * busiest_prompts(b / d_steps, dep.dp, cap_prompts) if lockstep else p
        ctx = isl + osl / 2
        b_mb, p_mb = b / pp, np.maximum(p_busy, p) / pp  # one of pp micro-batches in flight
        st = step_times(stage, b=b_mb, p=p_mb, p_mean=p / pp, q=q, ctx_dec=ctx, isl=isl, **kw)
        t_stage = st["step_s"] + send(b_mb * q + p_mb)
        t = pp * t_stage
        req_rate = running / (d_steps * t)
        out["tpot_s"] = t / a
        out["per_user"] = a / t
        chunk = np.maximum(mem.max_num_tokens - b_mb * q, 1.0)
        n_chunks = np.ceil(isl / chunk)
        p_first = np.maximum(p / pp, np.minimum(isl, chunk))
        first = step_times(stage, b=b_mb, p=p_first, q=q, ctx_dec=ctx, isl=isl, **kw)["step_s"]
        first = first + send(b_mb * q + p_first)
        slowest = first
        if pp > 1:
            slowest = last_chunk_time(stage, b_mb, p_first, chunk, isl=isl, ctx_dec=ctx, q=q, kw=kw)
            slowest = slowest + send(b_mb * q + p_first)
        out["ttft_s"] = pipelined_time(first, slowest, n_chunks, pp)
        scale = float(pp)
    wait = np.where(c > cap, (c - cap) / np.maximum(req_rate, 1e-30), 0.0)
    out["ttft_s"] = out["ttft_s"] + wait
    out["out_gpu"] = req_rate * osl / dep.gpus
    out["total_gpu"] = req_rate * (isl + osl) / dep.gpus
    out["step_s"] = t
    sends = t - scale * st["step_s"]  # the stage-to-stage sends of the pp stage steps (0 without PP)
    for k in STEP_PARTS:
        out[f"{k}_s"] = sends if k == "pp" else scale * st[f"{k}_s"]
    return out


def last_chunk_time(stage, b, p, chunk, *, isl: int, ctx_dec: float, q: float, kw: dict) -> np.ndarray:
    """Step seconds of the step carrying a prompt's last chunk (`chunk` tokens of `p` prefill tokens),
    element by element: its queries attend to ISL - chunk/2 keys on average, the causal mean of a
    2·ISL - chunk token prompt, where the mean chunk sees ISL/2."""
    b, p, chunk = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (b, p, chunk)))
    span = 2.0 * isl - np.minimum(chunk, isl)
    times = [
        float(step_times(stage, b=bi, p=pi, q=q, ctx_dec=ctx_dec, isl=si, **kw)["step_s"][()])
        for bi, pi, si in zip(b.ravel(), p.ravel(), span.ravel(), strict=True)
    ]
    return np.reshape(np.array(times), b.shape)


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


def usd_per_m_tokens(usd_per_gpu_hour: float, tokens_per_s_per_gpu: float) -> float:
    """Cost of a million tokens at a GPU-hour price and a per-GPU rate; NaN without a price or a rate."""
    if tokens_per_s_per_gpu > 0 and math.isfinite(usd_per_gpu_hour):
        return usd_per_gpu_hour * 1e6 / (3600.0 * tokens_per_s_per_gpu)
    return math.nan
