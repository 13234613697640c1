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

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tenfold.perf.calibration import Calibration, load_calibration
from tenfold.perf.specs.hardware import Hardware, load_hardware
from tenfold.perf.specs.models import ModelSpec, load_model
from tenfold.perf.specs.precision import check_supported, get_precision
from tenfold.perf.training.estimate import (
    RECOMPUTE_CODE,
    TrainingEstimate,
    estimate_training,
    plan_memory,
    plan_times,
)
from tenfold.perf.training.layout import RULES, Layout, rule_masks
from tenfold.perf.training.stack import Stack, stack

MICRO_BATCHES = (1, 2, 4, 8, 16)
RECOMPUTES = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3)
CODE_RECOMPUTE = {v: k for k, v in RECOMPUTE_CODE.items()}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


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
    micro_batches: tuple[int, ...] = MICRO_BATCHES,
    recomputes: tuple[str, ...] = RECOMPUTES,
    zero_stages: tuple[int, ...] = ZERO_STAGES,
) -> list[dict[str, np.ndarray]]:
    """The grid as chunks of arrays (one chunk per (tp, pp, cp)); dp = num_gpus / (tp·pp·cp).

    Every (tp, pp, cp) whose product divides the GPU count is listed, with tp and cp capped only by the
    head count and the sequence length and pp by the layer count; the rules decide validity."""
    divs = _divisors(num_gpus)
    eps = [e for e in divs if model.is_moe and model.experts % e == 0] if model.is_moe else [1]
    chunks = []
    for tp, pp, cp in itertools.product(divs, divs, divs):
        if num_gpus % (tp * pp * cp) or tp > model.heads or pp > model.layers or cp > seq_len:
            continue
        dp = num_gpus // (tp * pp * cp)
        vps = [v for v in range(1, max_vp + 1) if v == 1 or pp > 1]
        grid = np.array(list(itertools.product(vps, eps, micro_batches, range(len(recomputes)), zero_stages)))
        n = len(grid)
        chunks.append(
            {
                "tp": np.full(n, tp),
                "pp": np.full(n, pp),
                "cp": np.full(n, cp),
                "dp": np.full(n, dp),
                "vp": grid[:, 0],
                "ep": grid[:, 1],
                "mb": grid[:, 2],
                "rc": np.array([RECOMPUTE_CODE[recomputes[i]] for i in grid[:, 3]]),
                "zero": grid[:, 4],
                "sp": np.full(n, int(tp > 1)),
            }
        )
    return chunks


