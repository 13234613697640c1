"""Parallelism search: enumerate every layout for a model, cluster and global batch, prune, rank.

The grid is (tp, pp, cp) with tp·pp·cp dividing the GPU count (dp is the rest), x vp x ep x micro-batch x
recompute x ZeRO stage. Evaluation is vectorised (numpy, one array element per plan) and runs in three
passes so that cheap tests reject most plans before the expensive ones:

1. structural rules (layout.RULES, plus "TP beyond the scale-up domain"), counted by the first rule a
   plan breaks;
2. memory per GPU (`plan_memory`), counted as "memory";
3. step time (`plan_times`) for the survivors; the top k by step time come back as full
   `TrainingEstimate`s computed by `estimate_training`, so the search and the single estimate agree.

Sequence parallelism is always on when tp > 1 (it never costs time and saves memory in this model).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tenfold.perf.calibration import Calibration, load_calibration
from tenfold.perf.specs.hardware import Hardware, load_hardware
from tenfold.perf.specs.models import ModelSpec, load_model
from tenfold.perf.specs.precision import Precision, check_supported, get_precision
from tenfold.perf.training.estimate import TrainingEstimate, estimate_training, headroom_extra_bytes
from tenfold.perf.training.grid import MICRO_BATCHES, RECOMPUTES, PlanGrid, search_chunks
from tenfold.perf.training.layout import ZERO_STAGES, broken_rules, rules_for
from tenfold.perf.training.memory import plan_memory
from tenfold.perf.training.stack import Stack, stack
from tenfold.perf.training.step import plan_times


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    """Fields:
    top: the best plans, fastest first, as full estimates.
    evaluated: plans enumerated; valid: passing the structural rules; fits: also fitting in memory.
    rejected: plans rejected, by rule key ("tp_heads", ..., "memory"), each counted once (first reason).
    elapsed_s: wall time of the search.
    """

    model: str
    hardware: str
    num_gpus: int
    seq_len: int
    global_batch: int
    precision: str
    software: str
    top: tuple[TrainingEstimate, ...]
    evaluated: int
    valid: int
    fits: int
    rejected: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "hardware": self.hardware,
            "num_gpus": self.num_gpus,
            "seq_len": self.seq_len,
            "global_batch": self.global_batch,
            "precision": self.precision,
            "software": self.software,
            "evaluated": self.evaluated,
            "valid": self.valid,
            "fits": self.fits,
            "rejected": self.rejected,
            "elapsed_s": self.elapsed_s,
            "top": [e.to_dict() for e in self.top],
        }


def enumerate_plans(
    model: ModelSpec,
    num_gpus: int,
    *,
    seq_len: int,
    max_vp: int = 8,
    software: Stack | None = None,
    micro_batches: tuple[int, ...] = MICRO_BATCHES,
    recomputes: tuple[str, ...] = RECOMPUTES,
    zero_stages: tuple[int, ...] = ZERO_STAGES,
) -> PlanGrid:
    """The search's whole grid as one PlanGrid (`grid.search_chunks` joined; `grid.count_plans` counts it)."""
    return PlanGrid.concat(
        search_chunks(
            model,
            num_gpus,
            seq_len=seq_len,
            max_vp=max_vp,
            software=software,
            micro_batches=micro_batches,
            recomputes=recomputes,
            zero_stages=zero_stages,
        )
    )


def _resolve(
    model: ModelSpec | str,
    hardware: Hardware | str,
    precision: Precision | str,
    software: Stack | str,
    calibration: Calibration | None,
) -> tuple[ModelSpec, Hardware, Precision, Stack, Calibration]:
    """Names to specs, once, at the edge (ValueError for an unknown name)."""
    model = load_model(model) if isinstance(model, str) else model
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    prec = get_precision(precision) if isinstance(precision, str) else precision
    sw = stack(software) if isinstance(software, str) else software
    return model, hw, prec, sw, calibration or load_calibration()


def _check_supported(prec: Precision, hw: Hardware) -> None:
    unsupported = check_supported(prec, hw)
    if unsupported:
        raise ValueError(unsupported)


