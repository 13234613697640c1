"""Work bounds of the web API: how much one request may ask the planner to do.

Four bounds besides the per-field ranges in schemas.py: a grid-size check before a search or a
comparison runs (`plan_count`, `compare_plan_bound` against `Limits.max_search_plans` and
`Limits.max_compare_plans`), a time limit per request, checked between search chunks (`time_limit`),
at most `Limits.heavy_slots` searches or comparisons at once (the routes answer 429 beyond that), and
a cap on the request body (`Limits.max_body_bytes`, 413 beyond it, body.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tenfold.cost.compare import gpu_ladder
from tenfold.cost.workloads import precisions_for
from tenfold.perf.defaults import MAX_COMPARE_PLANS, MAX_DEADLINE_GPUS, MAX_SEARCH_PLANS, TRAINING
from tenfold.perf.specs.hardware import load_hardware
from tenfold.perf.training.grid import count_plans
from tenfold.web.schemas import CompareRequest

TIME_LIMIT_S = 30.0
MAX_BODY_BYTES = 64 * 1024  # the largest valid request body is under 2 KiB of JSON


@dataclass(frozen=True, kw_only=True)
class Limits:
    """The work bounds one app enforces (`create_app` takes them as keyword arguments)."""

    time_limit_s: float = TIME_LIMIT_S
    """Wall time one search or comparison may run before it stops with a 503."""
    heavy_slots: int = 2
    """Searches and comparisons running at once; one more gets a 429."""
    max_search_plans: int = MAX_SEARCH_PLANS
    """Layouts one training search may enumerate; a larger grid gets a 422 before it runs."""
    max_compare_plans: int = MAX_COMPARE_PLANS
    """Layouts one training comparison may search, all GPU types together; beyond it: 422."""
    max_body_bytes: int = MAX_BODY_BYTES
    """Bytes one request body may have; a larger one gets a 413 before it is read (body.py)."""

    def __post_init__(self) -> None:
        if self.heavy_slots < 0:
            raise ValueError(f"heavy_slots must be >= 0, got {self.heavy_slots}")
        if self.max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be >= 1, got {self.max_body_bytes}")


class TimeLimit(Exception):
    """A request ran past its time limit (raised from a progress callback, between chunks of work)."""


def time_limit(limit_s: float) -> Callable[[int, int], None]:
    """A progress callback for the searches that raises TimeLimit once `limit_s` seconds have passed."""
    t_end = time.perf_counter() + limit_s

    def check(done: int, total: int) -> None:
        if time.perf_counter() > t_end:
            raise TimeLimit(f"stopped after {limit_s:g} s at {done} of {total} steps")

    return check


def plan_count(model: str, num_gpus: int, seq_len: int, max_vp: int, software: str) -> int:
    """How many layouts `search_training` would enumerate, counted by perf without building the grid."""
    return count_plans(model, num_gpus, seq_len=seq_len, max_vp=max_vp, software=software)


def bisection_cost(costs: list[int]) -> int:
    """The most a deadline search over a ladder can cost, when probing rung i costs `costs[i]`: the top
    rung first, then the costliest path of the bisection for the smallest rung that meets the deadline
    (`tenfold.cost.compare`, `_train_one`: lo, hi = 0, top; probe (lo + hi) // 2; keep one half)."""

    def worst(lo: int, hi: int) -> int:  # rung hi is already probed
        if lo >= hi:
            return 0
        mid = (lo + hi) // 2
        return costs[mid] + max(worst(lo, mid), worst(mid + 1, hi))

    return costs[-1] + worst(0, len(costs) - 1) if costs else 0


def compare_plan_bound(req: CompareRequest) -> int:
    """An upper bound on the layouts a training comparison searches: per GPU type and precision, one
    search at the fixed count, or (deadline) the costliest bisection of the GPU-count ladder, each probe
    counted at its own grid size."""
    allowed = (req.precision,) if req.precision else None
    if req.deadline_days is None:
        per_search = plan_count(req.model, req.num_gpus or 1, req.seq_len, TRAINING.max_vp, TRAINING.software)
    else:
        grids = [
            plan_count(req.model, n, req.seq_len, TRAINING.max_vp, TRAINING.software)
            for n in gpu_ladder(MAX_DEADLINE_GPUS)
        ]
        per_search = bisection_cost(grids)
    n_prec = sum(len(precisions_for(load_hardware(g), allowed)) for g in req.gpus)
    return n_prec * per_search
