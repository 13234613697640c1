"""The throughput-versus-interactivity curve of one serving configuration: tok/s/GPU against tok/s/user
over concurrency, the view InferenceMAX plots (SemiAnalysis; see
https://developer.nvidia.com/blog/nvidia-blackwell-leads-on-new-semianalysis-inferencemax-benchmarks).

`inference_curve(...)` -> `InferenceCurve` (results.py); the points come from steady_state.py, vectorised
over concurrency.
"""

from __future__ import annotations

import numpy as np

from tenfold.perf.calibration import Calibration
from tenfold.perf.errors import Infeasible
from tenfold.perf.serving.presets import Engine
from tenfold.perf.serving.query import ServingQuery
from tenfold.perf.serving.results import CurvePoint, Deployment, InferenceCurve
from tenfold.perf.serving.steady_state import batch_capacity, evaluate, setup_serving, usd_per_m_tokens
from tenfold.perf.specs.hardware import Hardware
from tenfold.perf.specs.models import ModelSpec


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
    (x) at each concurrency (default: powers of two up to what fits, and twice that). The arguments are
    `estimate_inference`'s. Raises `Infeasible` with the reason when the configuration cannot run at all."""
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
    return curve_for(query, concurrencies=concurrencies, calibration=calibration)


def curve_for(
    query: ServingQuery, *, concurrencies: list[int] | None = None, calibration: Calibration | None = None
) -> InferenceCurve:
    """`inference_curve` for a built query: the same curve, without resolving names again."""
    s = setup_serving(query, calibration)
    if s.problems:
        raise Infeasible("; ".join(s.problems))
    cap = batch_capacity(s)[0] * query.deployment.dp
    conc = sorted(set(concurrencies or default_concurrencies(cap)))
    if conc[0] < 1:
        raise ValueError(f"concurrencies must be >= 1, got {conc[0]}")
    v = evaluate(s, np.array(conc, dtype=float))
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
            usd_per_m_output_tokens=usd_per_m_tokens(s.usd_per_gpu_hour, float(v["out_gpu"][i])),
        )
        for i, c in enumerate(conc)
    )
    return InferenceCurve(
        model=query.model.name,
        hardware=query.hardware.name,
        deployment=query.deployment,
        precision=query.formats.weights.name,
        kv_precision=query.formats.kv,
        engine=query.engine.name,
        input_len=query.input_len,
        output_len=query.output_len,
        capacity=cap,
        usd_per_gpu_hour=s.usd_per_gpu_hour,
        points=points,
        calibrated=s.calibrated,
    )