def search_training(
    model: ModelSpec | str,
    hardware: Hardware | str,
    num_gpus: int,
    *,
    seq_len: int,
    global_batch: int,
    precision: Precision | str = "bf16",
    software: Stack | str = "megatron-core",
    calibration: Calibration | None = None,
    top_k: int = 5,
    max_vp: int = 8,
    micro_batches: tuple[int, ...] = MICRO_BATCHES,
    recomputes: tuple[str, ...] = RECOMPUTES,
    zero_stages: tuple[int, ...] = ZERO_STAGES,
    progress: Callable[[int, int], None] | None = None,
    headroom_GiB: float | None = None,
) -> SearchResult:
    """Search all layouts of `num_gpus` GPUs for the fastest step (see the module docstring).

    `headroom_GiB`: memory per GPU left outside the model (None: what the framework needs).
    `progress(done, total)` is called after each (tp, pp, cp) chunk (the CLI draws a bar with it).
    Raises ValueError for bad input (unknown names, num_gpus < 1, a precision the GPU lacks).
    """
    t0 = time.perf_counter()
    model, hw, prec, sw, cal = _resolve(model, hardware, precision, software, calibration)
    if num_gpus < 1 or seq_len < 1 or global_batch < 1:
        raise ValueError(
            f"num_gpus, seq_len and global_batch must be >= 1, got {num_gpus}, {seq_len}, {global_batch}"
        )
    _check_supported(prec, hw)
    extra_B = headroom_extra_bytes(headroom_GiB)
    chunks = search_chunks(
        model,
        num_gpus,
        seq_len=seq_len,
        max_vp=max_vp,
        software=sw,
        micro_batches=micro_batches,
        recomputes=recomputes,
        zero_stages=zero_stages,
    )
    kw = dict(precision=prec, software=sw, seq_len=seq_len, global_batch=global_batch)
    rejected = {r.key: 0 for r in rules_for(sw)} | {"tp_domain": 0, "memory": 0}
    evaluated = valid_n = fits_n = 0
    best_step: list[np.ndarray] = []
    best_plans: list[PlanGrid] = []
    keep = max(top_k, 1) * 4
    for i, x in enumerate(chunks):
        evaluated += len(x)
        masks = x.rule_masks(model, seq_len, global_batch, sw)
        masks["tp_domain"] = x.tp > hw.placement_domain
        bad = np.zeros(len(x), dtype=bool)
        for key, mask in masks.items():
            rejected[key] += int(np.count_nonzero(mask & ~bad))
            bad |= mask
        valid_n += int(np.count_nonzero(~bad))
        if np.any(~bad):
            y = x.select(~bad)
            fit = plan_memory(model, y, **kw)["memory_B"] + extra_B <= hw.hbm_bytes
            rejected["memory"] += int(np.count_nonzero(~fit))
            fits_n += int(np.count_nonzero(fit))
            if np.any(fit):
                z = y.select(fit)
                step = plan_times(model, hw, z, calibration=cal, **kw)["step_s"]
                order = np.argsort(step, kind="stable")[:keep]
                best_step.append(step[order])
                best_plans.append(z.select(order))
        if progress is not None:
            progress(i + 1, len(chunks))
    top: list[TrainingEstimate] = []
    if best_step:
        plans = PlanGrid.concat(best_plans)
        steps = np.concatenate(best_step)
        fastest = np.argsort(steps, kind="stable")[:keep]
        for j in fastest[rank_plans(steps[fastest], plans.select(fastest))][:top_k]:
            top.append(
                estimate_training(
                    model, hw, plans.layout(j), calibration=cal, headroom_GiB=headroom_GiB, **kw
                )
            )
    return SearchResult(
        model=model.name,
        hardware=hw.name,
        num_gpus=num_gpus,
        seq_len=seq_len,
        global_batch=global_batch,
        precision=prec.name,
        software=sw.name,
        top=tuple(top),
        evaluated=evaluated,
        valid=valid_n,
        fits=fits_n,
        rejected={k: v for k, v in rejected.items() if v},
        elapsed_s=time.perf_counter() - t0,
    )


