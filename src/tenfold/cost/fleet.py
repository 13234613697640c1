"""Fleet planner: place training runs and serving loads on the GPU pools a team has (Hopper and Blackwell at
once, each rented or owned), choosing a pool and a GPU count per job, by an exact mixed-integer program.

Options. For job j on pool p the planner lists GPU counts n (powers of two and the pool's size, up to the
pool's size): a training run takes d = tokens / (tok/s at n, best layout and precision) / 86400 days and is
kept if d <= its deadline; a serving load takes the fewest instances of its best deployment that carry the
demand, for its `days`. Each option costs n x 24 x d x the pool's $/GPU-hour (tco.py: the owner's $/busy
GPU-hour, or the rental price).

Program (all jobs run at the same time, so a pool's GPUs are shared out, not queued):

    x[o] in {0, 1} for every option o;  sum over o of job j: x[o] = 1            (each job placed once)
    sum over o on pool p: n_o x[o] <= size_p                                     (pool capacity)
    objective "cost":     minimise sum c_o x[o]
    objective "makespan": minimise T + 1e-6 x cost / max cost, with T >= sum over o of job j: d_o x[o]
                          for each training job j (a serving load runs for its fixed `days`)

solved by HiGHS through `scipy.optimize.milp` (exact branch and bound). The naive plans it is set beside solve
the same program restricted to one pool: the newest GPU type, or the cheapest $/GPU-hour.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from tenfold.cost.compare import best_training_at
from tenfold.cost.compare_serving import best_serving_row
from tenfold.cost.defaults import CostDefaults, load_cost_defaults
from tenfold.cost.tco import own_cost, own_inputs, rent_prices
from tenfold.cost.workloads import (
    CostSettings,
    ServingWorkload,
    TrainingWorkload,
    precisions_for,
    training_days,
)
from tenfold.perf.defaults import MAX_GPUS
from tenfold.perf.specs.catalog import read_toml
from tenfold.perf.specs.hardware import Hardware, load_hardware

BASES = ("own", "reserved", "ondemand")
OBJECTIVES = ("cost", "makespan")
Progress = Callable[[int, int], None] | None


@dataclass(frozen=True, kw_only=True)
class Pool:
    """GPUs a team can use: `count` of catalog GPU `gpu`, paid as `basis` (own, reserved, ondemand);
    usd_per_gpu_hour overrides the price the basis would give."""

    name: str
    gpu: str
    count: int
    basis: str = "own"
    usd_per_gpu_hour: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.count, int) or not 1 <= self.count <= MAX_GPUS:
            raise ValueError(
                f"pool {self.name}: count must be an integer 1 to {MAX_GPUS:,}, got {self.count!r}"
            )
        if self.basis not in BASES:
            raise ValueError(f"pool {self.name}: basis {self.basis!r} not in {BASES}")
        if self.usd_per_gpu_hour is not None and not self.usd_per_gpu_hour >= 0:
            raise ValueError(f"pool {self.name}: usd_per_gpu_hour must be >= 0, got {self.usd_per_gpu_hour}")
        load_hardware(self.gpu)


@dataclass(frozen=True, kw_only=True)
class Job:
    """A training run (with a deadline in days) or a serving load (for its `days`)."""

    name: str
    workload: TrainingWorkload | ServingWorkload
    deadline_days: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.workload, TrainingWorkload):
            if self.deadline_days is None or not self.deadline_days > 0:
                raise ValueError(f"job {self.name}: a training job needs deadline_days > 0")
        elif self.deadline_days is not None:
            raise ValueError(f"job {self.name}: a serving job runs for its `days`; drop deadline_days")


@dataclass(frozen=True, kw_only=True)
class FleetSpec:
    """Pools, jobs and what to minimise ("cost" or "makespan")."""

    pools: tuple[Pool, ...]
    jobs: tuple[Job, ...]
    objective: str = "cost"
    min_gpus: int = 8

    def __post_init__(self) -> None:
        if not self.pools or not self.jobs:
            raise ValueError("a fleet needs at least one [[pool]] and one [[job]]")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective {self.objective!r} not in {OBJECTIVES}")
        for what, items in (("pool", self.pools), ("job", self.jobs)):
            names = [i.name for i in items]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"duplicate {what} name(s): {', '.join(dup)}")


def _job_from_dict(d: dict, i: int) -> Job:
    d = dict(d)
    try:
        name = d.pop("name")
        kind = d.pop("kind")
    except KeyError as exc:
        raise ValueError(f"[[job]] {i}: missing {exc}") from exc
    deadline = d.pop("deadline_days", None)
    try:
        if kind == "training":
            d["tokens"] = float(d["tokens"])
            w: TrainingWorkload | ServingWorkload = TrainingWorkload(label=name, **d)
        elif kind == "serving":
            w = ServingWorkload(label=name, **d)
        else:
            raise ValueError(f"job {name}: kind must be training or serving, got {kind!r}")
    except TypeError as exc:
        raise ValueError(f"job {name}: {exc}") from exc
    return Job(name=name, workload=w, deadline_days=None if deadline is None else float(deadline))


def fleet_from_dict(d: dict) -> FleetSpec:
    """A FleetSpec from a parsed fleet TOML (examples/fleet.toml shows every field)."""
    try:
        pools = tuple(Pool(**p) for p in d.get("pool", []))
    except TypeError as exc:
        raise ValueError(f"[[pool]]: {exc}") from exc
    jobs = tuple(_job_from_dict(j, i) for i, j in enumerate(d.get("job", [])))
    return FleetSpec(
        pools=pools, jobs=jobs, objective=d.get("objective", "cost"), min_gpus=int(d.get("min_gpus", 8))
    )


def load_fleet(path: str | Path) -> FleetSpec:
    return fleet_from_dict(read_toml(Path(path)))


@dataclass(frozen=True, kw_only=True)
class Option:
    """One way to run one job: pool, GPUs, days, $, precision and plan."""

    job: str
    pool: str
    num_gpus: int
    days: float
    usd: float
    precision: str
    plan: str


@dataclass(frozen=True, kw_only=True)
class Plan:
    """One solved program: the chosen option per job (empty when infeasible), its totals and, when
    infeasible, why."""

    label: str
    feasible: bool
    reason: str
    assignments: tuple[Option, ...]
    total_usd: float
    makespan_days: float
    gpus_used: dict

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class FleetPlan:
    """The optimal plan and the two naive ones, with every option the program chose from."""

    objective: str
    pool_prices_usd_per_gpu_hour: dict
    best: Plan
    naive: tuple[Plan, ...]
    options: tuple[Option, ...] = field(default_factory=tuple)
    elapsed_s: float = 0.0

    def to_dict(self) -> dict:
        return {
            "objective": self.objective,
            "pool_prices_usd_per_gpu_hour": self.pool_prices_usd_per_gpu_hour,
            "best": self.best.to_dict(),
            "naive": [p.to_dict() for p in self.naive],
            "options": [asdict(o) for o in self.options],
            "elapsed_s": self.elapsed_s,
        }


def pool_price(pool: Pool, hw: Hardware, defaults: CostDefaults) -> float:
    """$/GPU-hour a job pays on this pool (NaN if the catalog has no such price and none is given)."""
    if pool.usd_per_gpu_hour is not None:
        return pool.usd_per_gpu_hour
    if pool.basis == "own":
        try:
            return own_cost(own_inputs(hw, defaults)).usd_per_busy_gpu_hour
        except ValueError:
            return math.nan
    return rent_prices(hw, basis=pool.basis, defaults=defaults).usd_h


def counts_for(pool_size: int, min_gpus: int) -> list[int]:
    """GPU counts tried on a pool: powers of two from min_gpus, and the pool's whole size."""
    out, n = {pool_size}, 1
    while n <= pool_size:
        if n >= min_gpus:
            out.add(n)
        n *= 2
    return sorted(out)


