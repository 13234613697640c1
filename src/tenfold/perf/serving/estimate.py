"""Serving performance of one configuration at one concurrency: TTFT, TPOT, tokens/s per GPU and per user,
cost per million tokens, the step breakdown and memory per GPU.

`estimate_inference(...)` -> frozen `InferenceEstimate` (results.py). The model itself (steady state under
continuous batching) is in steady_state.py, the step time in step.py, memory and the batch limit in
memory.py; the curve over concurrency in curve.py.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from tenfold.perf.calibration import Calibration
from tenfold.perf.serving.presets import Engine
from tenfold.perf.serving.query import ServingQuery
from tenfold.perf.serving.results import STEP_PARTS, Deployment, InferenceEstimate, ServingStepBreakdown
from tenfold.perf.serving.steady_state import batch_capacity, evaluate, setup_serving, usd_per_m_tokens
from tenfold.perf.specs.catalog import GiB
from tenfold.perf.specs.hardware import Hardware
from tenfold.perf.specs.models import ModelSpec
from tenfold.perf.uncertainty import serving_group_key


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
            the attention projections (default: query.default_attention); kv_precision: bf16, fp16, fp8,
            nvfp4 or "auto" (query.auto_kv_precision).
        engine: serving-engine preset or Engine (KV sizing, batch caps; presets.py).
        draft_tokens, accepted_tokens: speculative decoding with the model's MTP module: tokens drafted per
            step and mean tokens accepted per step (1 <= accepted <= 1 + draft).
        usd_per_gpu_hour: price for the cost per million tokens (default: the catalog's on-demand price).
        calibration: fitted efficiencies (default: the committed inference fit).
    Raises ValueError for malformed input; an infeasible configuration is returned with feasible=False
    and the reason (numbers printed).
    """
    query = ServingQuery(
        model=model,
        hardware=hardware,
        deployment=deployment or Deployment(),
        input_len=input_len,
        output_len=output_len,
        precision=precision,
        activations=activations,
        attention_precision=attention_precision,
        kv_precision=kv_precision,
        engine=engine,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted_tokens,
        usd_per_gpu_hour=usd_per_gpu_hour,
    )
    return estimate_for(query, concurrency=concurrency, calibration=calibration)


def estimate_for(
    query: ServingQuery, *, concurrency: int | None = None, calibration: Calibration | None = None
) -> InferenceEstimate:
    """`estimate_inference` for a built query: the same estimate, without resolving names again."""
    s = setup_serving(query, calibration)
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    nan = math.nan
    fmts, dep = query.formats, query.deployment
    base = dict(
        model=query.model.name,
        hardware=query.hardware.name,
        deployment=dep,
        precision=fmts.weights.name,
        activations=fmts.activations.name,
        attention_precision=fmts.attention.name,
        kv_precision=fmts.kv,
        engine=query.engine.name,
        input_len=query.input_len,
        output_len=query.output_len,
        draft_tokens=query.draft_tokens,
        accepted_tokens=query.accepted_tokens,
        num_gpus=dep.gpus,
        usd_per_gpu_hour=s.usd_per_gpu_hour,
        calibrated=s.calibrated,
        notes=s.notes,
    )
    mem = s.memory
    mem_fields = dict(
        weights_GiB=mem.weights_B / GiB if mem else nan,
        workspace_GiB=mem.workspace_B / GiB if mem else nan,
        kv_budget_GiB=mem.kv_budget_B / GiB if mem else nan,
        kv_per_sequence_GiB=mem.kv_per_sequence_B / GiB if mem else nan,
        capacity_GiB=query.hardware.hbm_bytes / GiB,
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
    cap_rank, limit = batch_capacity(s)
    conc = concurrency if concurrency is not None else cap_rank * dep.dp
    v = {k: float(np.asarray(x).ravel()[0]) for k, x in evaluate(s, np.array([conc])).items()}
    notes = s.notes
    if concurrency is not None and conc > v["cap"]:
        notes = (
            *notes,
            f"concurrency {conc} exceeds the {int(v['cap'])} sequences that fit ({limit}); the "
            "rest queue (TTFT includes the wait)",
        )
    est = InferenceEstimate(
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
        usd_per_m_output_tokens=usd_per_m_tokens(s.usd_per_gpu_hour, v["out_gpu"]),
        usd_per_m_total_tokens=usd_per_m_tokens(s.usd_per_gpu_hour, v["total_gpu"]),
        breakdown=ServingStepBreakdown(**{f"{k}_s": v[f"{k}_s"] for k in STEP_PARTS}, step_s=v["step_s"]),
    )
    return with_interval(est, s.calibration, query)


def with_interval(est: InferenceEstimate, cal: Calibration, query: ServingQuery) -> InferenceEstimate:
    """`est` with the 80 % range of its calibration's measured uncertainty for the query's engine family
    and dense/MoE model (unchanged when the calibration carries none)."""
    group = serving_group_key(query.engine.name, query.model.is_moe)
    if cal.uncertainty is None:
        return replace(est, uncertainty_group=group)
    f = cal.uncertainty.factor(group)
    est = replace(est, uncertainty_group=group, interval_factor=f)
    return replace(est, interval=est.scaled_interval(est.output_tokens_per_s_per_gpu))