def search_training(
    model: ModelSpec | str,
    hardware: Hardware | str,
    num_gpus: int,
    *,
    seq_len: int,
    global_batch: int,
    precision: str = "bf16",
    software: Stack | str = "megatron-core",
    calibration: Calibration | None = None,
    top_k: int = 5,
    max_vp: int = 8,
    micro_batches: tuple[int, ...] = MICRO_BATCHES,
    recomputes: tuple[str, ...] = RECOMPUTES,
    zero_stages: tuple[int, ...] = ZERO_STAGES,
    progress: Callable[[int, int], None] | None = None,
) -> SearchResult:
    """Search all layouts of `num_gpus` GPUs for the fastest step (see the module docstring).

    `progress(done, total)` is called after each (tp, pp, cp) chunk (the CLI draws a bar with it).
    Raises ValueError for bad input (unknown names, num_gpus < 1, a precision the GPU lacks).
    """
    t0 = time.perf_counter()
    model = load_model(model) if isinstance(model, str) else model
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    prec = get_precision(precision)
    sw = stack(software) if isinstance(software, str) else software
    cal = calibration or load_calibration()
    if num_gpus < 1 or seq_len < 1 or global_batch < 1:
        raise ValueError(
            f"num_gpus, seq_len and global_batch must be >= 1, got {num_gpus}, {seq_len}, {global_batch}"
        )
    unsupported = check_supported(prec, hw)
    if unsupported:
        raise ValueError(unsupported)
    if not sw.interleaving:
        max_vp = 1
    chunks = enumerate_plans(
        model,
        num_gpus,
        seq_len=seq_len,
        max_vp=max_vp,
        micro_batches=micro_batches,
        recomputes=recomputes,
        zero_stages=zero_stages,
    )
    rejected = {r.key: 0 for r in RULES} | {"tp_domain": 0, "memory": 0}
    evaluated = valid_n = fits_n = 0
    best_step: list[np.ndarray] = []
    best_plans: list[dict[str, np.ndarray]] = []
    keep = max(top_k, 1) * 4
    for i, x in enumerate(chunks):
        n = len(x["tp"])
        evaluated += n
        masks = rule_masks(
            model, seq_len, global_batch, {k: x[k] for k in ("tp", "pp", "vp", "dp", "cp", "ep", "mb")}
        )
        masks["tp_domain"] = x["tp"] > hw.placement_domain
        bad = np.zeros(n, dtype=bool)
        for key, mask in masks.items():
            rejected[key] += int(np.count_nonzero(mask & ~bad))
            bad |= mask
        ok = ~bad
        valid_n += int(np.count_nonzero(ok))
        if np.any(ok):
            y = {k: v[ok] for k, v in x.items()}
            mem = plan_memory(
                model, hw, precision=prec, software=sw, seq_len=seq_len, global_batch=global_batch, **y
            )["memory_B"]
            fit = mem <= hw.hbm_bytes
            rejected["memory"] += int(np.count_nonzero(~fit))
            fits_n += int(np.count_nonzero(fit))
            if np.any(fit):
                z = {k: v[fit] for k, v in y.items()}
                step = plan_times(
                    model,
                    hw,
                    precision=prec,
                    software=sw,
                    calibration=cal,
                    seq_len=seq_len,
                    global_batch=global_batch,
                    **z,
                )["step_s"]
                order = np.argsort(step, kind="stable")[:keep]
                best_step.append(step[order])
                best_plans.append({k: v[order] for k, v in z.items()})
        if progress is not None:
            progress(i + 1, len(chunks))
    top: list[TrainingEstimate] = []
    if best_step:
        steps = np.concatenate(best_step)
        plans = {k: np.concatenate([p[k] for p in best_plans]) for k in best_plans[0]}
        for j in np.argsort(steps, kind="stable")[:top_k]:
            lay = Layout(
                tp=int(plans["tp"][j]),
                pp=int(plans["pp"][j]),
                dp=int(plans["dp"][j]),
                cp=int(plans["cp"][j]),
                ep=int(plans["ep"][j]),
                vp=int(plans["vp"][j]),
                sp=bool(plans["sp"][j]),
                micro_batch=int(plans["mb"][j]),
                recompute=CODE_RECOMPUTE[int(plans["rc"][j])],
                zero=int(plans["zero"][j]),
            )
            top.append(
                estimate_training(
                    model,
                    hw,
                    lay,
                    seq_len=seq_len,
                    global_batch=global_batch,
                    precision=prec.name,
                    software=sw,
                    calibration=cal,
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


def _layout(x: dict[str, np.ndarray], j: int) -> Layout:
    return Layout(
        tp=int(x["tp"][j]),
        pp=int(x["pp"][j]),
        dp=int(x["dp"][j]),
        cp=int(x["cp"][j]),
        ep=int(x["ep"][j]),
        vp=int(x["vp"][j]),
        sp=bool(x["sp"][j]),
        micro_batch=int(x["mb"][j]),
        recompute=CODE_RECOMPUTE[int(x["rc"][j])],
        zero=int(x["zero"][j]),
    )


def search_training_reference(
    model: ModelSpec | str,
    hardware: Hardware | str,
    num_gpus: int,
    *,
    seq_len: int,
    global_batch: int,
    precision: str = "bf16",
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
    model = load_model(model) if isinstance(model, str) else model
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    prec = get_precision(precision)
    sw = stack(software) if isinstance(software, str) else software
    cal = calibration or load_calibration()
    unsupported = check_supported(prec, hw)
    if unsupported:
        raise ValueError(unsupported)
    if not sw.interleaving:
        max_vp = 1
    chunks = enumerate_plans(
        model,
        num_gpus,
        seq_len=seq_len,
        max_vp=max_vp,
        micro_batches=micro_batches,
        recomputes=recomputes,
        zero_stages=zero_stages,
    )
    rejected = {r.key: 0 for r in RULES} | {"tp_domain": 0, "memory": 0}
    evaluated = valid_n = fits_n = 0
    ranked: list[tuple[float, int, TrainingEstimate]] = []
    for i, x in enumerate(chunks):
        for j in range(len(x["tp"])):
            evaluated += 1
            lay = _layout(x, j)
            one = {k: np.asarray(x[k][j]) for k in ("tp", "pp", "vp", "dp", "cp", "ep", "mb")}
            broken = [r.key for r in RULES if bool(r.bad(model, seq_len, global_batch, one))]
            if lay.tp > hw.placement_domain:
                broken.append("tp_domain")
            if broken:
                rejected[broken[0]] += 1
                continue
            valid_n += 1
            est = estimate_training(
                model,
                hw,
                lay,
                seq_len=seq_len,
                global_batch=global_batch,
                precision=prec.name,
                software=sw,
                calibration=cal,
            )
            if not est.feasible:
                rejected["memory"] += 1
                continue
            fits_n += 1
            ranked.append((est.step_time_s, evaluated, est))
        if progress is not None:
            progress(i + 1, len(chunks))
    ranked.sort(key=lambda r: (r[0], r[1]))
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