def job_options(
    job: Job, pool: Pool, hw: Hardware, price: float, spec: FleetSpec, defaults: CostDefaults, tick
) -> tuple[list[Option], str]:
    """The options of one job on one pool, and why there are none when there are none."""
    w = job.workload
    precisions = precisions_for(hw)
    if not math.isfinite(price):
        return [], f"no {pool.basis} price for {pool.gpu} (set usd_per_gpu_hour)"
    if isinstance(w, ServingWorkload):
        row = best_serving_row(w, hw, precisions, min(pool.count, 128), CostSettings(), defaults, tick)
        if not row.feasible:
            return [], row.reason
        if row.num_gpus > pool.count:
            return [], f"needs {row.num_gpus:,} {pool.gpu} for the demand; the pool has {pool.count:,}"
        usd = row.num_gpus * 24.0 * w.days * price
        return [
            Option(
                job=job.name,
                pool=pool.name,
                num_gpus=row.num_gpus,
                days=w.days,
                usd=usd,
                precision=row.precision,
                plan=row.plan,
            )
        ], ""
    out, best_days = [], math.inf
    for n in reversed(counts_for(pool.count, spec.min_gpus)):  # largest first: stop once too slow
        est, _ = best_training_at(w, hw, n, precisions, tick)
        if est is None:
            continue
        days = training_days(w.tokens, est.tokens_per_s)
        best_days = min(best_days, days)
        if days > job.deadline_days:
            break
        out.append(
            Option(
                job=job.name,
                pool=pool.name,
                num_gpus=n,
                days=days,
                usd=n * 24.0 * days * price,
                precision=est.precision,
                plan=est.layout.describe(),
            )
        )
    if out:
        return out, ""
    if math.isfinite(best_days):
        return [], (
            f"even {pool.count:,} {pool.gpu} take {best_days:,.1f} days > the "
            f"{job.deadline_days:g}-day deadline"
        )
    return [], f"no layout of up to {pool.count:,} {pool.gpu} fits {w.model}"


