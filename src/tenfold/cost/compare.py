"""`compare_training`: one training run on several GPUs, each with its best layout and precision, side by side
in days, GPU-hours, money (rent and own), energy and carbon, with ratios against a baseline GPU.

Per GPU and per precision it tries (workloads.precisions_for: bf16/fp8 on Hopper, fp8/mxfp8/nvfp4 on
Blackwell), `search_training` finds the fastest layout that fits in memory. Then:

* fixed count (num_gpus): the precision with the most tokens/s/GPU wins;
* deadline (deadline_days): for each GPU count on a ladder (powers of two and 1.5x powers of two), the
  fastest precision; a bisection finds the smallest count whose run meets the deadline (assumes more GPUs
  never make the run slower, which holds on the ladder for the catalog models).

days = tokens / (tokens/s) / 86400 (`workloads.training_days`); GPU-hours = GPUs x days x 24; money, energy
and carbon come from tco.py / energy.py applied to those GPU-hours (`money_for`).

When the calibration carries a measured uncertainty, each row gets 80 % ranges of its throughput, days,
GPU-hours and money, and of its ratios to the baseline (intervals.py), and its cost tornado's MFU bar spans
that uncertainty instead of the assumed one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace
from types import MappingProxyType

from tenfold.cost.defaults import CostDefaults, gpu_facts, load_cost_defaults
from tenfold.cost.energy import footprint
from tenfold.cost.intervals import estimate_intervals, ratio_intervals
from tenfold.cost.results import Comparison, ComparisonSet, Money, PrecisionOption, TrainingRow
from tenfold.cost.tco import own_cost, own_inputs, rent_prices
from tenfold.cost.tornado import own_tornado, rent_tornado
from tenfold.cost.workloads import (
    DEFAULT_GPUS,
    CostSettings,
    TrainingWorkload,
    default_scenario,
    precisions_for,
    training_days,
)
from tenfold.perf.calibration import Calibration, load_calibration
from tenfold.perf.specs.hardware import Hardware, load_hardware
from tenfold.perf.specs.models import load_model
from tenfold.perf.training.estimate import TrainingEstimate
from tenfold.perf.training.search import search_training
from tenfold.perf.uncertainty import Uncertainty

Progress = Callable[[int, int], None] | None
NAN = math.nan


def money_for(
    hw: Hardware,
    gpu_hours: float,
    settings: CostSettings,
    defaults: CostDefaults,
    *,
    mfu_halfwidth: float | None = None,
) -> Money:
    """Rent and own cost, energy, carbon and tornados of `gpu_hours` on `hw` under `settings`;
    `mfu_halfwidth`: the throughput's measured relative uncertainty for the tornados' MFU bar (None: the
    assumed range)."""
    facts = gpu_facts(hw, defaults)
    over = settings.per_gpu.get(hw.name, {})
    rent = rent_prices(
        facts,
        basis=settings.rent_basis,
        ondemand_usd_h=over.get("ondemand_usd_h"),
        reserved_usd_h=over.get("reserved_usd_h"),
    )
    notes = []
    rent_usd = gpu_hours * rent.usd_h
    if not math.isfinite(rent_usd):
        notes.append(f"no {settings.rent_basis} price for {hw.name}: rent cost not computed")
    try:
        inputs = own_inputs(
            facts,
            defaults,
            **dict(settings.own),
            **{k: v for k, v in over.items() if k in ("capex_usd", "it_kW")},
        )
    except ValueError as exc:
        notes.append(f"own cost not computed: {exc}")
        inputs = None
    grid = settings.grid_g_per_kWh(defaults)
    if inputs is None:
        return Money(
            gpu_hours=gpu_hours,
            rent=rent,
            rent_usd=rent_usd,
            own=None,
            own_usd=NAN,
            footprint=None,
            tornado_own=None,
            tornado_rent=rent_tornado(gpu_hours, rent, defaults, mfu_halfwidth=mfu_halfwidth),
            notes=tuple(notes),
        )
    oc = own_cost(inputs)
    return Money(
        gpu_hours=gpu_hours,
        rent=rent,
        rent_usd=rent_usd,
        own=oc,
        own_usd=gpu_hours * oc.usd_per_busy_gpu_hour,
        footprint=footprint(gpu_hours=gpu_hours, it_kW=inputs.it_kW, pue=inputs.pue, grid_g_per_kWh=grid),
        tornado_own=own_tornado(gpu_hours, inputs, defaults, mfu_halfwidth=mfu_halfwidth),
        tornado_rent=rent_tornado(gpu_hours, rent, defaults, mfu_halfwidth=mfu_halfwidth),
        notes=tuple(notes),
    )


def gpu_ladder(max_gpus: int, min_gpus: int = 8, steps: tuple[float, ...] = (1.0, 1.5)) -> list[int]:
    """GPU counts tried under a deadline: each power of two times each of `steps` (whole counts only),
    from min_gpus to max_gpus: 8, 12, 16, 24, 32, ... by default."""
    out, p = set(), 1
    while p <= max_gpus:
        for f in steps:
            c = p * f
            if min_gpus <= c <= max_gpus and c == int(c):
                out.add(int(c))
        p *= 2
    return sorted(out)


def best_training_at(
    w: TrainingWorkload,
    hw: Hardware,
    n: int,
    precisions: tuple[str, ...],
    tick: Callable[[], None],
    calibration: Calibration | None = None,
) -> tuple[TrainingEstimate | None, tuple[PrecisionOption, ...]]:
    """The fastest plan of `w` on `n` GPUs of `hw` over `precisions` (the best layout of each by
    `search_training` under `calibration`, default the shipped fit), or None when none fits, and one
    option per precision saying what it gave; `tick()` is called after each search. The fleet planner
    prices the same plans per pool."""
    options, best = [], None
    for p in precisions:
        r = search_training(
            w.model,
            hw,
            n,
            seq_len=w.seq_len,
            global_batch=w.global_batch,
            precision=p,
            software=w.software,
            top_k=1,
            headroom_GiB=w.headroom_GiB,
            calibration=calibration,
        )
        tick()
        if r.top:
            e = r.top[0]
            days = training_days(w.tokens, e.tokens_per_s)
            options.append(
                PrecisionOption(
                    precision=p,
                    feasible=True,
                    reason="",
                    num_gpus=n,
                    days=days,
                    tokens_per_s_per_gpu=e.tokens_per_s_per_gpu,
                    plan=e.layout.describe(),
                )
            )
            if best is None or e.tokens_per_s > best.tokens_per_s:
                best = e
        else:
            why = ", ".join(f"{k} {v:,}" for k, v in sorted(r.rejected.items(), key=lambda kv: -kv[1])[:3])
            options.append(
                PrecisionOption(
                    precision=p,
                    feasible=False,
                    reason=f"no layout of {n} GPUs fits (rejected: {why})",
                    num_gpus=n,
                    days=NAN,
                    tokens_per_s_per_gpu=NAN,
                    plan="",
                )
            )
    return best, tuple(options)


def _row(w, hw, est: TrainingEstimate, options, settings, defaults, unc=None) -> TrainingRow:
    days = training_days(w.tokens, est.tokens_per_s)
    gpu_hours = est.num_gpus * days * 24.0
    half = unc.relative_halfwidth(est.uncertainty_group) if unc is not None else None
    money = money_for(hw, gpu_hours, settings, defaults, mfu_halfwidth=half)
    values = {"days": days, "gpu_hours": gpu_hours, "rent_usd": money.rent_usd, "own_usd": money.own_usd}
    return TrainingRow(
        hardware=hw.name,
        display_name=hw.display_name,
        feasible=True,
        reason="",
        precision=est.precision,
        plan=est.layout.describe(),
        num_gpus=est.num_gpus,
        days=days,
        tokens_per_s_per_gpu=est.tokens_per_s_per_gpu,
        mfu_bf16=est.mfu_bf16,
        mfu_precision=est.mfu_precision,
        money=money,
        estimate=est,
        options=options,
        intervals=MappingProxyType(estimate_intervals(est, values)),
    )


def _no_row(hw: Hardware, reason: str, options=()) -> TrainingRow:
    return TrainingRow(
        hardware=hw.name,
        display_name=hw.display_name,
        feasible=False,
        reason=reason,
        precision="",
        plan="",
        num_gpus=0,
        days=NAN,
        tokens_per_s_per_gpu=NAN,
        mfu_bf16=NAN,
        mfu_precision=NAN,
        money=None,
        options=tuple(options),
    )


def _train_one(w, hw, precisions, num_gpus, deadline_days, ladder, settings, defaults, tick, cal=None):
    unc = (cal or load_calibration()).uncertainty
    if not precisions:
        return _no_row(hw, f"{hw.name} supports none of the requested precisions")
    if num_gpus is not None:
        best, options = best_training_at(w, hw, num_gpus, precisions, tick, cal)
        if best is None:
            return _no_row(hw, f"no layout of {num_gpus} {hw.name} fits in any precision", options)
        return _row(w, hw, best, options, settings, defaults, unc)
    cache: dict[int, tuple] = {}

    def at(i: int) -> tuple:
        if i not in cache:
            cache[i] = best_training_at(w, hw, ladder[i], precisions, tick, cal)
        return cache[i]

    def meets(i: int) -> bool:
        best = at(i)[0]
        return best is not None and training_days(w.tokens, best.tokens_per_s) <= deadline_days

    hi = len(ladder) - 1
    if not meets(hi):
        best, options = at(hi)
        if best is None:
            return _no_row(hw, f"no layout of {ladder[hi]:,} {hw.name} fits", options)
        days = training_days(w.tokens, best.tokens_per_s)
        return _no_row(
            hw,
            f"even {ladder[hi]:,} GPUs take {days:,.1f} days > the {deadline_days:g}-day deadline",
            options,
        )
    lo = 0
    while lo < hi:  # smallest index that meets the deadline
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid + 1
    best, options = at(lo)
    return _row(w, hw, best, options, settings, defaults, unc)


def _with_ratios(rows: list[TrainingRow], baseline: str, unc: Uncertainty | None = None) -> list[TrainingRow]:
    """Rows with their ratios to the baseline row and, given an uncertainty, the ratios' 80 % ranges
    (none on the baseline row: its ratios are 1 by definition)."""
    base = next((r for r in rows if r.hardware == baseline and r.feasible), None)
    if base is None:
        return rows
    out = []
    for r in rows:
        if not r.feasible:
            out.append(r)
            continue
        ratios = {
            "speedup": base.gpu_hours / r.gpu_hours,
            "rent_cost_ratio": r.money.rent_usd / base.money.rent_usd,
            "own_cost_ratio": r.money.own_usd / base.money.own_usd,
        }
        ranges = {}
        if r is not base and r.estimate is not None and base.estimate is not None:
            g, bg = r.estimate.uncertainty_group, base.estimate.uncertainty_group
            ranges = ratio_intervals(ratios, g, bg, unc)
        out.append(replace(r, **ratios, intervals=MappingProxyType({**r.intervals, **ranges})))
    return out


def compare_training(
    workload: TrainingWorkload,
    gpus: tuple[str, ...] | list[str] = DEFAULT_GPUS,
    *,
    num_gpus: int | None = None,
    deadline_days: float | None = None,
    precisions: tuple[str, ...] | None = None,
    baseline: str | None = None,
    settings: CostSettings | None = None,
    max_gpus: int = 65536,
    ladder_steps: tuple[float, ...] = (1.0, 1.5),
    defaults: CostDefaults | None = None,
    progress: Progress = None,
    calibration: Calibration | None = None,
) -> Comparison:
    """Compare one training run across GPUs (module docstring). Give exactly one of num_gpus or
    deadline_days. `precisions` restricts what each GPU may use; `baseline` (default h100-sxm if listed,
    else the first GPU) is what ratios refer to; under a deadline, GPU counts come from
    gpu_ladder(max_gpus, steps=ladder_steps). `calibration`: the training model's fitted efficiencies
    (default: the shipped fit; a user's file from `tenfold calibrate training`). Raises ValueError for
    bad input."""
    t0 = time.perf_counter()
    if (num_gpus is None) == (deadline_days is None):
        raise ValueError("give exactly one of num_gpus or deadline_days")
    if num_gpus is not None and (not isinstance(num_gpus, int) or num_gpus < 1):
        raise ValueError(f"num_gpus must be an integer >= 1, got {num_gpus!r}")
    if deadline_days is not None and not deadline_days > 0:
        raise ValueError(f"deadline_days must be > 0, got {deadline_days}")
    if not gpus:
        raise ValueError("give at least one GPU to compare")
    settings = settings or CostSettings()
    dfl = defaults or load_cost_defaults()
    hws = [load_hardware(g) for g in gpus]
    names = [h.name for h in hws]
    baseline = baseline or ("h100-sxm" if "h100-sxm" in names else names[0])
    if baseline not in names:
        raise ValueError(f"baseline {baseline!r} is not among the compared GPUs {names}")
    settings.grid_g_per_kWh(dfl)  # fail early on a bad grid preset
    settings.check_gpus(names)
    load_model(workload.model)
    per = [precisions_for(h, precisions) for h in hws]
    steps = sum(len(p) for p in per)
    ladder = gpu_ladder(max_gpus, steps=ladder_steps)
    if deadline_days is not None:
        if not ladder:
            raise ValueError(f"max_gpus={max_gpus} leaves no GPU count of 8 or more to try")
        steps *= math.ceil(math.log2(len(ladder))) + 2
    done = [0]

    def tick() -> None:
        done[0] += 1
        if progress:
            progress(min(done[0], steps), steps)

    rows = [
        _train_one(workload, h, p, num_gpus, deadline_days, ladder, settings, dfl, tick, calibration)
        for h, p in zip(hws, per, strict=True)
    ]
    if progress:
        progress(steps, steps)
    notes = [f"token count: {workload.source}"] if workload.source else []
    if calibration is not None and calibration.fit.get("source"):
        fit = calibration.fit
        notes.append(
            f"throughput from a user calibration fitted on {fit.get('rows', '?')} rows of {fit['source']}"
        )
    notes.append(
        f"rent = GPU-hours x {settings.rent_basis} price; own = GPU-hours x the owner's $/busy GPU-hour "
        "(tenfold.cost.tco); energy at the facility = IT x PUE"
    )
    return Comparison(
        kind="training",
        workload=workload,
        mode="fixed" if num_gpus is not None else "deadline",
        num_gpus=num_gpus,
        deadline_days=deadline_days,
        baseline=baseline,
        grid_g_per_kWh=settings.grid_g_per_kWh(dfl),
        settings=settings,
        rows=tuple(_with_ratios(rows, baseline, (calibration or load_calibration()).uncertainty)),
        notes=tuple(notes),
        elapsed_s=time.perf_counter() - t0,
    )


def compare_default(
    gpus: tuple[str, ...] | list[str] = DEFAULT_GPUS,
    *,
    precisions: tuple[str, ...] | None = None,
    baseline: str | None = None,
    settings: CostSettings | None = None,
    defaults: CostDefaults | None = None,
    progress: Progress = None,
    calibration: Calibration | None = None,
) -> ComparisonSet:
    """The embedded default (`tenfold compare` with no workload): the article's GPT-MoE-1.8T pre-training
    and Llama 3.1 405B, each at its scenario's GPU count, across `gpus` (workloads.default_scenario)."""
    t0 = time.perf_counter()
    scenario = default_scenario()
    out = []
    for i, (w, n) in enumerate(scenario):

        def sub(done: int, total: int, i: int = i) -> None:
            if progress:
                progress(i * total + done, len(scenario) * total)

        out.append(
            compare_training(
                w,
                gpus,
                num_gpus=n,
                precisions=precisions,
                baseline=baseline,
                settings=settings,
                defaults=defaults,
                progress=sub,
                calibration=calibration,
            )
        )
    return ComparisonSet(
        title="The Blackwell question: the article's GPT-MoE-1.8T and Llama 3.1 405B pre-training",
        comparisons=tuple(out),
        elapsed_s=time.perf_counter() - t0,
    )
