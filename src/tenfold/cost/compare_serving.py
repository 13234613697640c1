"""`compare_serving`: one serving load on several GPUs. Per GPU and precision, `search_inference` finds the
deployment and concurrency with the most output tok/s/GPU that still give every user the target tok/s and
TTFT; the fastest precision wins. The load then needs

    instances = ceil(demand tok/s / (tok/s/GPU x GPUs per instance)),  GPUs = instances x GPUs per instance

for `days` of serving: GPU-hours = GPUs x 24 x days, priced and costed like a training run
(compare.money_for), and $/M tokens = cost / (demand x seconds served / 1e6).

Each row's rates, latencies and $/M tokens carry the 80 % range of the inference calibration's
cross-validated error for the workload's engine family and dense/MoE model, and its ratios to the baseline
the range of a ratio of two correlated estimates (tenfold.cost.intervals).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace
from types import MappingProxyType

from tenfold.cost.compare import Progress, money_for
from tenfold.cost.defaults import CostDefaults, load_cost_defaults
from tenfold.cost.intervals import ratio_intervals, serving_intervals
from tenfold.cost.results import NAN, Comparison, ServingOption, ServingRow
from tenfold.cost.workloads import (
    DEFAULT_GPUS,
    SECONDS_PER_DAY,
    CostSettings,
    ServingWorkload,
    precisions_for,
)
from tenfold.perf.calibration import Calibration, load_calibration
from tenfold.perf.serving.search import search_inference
from tenfold.perf.specs.hardware import Hardware, load_hardware
from tenfold.perf.specs.models import load_model
from tenfold.perf.uncertainty import serving_group_key


def best_serving_row(
    w: ServingWorkload,
    hw: Hardware,
    precisions: tuple[str, ...],
    max_instance_gpus: int,
    settings: CostSettings,
    dfl: CostDefaults,
    tick: Callable[[], None],
    calibration: Calibration | None = None,
) -> ServingRow:
    """The serving load `w` on `hw`: the precision whose best deployment (`search_inference`, instances of
    at most `max_instance_gpus` GPUs) gives the most output tok/s/GPU, the instances that carry the demand
    and their cost (module docstring); an infeasible row with every precision's reason when none serves.
    `tick()` is called after each search. The fleet planner prices the same rows per pool."""
    options, best = [], None
    for p in precisions:
        s = search_inference(
            w.model,
            hw,
            input_len=w.input_len,
            output_len=w.output_len,
            min_tokens_per_s_per_user=w.min_tokens_per_s_per_user,
            max_ttft_ms=w.max_ttft_s * 1e3,
            precision=p,
            serving_engine=w.engine,
            max_gpus=max_instance_gpus,
            calibration=calibration,
        )
        tick()
        options.append(ServingOption(precision=p, feasible=s.best is not None, reason=s.reason, point=s.best))
        if s.best is not None and (
            best is None or s.best.output_tokens_per_s_per_gpu > best.output_tokens_per_s_per_gpu
        ):
            best = s.best
    if best is None:
        reasons = "; ".join(f"{o.precision}: {o.reason}" for o in options) or "no supported precision"
        return ServingRow(
            hardware=hw.name,
            display_name=hw.display_name,
            feasible=False,
            reason=reasons,
            precision="",
            plan="",
            point=None,
            instances=0,
            num_gpus=0,
            tokens_per_s_per_gpu=NAN,
            tokens_per_s_per_user=NAN,
            ttft_ms=NAN,
            tpot_ms=NAN,
            money=None,
            options=tuple(options),
        )
    per_instance = best.output_tokens_per_s_per_gpu * best.instance_gpus
    instances = math.ceil(w.output_tokens_per_s / per_instance)
    gpus = instances * best.instance_gpus
    money = money_for(hw, gpus * 24.0 * w.days, settings, dfl)
    m_tokens = w.output_tokens_per_s * w.days * SECONDS_PER_DAY / 1e6
    scaled = {
        "tokens_per_s_per_gpu": best.output_tokens_per_s_per_gpu,
        "tokens_per_s_per_user": best.output_tokens_per_s_per_user,
        "ttft_ms": best.ttft_s * 1e3,
        "tpot_ms": best.tpot_s * 1e3,
        "rent_usd_per_m_tokens": money.rent_usd / m_tokens,
        "own_usd_per_m_tokens": money.own_usd / m_tokens,
    }
    cal = calibration or load_calibration(kind="inference")
    return ServingRow(
        hardware=hw.name,
        display_name=hw.display_name,
        feasible=True,
        reason="",
        precision=best.precision,
        plan=f"{best.deployment.describe()} x {instances} at concurrency {best.concurrency}",
        point=best,
        instances=instances,
        num_gpus=gpus,
        tokens_per_s_per_gpu=best.output_tokens_per_s_per_gpu,
        tokens_per_s_per_user=best.output_tokens_per_s_per_user,
        ttft_ms=best.ttft_s * 1e3,
        tpot_ms=best.tpot_s * 1e3,
        money=money,
        rent_usd_per_m_tokens=money.rent_usd / m_tokens,
        own_usd_per_m_tokens=money.own_usd / m_tokens,
        options=tuple(options),
        intervals=MappingProxyType(serving_intervals(scaled, serving_group(w), cal.uncertainty)),
    )


def serving_group(w: ServingWorkload) -> str:
    """The uncertainty group of a serving workload: its engine family and dense/MoE model."""
    return serving_group_key(w.engine, load_model(w.model).is_moe)


def with_ratios(
    r: ServingRow, base: ServingRow, w: ServingWorkload, calibration: Calibration | None
) -> ServingRow:
    """`r` with its ratios to the baseline row and their 80 % ranges (none on the baseline itself: the
    same GPU and the same group, its ratios are 1 by definition)."""
    ratios = {
        "speedup": r.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu,
        "rent_cost_ratio": r.rent_usd_per_m_tokens / base.rent_usd_per_m_tokens,
        "own_cost_ratio": r.own_usd_per_m_tokens / base.own_usd_per_m_tokens,
    }
    ranges = {}
    if r.hardware != base.hardware:
        group = serving_group(w)
        unc = (calibration or load_calibration(kind="inference")).uncertainty
        ranges = ratio_intervals(ratios, group, group, unc)
    return replace(r, **ratios, intervals=MappingProxyType(dict(r.intervals) | ranges))


def compare_serving(
    workload: ServingWorkload,
    gpus: tuple[str, ...] | list[str] = DEFAULT_GPUS,
    *,
    precisions: tuple[str, ...] | None = None,
    baseline: str | None = None,
    settings: CostSettings | None = None,
    max_instance_gpus: int = 128,
    defaults: CostDefaults | None = None,
    progress: Progress = None,
    num_gpus: int | None = None,
    calibration: Calibration | None = None,
) -> Comparison:
    """Compare one serving load across GPUs (module docstring). Raises ValueError for bad input, and for
    any `num_gpus`: the GPU count follows from the demand, so a fixed count cannot be honoured (rather
    than silently ignored, issue 14)."""
    t0 = time.perf_counter()
    if num_gpus is not None:
        raise ValueError(
            f"num_gpus={num_gpus}: a serving comparison sizes the GPU count from the demand "
            f"({workload.output_tokens_per_s:,.0f} output tok/s); give the demand, not a GPU count"
        )
    if not gpus:
        raise ValueError("give at least one GPU to compare")
    settings = settings or CostSettings()
    dfl = defaults or load_cost_defaults()
    hws = [load_hardware(g) for g in gpus]
    names = [h.name for h in hws]
    baseline = baseline or ("h100-sxm" if "h100-sxm" in names else names[0])
    if baseline not in names:
        raise ValueError(f"baseline {baseline!r} is not among the compared GPUs {names}")
    grid = settings.grid_g_per_kWh(dfl)
    per = [precisions_for(h, precisions) for h in hws]
    steps = sum(len(p) for p in per)
    done = [0]

    def tick() -> None:
        done[0] += 1
        if progress:
            progress(done[0], steps)

    rows = [
        best_serving_row(workload, h, p, max_instance_gpus, settings, dfl, tick, calibration)
        for h, p in zip(hws, per, strict=True)
    ]
    base = next((r for r in rows if r.hardware == baseline and r.feasible), None)
    if base is not None:
        rows = [with_ratios(r, base, workload, calibration) if r.feasible else r for r in rows]
    notes = [
        f"every user gets >= {workload.min_tokens_per_s_per_user:g} output tok/s and TTFT <= "
        f"{workload.max_ttft_s:g} s; {workload.days:g} days of "
        f"{workload.output_tokens_per_s:,.0f} output tok/s",
        f"rent = GPU-hours x {settings.rent_basis} price; own = GPU-hours x the owner's $/busy GPU-hour",
    ]
    if workload.source:
        notes.insert(0, workload.source)
    return Comparison(
        kind="serving",
        workload=workload,
        mode="demand",
        num_gpus=None,
        deadline_days=None,
        baseline=baseline,
        grid_g_per_kWh=grid,
        settings=settings,
        rows=tuple(rows),
        notes=tuple(notes),
        elapsed_s=time.perf_counter() - t0,
    )