def solve(
    spec: FleetSpec,
    options: list[Option],
    pools: tuple[Pool, ...],
    label: str,
    why_none: dict[tuple[str, str], str],
) -> Plan:
    """The MILP of the module docstring over `options` restricted to `pools`."""
    names = {p.name for p in pools}
    opts = [o for o in options if o.pool in names]
    jobs = [j.name for j in spec.jobs]
    missing = [j for j in jobs if not any(o.job == j for o in opts)]
    if missing:
        reasons = "; ".join(
            f"{j}: " + ", ".join(f"{p.name} - {why_none.get((j, p.name), 'no option')}" for p in pools)
            for j in missing
        )
        return Plan(
            label=label,
            feasible=False,
            reason=f"no pool can run {reasons}",
            assignments=(),
            total_usd=math.nan,
            makespan_days=math.nan,
            gpus_used={},
        )
    from scipy.optimize import Bounds, LinearConstraint, milp  # ~0.8 s to import: only when solving

    n_x = len(opts)
    makespan = spec.objective == "makespan"
    n_var = n_x + (1 if makespan else 0)
    rows, lo, hi = [], [], []
    for j in jobs:  # each job exactly once
        rows.append([1.0 if o.job == j else 0.0 for o in opts] + ([0.0] if makespan else []))
        lo.append(1.0)
        hi.append(1.0)
    for p in pools:  # capacity
        rows.append(
            [float(o.num_gpus) if o.pool == p.name else 0.0 for o in opts] + ([0.0] if makespan else [])
        )
        lo.append(-np.inf)
        hi.append(float(p.count))
    cost = np.array([o.usd for o in opts])
    if makespan:
        timed = [j.name for j in spec.jobs if isinstance(j.workload, TrainingWorkload)] or jobs
        for j in timed:  # sum d x - T <= 0
            rows.append([o.days if o.job == j else 0.0 for o in opts] + [-1.0])
            lo.append(-np.inf)
            hi.append(0.0)
        scale = max(float(cost.max()), 1.0)
        c = np.concatenate([cost / scale * 1e-6, [1.0]])
    else:
        c = cost
    integrality = np.array([1] * n_x + ([0] if makespan else []))
    ub = np.array([1.0] * n_x + ([np.inf] if makespan else []))
    res = milp(
        c,
        constraints=LinearConstraint(np.array(rows), lo, hi),
        integrality=integrality,
        bounds=Bounds(np.zeros(n_var), ub),
    )
    if res.status != 0 or res.x is None:
        return Plan(
            label=label,
            feasible=False,
            reason=capacity_reason(spec, opts, pools),
            assignments=(),
            total_usd=math.nan,
            makespan_days=math.nan,
            gpus_used={},
        )
    chosen = tuple(o for o, v in zip(opts, res.x[:n_x], strict=True) if v > 0.5)
    assert sorted(o.job for o in chosen) == sorted(jobs), "each job is placed exactly once"
    used = {p.name: sum(o.num_gpus for o in chosen if o.pool == p.name) for p in pools}
    return Plan(
        label=label,
        feasible=True,
        reason="",
        assignments=chosen,
        total_usd=sum(o.usd for o in chosen),
        makespan_days=makespan_of(spec, chosen),
        gpus_used=used,
    )