def search_training_reference(
    model: ModelSpec | str,
    hardware: Hardware | str,
    num_gpus: int,
    *,
    seq_len: int,
    global_batch: int,
    precision: Precision | str = "bf16",
    software: Stack | str = "megatron-core",
    calibration: Calibration | None = None,
    top_k: int = 5,
    max_vp: int = 8,
    micro_batches: tuple[int, ...] = MICRO_BATCHES,
    recomputes: tuple[str, ...] = RECOMPUTES,
    zero_stages: tuple[int, ...] = ZERO_STAGES,
    progress: Callable[[int, int], None] | None = None,
) -> SearchResult:
    """The plain reference for `search_training`: the same grid, one plan at a time through the
    per-plan rules and `estimate_training`. Slow; tests hold the vectorised search equal to it."""
    t0 = time.perf_counter()
    model, hw, prec, sw, cal = _resolve(model, hardware, precision, software, calibration)
    _check_supported(prec, hw)
    chunks = search_chunks(
        model,
        num_gpus,
        seq_len=seq_len,
        max_vp=max_vp,
        software=sw,
        micro_batches=micro_batches,
        recomputes=recomputes,
        zero_stages=zero_stages,
    )
    kw = dict(precision=prec, software=sw, seq_len=seq_len, global_batch=global_batch)
    rejected = {r.key: 0 for r in rules_for(sw)} | {"tp_domain": 0, "memory": 0}
    evaluated = valid_n = fits_n = 0
    ranked: list[tuple[float, int, TrainingEstimate]] = []
    for i, x in enumerate(chunks):
        for j in range(len(x)):
            evaluated += 1
            lay = x.layout(j)
            broken = [
                r.key
                for r in broken_rules(model, lay, seq_len=seq_len, global_batch=global_batch, software=sw)
            ]
            if lay.tp > hw.placement_domain:
                broken.append("tp_domain")
            if broken:
                rejected[broken[0]] += 1
                continue
            valid_n += 1
            est = estimate_training(model, hw, lay, calibration=cal, **kw)
            if not est.feasible:
                rejected["memory"] += 1
                continue
            fits_n += 1
            ranked.append((est.step_time_s, evaluated, est))
        if progress is not None:
            progress(i + 1, len(chunks))
    ranked.sort(key=lambda r: (r[0], r[1]))
    fastest = ranked[: max(top_k, 1) * 4]
    best = fastest[0][0] if fastest else 0.0

    def preference(r: tuple[float, int, TrainingEstimate]) -> tuple:
        lay = r[2].layout
        return (r[0] > best * (1.0 + NEAR_TIE), lay.cp, lay.vp, lay.pp, r[0], r[1])

    ranked = sorted(fastest, key=preference)
    return SearchResult(
        model=model.name,
        hardware=hw.name,
        num_gpus=num_gpus,
        seq_len=seq_len,
        global_batch=global_batch,
        precision=prec.name,
        software=sw.name,
        top=tuple(r[2] for r in ranked[:top_k]),
        evaluated=evaluated,
        valid=valid_n,
        fits=fits_n,
        rejected={k: v for k, v in rejected.items() if v},
        elapsed_s=time.perf_counter() - t0,
    )


NEAR_TIE = 0.01
"""Plans within this fraction of the fastest step time are ranked by simplicity rather than speed: the
difference is far inside the model's own 80 % range (tenfold.perf.uncertainty, 13-42 %), and a practitioner
would take the simpler layout."""


def rank_plans(step: np.ndarray, plans: PlanGrid) -> np.ndarray:
    """Indices of `plans` (the fastest few the search kept) best first: near-ties with the fastest
    (NEAR_TIE) first, by the layout a practitioner would pick (least context parallelism, then fewest
    virtual and pipeline stages, then speed), then every other plan by step time."""
    tied = step <= step.min() * (1.0 + NEAR_TIE)
    return np.lexsort((step, plans.pp, plans.vp, plans.cp, ~tied))
