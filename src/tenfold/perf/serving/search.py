"""Serving search: the deployment, weight format and concurrency that give the most output tokens/s per GPU
while every user still gets at least a target interactivity (tokens/s per user) and a TTFT limit.

This is the InferenceMAX reading of the throughput-versus-interactivity curve: at a fixed tok/s/user, the
deployment whose curve is highest wins. Enumerated (each through `inference_curve`, vectorised over
concurrency):

* TP over t GPUs (t divides the head count, the KV-head rule holds, t <= max_gpus), with expert
  parallelism e over the same GPUs for MoE models (e divides the experts and t);
* attention data parallelism over d GPUs (powers of two) with EP = d for MoE models (DEP, the
  wide-EP recipe of TensorRT-LLM / SGLang);
* with `max_pp` > 1, each TP deployment (EP 1 or EP = tp) also split into pp = 2, 4, ... <= max_pp
  pipeline stages (pipeline.py) where tp·pp <= max_gpus (default up to 8 stages: a model too large for
  one node is served with TP inside a node and stages across nodes, as NVIDIA's H100 baselines are; max_pp
  = 1 searches without pipelines);
* concurrency on a geometric grid (4 points per doubling) up to the batch limit; queued points are excluded.

The best point per (deployment, precision) is the largest throughput among the points meeting both limits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from tenfold.perf.calibration import Calibration, load_calibration
from tenfold.perf.errors import Infeasible
from tenfold.perf.serving.curve import curve_for
from tenfold.perf.serving.presets import Engine
from tenfold.perf.serving.query import ServingQuery
from tenfold.perf.serving.results import Deployment, latencies_in_ms
from tenfold.perf.specs.hardware import Hardware
from tenfold.perf.specs.models import ModelSpec
from tenfold.perf.specs.precision import check_supported, get_precision
from tenfold.perf.training.layout import divisors

MAX_PP = 8
"""Most pipeline stages the search tries by default."""


def deployments(model: ModelSpec, max_gpus: int, max_pp: int = MAX_PP) -> list[Deployment]:
    """Candidate deployments of one instance (module docstring), structurally valid for the model."""
    eps = divisors(model.experts) if model.is_moe else [1]
    out = []
    for tp in divisors(model.heads):
        if tp > max_gpus:
            continue
        for ep in eps:
            if tp % ep == 0:
                out.append(Deployment(tp=tp, ep=ep))
        pp = 2
        while pp <= max_pp and tp * pp <= max_gpus:
            out += [Deployment(tp=tp, ep=ep, pp=pp) for ep in sorted({1, tp}) if ep in eps]
            pp *= 2
    if model.is_moe:
        d = 2
        while d <= max_gpus:
            if model.experts % d == 0:
                out.append(Deployment(dp=d, ep=d))
            d *= 2
    return [d for d in out if not d.problems(model)]


def concurrency_grid(capacity: int) -> list[int]:
    """Geometric concurrencies, 4 per doubling, from 1 up to `capacity` (always included)."""
    grid = {1, capacity}
    i = 0
    while True:
        c = round(2 ** (i / 4))
        if c > capacity:
            break
        grid.add(c)
        i += 1
    return sorted(grid)


@dataclass(frozen=True, kw_only=True)
class ServingPoint:
    """The best operating point of one deployment and precision under the limits."""

    model: str
    hardware: str
    deployment: Deployment
    precision: str
    kv_precision: str
    instance_gpus: int
    concurrency: int
    output_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_user: float
    ttft_s: float
    tpot_s: float
    calibrated: bool = True
    """False for a GPU the serving fit does not cover (a conservative efficiency is used)."""

    def to_dict(self) -> dict:
        """JSON-ready, latencies in ms."""
        d = latencies_in_ms(asdict(self))
        d["deployment"] = asdict(self.deployment) | {"describe": self.deployment.describe()}
        return d


@dataclass(frozen=True, kw_only=True)
class ServingSearch:
    """Fields: best (None if nothing meets the limits), the limits, how many deployments were tried and
    fitted in memory, and the most interactivity any fitted deployment reached under the TTFT limit
    (`max_tokens_per_s_per_user`, for explaining infeasibility)."""

    model: str
    hardware: str
    precision: str
    kv_precision: str
    input_len: int
    output_len: int
    min_tokens_per_s_per_user: float
    max_ttft_s: float
    best: ServingPoint | None
    tried: int
    fits: int
    max_tokens_per_s_per_user: float
    reason: str

    def to_dict(self) -> dict:
        """JSON-ready, latencies in ms."""
        d = latencies_in_ms(asdict(self))
        d["best"] = self.best.to_dict() if self.best else None
        return d


def kv_for(precision: str) -> str:
    """KV-cache format used with a weight format: FP8 for 8- and 4-bit weights, BF16 for 16-bit ones."""
    return "bf16" if get_precision(precision).bits_class == "16" else "fp8"


def search_inference(
    model: ModelSpec | str,
    hardware: Hardware | str,
    *,
    input_len: int,
    output_len: int,
    min_tokens_per_s_per_user: float,
    max_ttft_ms: float,
    precision: str = "fp8",
    kv_precision: str | None = None,
    serving_engine: Engine | str = "trtllm",
    max_gpus: int = 128,
    max_pp: int = MAX_PP,
    progress: Callable[[int, int], None] | None = None,
    calibration: Calibration | None = None,
) -> ServingSearch:
    """The highest tok/s/GPU meeting `min_tokens_per_s_per_user` and `max_ttft_ms` (module docstring),
    with `calibration`'s efficiencies (default: the committed inference fit).

    `max_pp` > 1 also tries pipeline-parallel deployments (module docstring).
    Raises ValueError for bad input (unknown names, non-positive limits, a format the GPU cannot run)."""
    if not min_tokens_per_s_per_user > 0 or not max_ttft_ms > 0:
        raise ValueError(
            f"interactivity and TTFT limits must be > 0, got {min_tokens_per_s_per_user} tok/s/user "
            f"and {max_ttft_ms} ms"
        )
    if max_gpus < 1 or max_pp < 1:
        raise ValueError(f"max_gpus and max_pp must be >= 1, got {max_gpus} and {max_pp}")
    kv = kv_precision or kv_for(precision)
    base = ServingQuery(
        model=model,
        hardware=hardware,
        input_len=input_len,
        output_len=output_len,
        precision=precision,
        kv_precision=kv,
        engine=serving_engine,
    )
    m, hw = base.model, base.hardware
    why = check_supported(base.formats.weights, hw)
    if why:
        raise ValueError(why)
    max_ttft_s = max_ttft_ms / 1e3
    cal = calibration or load_calibration(kind="inference")
    cands = deployments(m, max_gpus, max_pp)
    best: ServingPoint | None = None
    fits = 0
    reach = 0.0
    for i, dep in enumerate(cands):
        query = replace(base, deployment=dep)
        try:
            cap_curve = curve_for(query, concurrencies=[1], calibration=cal)
        except Infeasible:
            if progress:
                progress(i + 1, len(cands))
            continue
        fits += 1
        curve = curve_for(query, concurrencies=concurrency_grid(cap_curve.capacity), calibration=cal)
        for p in curve.points:
            if p.saturated or not p.ttft_s <= max_ttft_s:
                continue
            reach = max(reach, p.output_tokens_per_s_per_user)
            if p.output_tokens_per_s_per_user < min_tokens_per_s_per_user:
                continue
            better = best is None or p.output_tokens_per_s_per_gpu > best.output_tokens_per_s_per_gpu * (
                1 + 1e-9
            )
            if better:
                best = ServingPoint(
                    model=m.name,
                    hardware=hw.name,
                    deployment=dep,
                    precision=precision,
                    kv_precision=kv,
                    instance_gpus=dep.gpus,
                    concurrency=p.concurrency,
                    output_tokens_per_s_per_gpu=p.output_tokens_per_s_per_gpu,
                    output_tokens_per_s_per_user=p.output_tokens_per_s_per_user,
                    ttft_s=p.ttft_s,
                    tpot_s=p.tpot_s,
                    calibrated=curve.calibrated,
                )
        if progress:
            progress(i + 1, len(cands))
    if best is not None:
        reason = ""
    elif not fits:
        reason = f"no deployment of up to {max_gpus} {hw.name} GPUs holds {m.name} in {precision}"
    elif reach == 0.0:
        reason = f"no deployment meets TTFT <= {max_ttft_ms:,.0f} ms at ISL {input_len}"
    else:
        reason = (
            f"at TTFT <= {max_ttft_ms:,.0f} ms the best {hw.name} deployment reaches {reach:.1f} tok/s/user, "
            f"below the {min_tokens_per_s_per_user:g} required"
        )
    return ServingSearch(
        model=m.name,
        hardware=hw.name,
        precision=precision,
        kv_precision=kv,
        input_len=input_len,
        output_len=output_len,
        min_tokens_per_s_per_user=min_tokens_per_s_per_user,
        max_ttft_s=max_ttft_s,
        best=best,
        tried=len(cands),
        fits=fits,
        max_tokens_per_s_per_user=reach if fits else math.nan,
        reason=reason,
    )