def makespan_of(spec: FleetSpec, chosen: tuple[Option, ...]) -> float:
    """Days until the last training job ends (the serving loads' days when there is no training job)."""
    training = {j.name for j in spec.jobs if isinstance(j.workload, TrainingWorkload)}
    days = [o.days for o in chosen if o.job in training] or [o.days for o in chosen]
    return max(days)


def capacity_reason(spec: FleetSpec, opts: list[Option], pools: tuple[Pool, ...]) -> str:
    """Why no assignment fits: each job's smallest option, against the pools' sizes."""
    parts, need = [], 0
    for j in spec.jobs:
        mine = [o for o in opts if o.job == j.name]
        small = min(mine, key=lambda o: o.num_gpus)
        need += small.num_gpus
        parts.append(f"{j.name} >= {small.num_gpus:,} GPUs ({small.pool})")
    have = sum(p.count for p in pools)
    return (
        f"pool capacity: the jobs' smallest options that meet their deadlines need {need:,} GPUs at once "
        f"({'; '.join(parts)}) and no split of them fits pools of "
        + ", ".join(f"{p.name} {p.count:,}" for p in pools)
        + f" ({have:,} in all)"
    )


def plan_fleet(
    spec: FleetSpec, *, defaults: CostDefaults | None = None, progress: Progress = None
) -> FleetPlan:
    """Options for every job on every pool, then the optimal plan and the two naive ones."""
    t0 = time.perf_counter()
    dfl = defaults or load_cost_defaults()
    hws = {p.name: load_hardware(p.gpu) for p in spec.pools}
    prices = {p.name: pool_price(p, hws[p.name], dfl) for p in spec.pools}
    total = len(spec.jobs) * len(spec.pools)
    options: list[Option] = []
    why: dict[tuple[str, str], str] = {}
    k = 0
    for j in spec.jobs:
        for p in spec.pools:
            opts, reason = job_options(j, p, hws[p.name], prices[p.name], spec, dfl, lambda: None)
            options += opts
            if reason:
                why[(j.name, p.name)] = reason
            k += 1
            if progress:
                progress(k, total)
    best = solve(spec, options, spec.pools, f"optimal ({spec.objective})", why)
    newest = max(spec.pools, key=lambda p: (hws[p.name].year, p.count))
    finite = [p for p in spec.pools if math.isfinite(prices[p.name])]
    naive = [solve(spec, options, (newest,), f"all on the newest ({newest.name}: {newest.gpu})", why)]
    if finite:
        cheap = min(finite, key=lambda p: prices[p.name])
        naive.append(
            solve(
                spec,
                options,
                (cheap,),
                f"all on the cheapest ({cheap.name}: ${prices[cheap.name]:.2f}/GPU-h)",
                why,
            )
        )
    return FleetPlan(
        objective=spec.objective,
        pool_prices_usd_per_gpu_hour=prices,
        best=best,
        naive=tuple(naive),
        options=tuple(options),
        elapsed_s=time.perf_counter() - t0,
    )
