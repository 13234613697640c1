"""Calibrating the training or serving model on a user's own measured runs (`tenfold calibrate training`,
`tenfold calibrate inference`).

The runs are a CSV in the shipped validation schema of the kind (docs/validation.md). Every function takes
`kind` ("training" or "inference"): the rows, their predictor and the calibration's parameters are the
kind's (`fit.validator`); the procedure is one. Every row must be predictable
(`load_user_cases` raises ValueError naming the row and the reason otherwise). The fit then:

1. Identification. Each free parameter of the start calibration (the shipped fit by default) is moved by
   ±0.2 of its physical range (0.2 in the normalised coordinate p = (v - lo) / (hi - lo) that the fit's
   logit transform acts on; clipped to the range, so a parameter at a bound is moved inwards only). A
   parameter that changes no row's prediction by more than `IDENTIFY_TOL` (0.1 %) is unidentified: the
   rows carry no information about it (a Blackwell GEMM efficiency for Hopper rows, the MoE dispatch
   overhead for dense runs), so it keeps the start value and is listed in the warnings and in the
   written file's [fit] fixed_parameters.
2. Under-determination. With fewer rows than identified parameters, at most half as many parameters as
   there are rows may be fitted (at least one): those whose moves change the predictions most (sum over
   rows of the relative change). The rest keep the start value and are listed (also under
   fixed_parameters).
3. How many to fit, by a held-out check on the user's own rows: for 0 (the start calibration), 1, 2, 4, ...
   up to that maximum, each row is predicted by a fit made without it (leave one out; 5 interleaved
   folds beyond 5 rows), and the fewest parameters within half a point of the best held-out MAPE win.
   Rows that disagree with one another (a table mixing GPUs, precisions, dense and MoE models, whose errors
   are the model's, not a shared efficiency's) then leave the start calibration alone rather than bend it
   to a handful of rows: in `benchmarks/calibrate_own_stack.py` (2026-12-03, when the check was added)
   fitting 4 Megatron-Bridge rows without this check made the stack's other rows worse (11.7 % -> 13.0 %
   MAPE), with it they stayed at 11.7 %. Today's figures per stack are in docs/perf.md.
4. The fit itself is `fit_calibration` (Nelder-Mead on the reliability-weighted MAPE, errors capped at
   `USER_ERROR_CAP`) over the chosen parameters, starting from the start calibration.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

import numpy as np

from tenfold.perf.calibration import Calibration, load_calibration
from tenfold.perf.validation.fit import fit_calibration, validator
from tenfold.perf.validation.rows import read_rows
from tenfold.perf.validation.serving import ServingCase
from tenfold.perf.validation.training import TrainingCase

Case = TrainingCase | ServingCase

IDENTIFY_TOL = 1e-3
"""A parameter is identified when moving it changes some row's prediction by more than this fraction."""
USER_ERROR_CAP = 2.0
"""Each row's error is capped at 200 % in the objective (the shipped fit caps at 50 % against outliers among
published runs; a user's own rows of one stack may all start beyond 50 %, and a cap they all sit above
leaves the fit free to make them worse)."""
FOLDS = 5
"""The cross-check leaves one row out up to this many rows, else uses this many folds."""
IDENTIFY_STEP = 0.2
"""How far each parameter is moved to test identification, as a fraction of its physical range."""
WIDE_RANGE = 1.2
"""A row whose unstated fields (micro-batch, VP, recompute, FLOP count) move its prediction by more than
this factor (the top of its range over the options, over the bottom) is scored at the midpoint; the
report names it, since such a row pins the parameters only loosely."""


def load_user_cases(path: str | Path, *, kind: str = "training") -> list[Case]:
    """Every row of a user's runs CSV as a predictable case of `kind`. ValueError naming each bad row (its id,
    or its line number when the id is empty) and why: a missing column or empty cell, an unknown GPU, a
    layout whose TP·PP·DP·CP is not num_gpus, a value that is not a positive number, a deployment that does
    not fit, ..."""
    v = validator(kind)
    rows = read_rows(path, v.REQUIRED)
    if not rows:
        raise ValueError("the file has no rows")
    shipped = load_calibration(kind=kind)
    cases, bad = [], []
    for i, row in enumerate(rows):
        rid = (row.get("id") or "").strip() or f"line {i + 2}"
        try:
            case = v.case_from_row(row)
        except (ValueError, TypeError, ZeroDivisionError) as exc:
            bad.append(f"row {rid}: {exc}")
            continue
        if case.reason:
            bad.append(f"row {rid}: {case.reason}")
        elif not (math.isfinite(case.measured) and case.measured > 0):
            bad.append(f"row {rid}: value must be a positive number, got {row.get('value')!r}")
        elif not math.isfinite((res := v.predict_case(case, shipped)).predicted):
            bad.append(f"row {rid}: the row's layout cannot run the model ({res.layout})")
        else:
            cases.append(case)
    if bad:
        more = f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""
        raise ValueError("; ".join(bad[:5]) + more)
    ids = [c.id for c in cases]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"row ids repeat: {', '.join(dup)}")
    return cases


def parameter_value(cal: Calibration, name: str) -> float:
    """The value of a free parameter by its `free_names()` name ("gemm:hopper/8", "hbm_efficiency")."""
    return cal.gemm_efficiency[name[5:]] if name.startswith("gemm:") else float(getattr(cal, name))


def with_value(cal: Calibration, name: str, value: float) -> Calibration:
    """`cal` with one free parameter set to `value`."""
    if name.startswith("gemm:"):
        return replace(cal, gemm_efficiency=MappingProxyType(dict(cal.gemm_efficiency) | {name[5:]: value}))
    return replace(cal, **{name: value})


def sensitivities(cases: list[Case], cal: Calibration, *, kind: str = "training") -> dict[str, np.ndarray]:
    """Free parameter -> per-row largest |relative change of the prediction| when the parameter moves by
    ±IDENTIFY_STEP of its range (module docstring, step 1)."""
    predict_case = validator(kind).predict_case
    base = np.array([predict_case(c, cal).predicted for c in cases])
    out = {}
    for name in cal.free_names():
        lo, hi = cal.bounds(name)
        p = (parameter_value(cal, name) - lo) / (hi - lo)
        change = np.zeros(len(cases))
        for q in (min(p + IDENTIFY_STEP, 1.0), max(p - IDENTIFY_STEP, 0.0)):
            moved = with_value(cal, name, lo + (hi - lo) * q)
            pred = np.array([predict_case(c, moved).predicted for c in cases])
            change = np.maximum(change, np.nan_to_num(np.abs(pred / base - 1.0)))
        out[name] = change
    return out


@dataclass(frozen=True, kw_only=True)
class RowFit:
    """One row: measured value and the signed error (predicted / measured - 1) before and after the fit."""

    id: str
    metric: str
    measured: float
    before: float
    after: float


@dataclass(frozen=True, kw_only=True)
class ParameterFit:
    """One free parameter: start and fitted value, and what the fit did with it (fitted, unidentified:
    the rows do not move it, held: identified but left out because the rows are too few)."""

    name: str
    start: float
    fitted: float
    status: str
    sensitivity: float


@dataclass(frozen=True, kw_only=True)
class CalibrationResult:
    """The fitted calibration, the per-row and per-parameter report, and the warnings."""

    calibration: Calibration
    rows: tuple[RowFit, ...]
    parameters: tuple[ParameterFit, ...]
    warnings: tuple[str, ...]

    @property
    def mape_before(self) -> float:
        return float(np.mean([abs(r.before) for r in self.rows]))

    @property
    def mape_after(self) -> float:
        return float(np.mean([abs(r.after) for r in self.rows]))

    def to_dict(self) -> dict:
        return {
            "rows": [r.__dict__ for r in self.rows],
            "parameters": [p.__dict__ for p in self.parameters],
            "warnings": list(self.warnings),
            "mape": {"before": self.mape_before, "after": self.mape_after, "rows": len(self.rows)},
            "fit": dict(self.calibration.fit),
        }


def rank_parameters(sens: dict[str, np.ndarray]) -> tuple[list[str], list[str]]:
    """(identified parameters, most sensitive first; unidentified ones) from the sensitivities (module
    docstring, step 1). Sensitivity = sum over rows of the relative change of the prediction."""
    unidentified = [n for n, s in sens.items() if float(np.max(s, initial=0.0)) <= IDENTIFY_TOL]
    ranked = sorted((n for n in sens if n not in unidentified), key=lambda n: -float(np.sum(sens[n])))
    return ranked, unidentified


def max_parameters(rows: int, identified: int) -> int:
    """The most parameters `rows` rows may fit (module docstring, step 2): all identified ones when the rows
    are at least as many, else half as many as the rows (at least one)."""
    return identified if rows >= identified else min(identified, max(1, rows // 2))


SHARED_SCALE = 0.5
"""The one-parameter candidate that moves every GEMM efficiency by one shared factor (how much faster or
slower your stack's kernels run than the published average), keeping the published ratios between GPUs and
formats; ranked between keeping the start values (0) and one free parameter (1)."""


def candidate_counts(most: int) -> list[float]:
    """Parameter counts the cross-check tries: 0 (the start calibration), the shared GEMM scale, powers of
    two, and `most`."""
    return sorted({0, SHARED_SCALE, most} | {2**i for i in range(8) if 2**i < most})


def fit_top(
    cases: list[Case],
    start: Calibration,
    count: float,
    *,
    iters: int,
    restarts: int,
    progress: Callable[[int, int], None] | None = None,
    kind: str = "training",
) -> tuple[Calibration, list[str]]:
    """`start` with its `count` most sensitive parameters (on `cases`) fitted to `cases`, and their names
    (count = SHARED_SCALE: one factor on every GEMM efficiency)."""
    fit = dict(iters=iters, restarts=restarts, progress=progress, error_cap=USER_ERROR_CAP, kind=kind)
    if count == SHARED_SCALE:
        held = replace(start, fit=MappingProxyType({"fixed_parameters": start.free_names()}))
        cal = fit_calibration(cases, start=held, tie=dict(start.gemm_efficiency), **fit)
        return cal, [f"gemm:{k}" for k in sorted(start.gemm_efficiency)]
    ranked, _ = rank_parameters(sensitivities(cases, start, kind=kind))
    names = ranked[: min(count, max_parameters(len(cases), len(ranked)))]
    fixed = [n for n in start.free_names() if n not in names]
    held = replace(start, fit=MappingProxyType({"fixed_parameters": fixed}))
    if not names:
        return held, names
    return fit_calibration(cases, start=held, **fit), names


def held_out_errors(
    cases: list[Case],
    start: Calibration,
    counts: list[float],
    *,
    iters: int,
    tick: Callable[[], None],
    kind: str = "training",
) -> dict[float, float]:
    """Parameter count -> MAPE of each row predicted by a fit without it (module docstring, step 3): leave
    one out up to `FOLDS` rows, else `FOLDS` interleaved folds."""
    predict_case = validator(kind).predict_case
    folds = min(len(cases), FOLDS)
    out = {}
    for count in counts:
        errs = []
        for f in range(folds):
            train = [c for i, c in enumerate(cases) if i % folds != f]
            test = [c for i, c in enumerate(cases) if i % folds == f]
            cal = fit_top(train, start, count, iters=iters, restarts=1, kind=kind)[0] if count else start
            errs += [abs(predict_case(c, cal).error) for c in test]
            tick()
        out[count] = float(np.mean(errs))
    return out


def calibrate_on_runs(
    cases: list[Case],
    *,
    start: Calibration | None = None,
    iters: int = 300,
    restarts: int = 2,
    source: str = "",
    start_label: str = "",
    progress: Callable[[int, int], None] | None = None,
    kind: str = "training",
) -> CalibrationResult:
    """Fit what these rows identify and what holds out of sample on them (module docstring), starting from
    `start` (default: the shipped calibration of `kind`). `source` (the runs file's name) goes to the [fit]
    section. `progress(done, total)` counts the cross-check fits, then the final fit's iterations."""
    predict_case = validator(kind).predict_case
    start_label = start_label or f"the shipped calibration (tenfold/data/calibration/{kind}.toml)"
    start = replace(start or load_calibration(kind=kind), fit=MappingProxyType({}))
    # Every row given here is the user's to fit on: a `holdout` or `defect` split (copied from the shipped
    # data's schema) must not make `fit_calibration` drop it.
    cases = [c if c.split == "fit" else replace(c, split="fit") for c in cases]
    sens = sensitivities(cases, start, kind=kind)
    ranked, unidentified = rank_parameters(sens)
    most = max_parameters(len(cases), len(ranked))
    counts = candidate_counts(most) if len(cases) >= 2 and most else [most]
    cv_total = len(counts) * min(len(cases), FOLDS) if len(counts) > 1 else 0
    done = [0]

    def tick() -> None:
        done[0] += 1
        if progress:
            progress(done[0], cv_total + restarts * iters)

    held_out = (
        held_out_errors(cases, start, counts, iters=max(40, iters // 4), tick=tick, kind=kind)
        if cv_total
        else {}
    )
    # fewest parameters within 0.5 point of the best held-out error: do not chase noise with more
    best = min(held_out.values()) if held_out else 0.0
    count = min((k for k, v in held_out.items() if v <= best + 0.005), default=most)
    sub = None if progress is None else (lambda d, t: progress(cv_total + d, cv_total + t))
    cal, fitted = fit_top(cases, start, count, iters=iters, restarts=restarts, progress=sub, kind=kind)
    if progress is not None:
        progress(cv_total + restarts * iters, cv_total + restarts * iters)
    warnings = selection_warnings(len(cases), ranked, unidentified, fitted, most, held_out)
    before = [predict_case(c, start) for c in cases]
    warnings += wide_range_warnings(before)
    warnings += offset_warnings(before, start)
    info = dict(cal.fit) | {
        "rows": len(cases),
        "date": datetime.date.today().isoformat(),
        "source": source,
        "start": start_label,
        "fixed_parameters": [n for n in start.free_names() if n not in fitted],
        "unidentified_parameters": unidentified,
    }
    if held_out:
        info |= {
            "held_out_mape_start": round(held_out[0], 5),
            "held_out_mape_fitted": round(held_out[count], 5),
        }
    cal = replace(cal, fit=MappingProxyType(info))
    rows = tuple(
        RowFit(
            id=c.id,
            metric=c.metric,
            measured=c.measured,
            before=b.error,
            after=predict_case(c, cal).error,
        )
        for c, b in zip(cases, before, strict=True)
    )
    status = {n: "fitted" for n in fitted} | {n: "unidentified" for n in unidentified}
    params = tuple(
        ParameterFit(
            name=n,
            start=parameter_value(start, n),
            fitted=parameter_value(cal, n),
            status=status.get(n, "held"),
            sensitivity=float(np.max(sens[n], initial=0.0)),
        )
        for n in start.free_names()
    )
    return CalibrationResult(calibration=cal, rows=rows, parameters=params, warnings=tuple(warnings))


def wide_range_warnings(results: list) -> list[str]:
    """One warning naming the rows whose prediction is a range wider than WIDE_RANGE (rows of a kind
    whose results carry no `predicted_range` never are)."""
    wide = []
    for r in results:
        span = getattr(r, "predicted_range", None)
        if span and span[0] > 0 and span[1] / span[0] > WIDE_RANGE:
            wide.append(f"{r.id} ({span[1] / span[0]:.2f}x)")
    if not wide:
        return []
    return [
        f"{len(wide)} row(s) leave fields unstated that move their prediction by more than "
        f"{WIDE_RANGE - 1:.0%} (each is scored at the midpoint of its range; stating micro_batch, vp, "
        f"recompute or flops_convention narrows it): {', '.join(wide)}"
    ]


def offset_warnings(results: list, start: Calibration) -> list[str]:
    """One warning when the rows sit, on average, no further from the start calibration's predictions than
    the scatter of one stack's runs explains: |mean log(predicted / measured)| under two standard errors,
    with the start's cross-validated spread per run (`uncertainty.pooled`) as the scatter. In the published
    data such fits made a stack's other runs worse far more often than better (docs/perf.md, "Does it
    help?"); a stack off as a whole (a slower cluster) is what calibration fixes. None without a measured
    uncertainty."""
    if start.uncertainty is None or not results:
        return []
    logs = [math.log(r.predicted / r.measured) for r in results]
    mean, n = sum(logs) / len(logs), len(logs)
    bound = 2 * start.uncertainty.pooled / math.sqrt(n)
    if abs(mean) >= bound:
        return []
    return [
        f"your {n} row(s) sit {math.exp(mean) - 1:+.1%} off the start calibration's predictions on average "
        f"(geometric mean), within the {bound:.0%} that the scatter of one stack's runs explains for {n} "
        f"row(s) (two standard errors; {start.uncertainty.pooled:.0%} per run, cross-validated on published "
        "runs): there is no shared offset to learn, and on published stacks such fits made the other runs "
        "worse more often than better (docs/perf.md); keep the start calibration, or add runs"
    ]


def selection_warnings(
    rows: int,
    ranked: list[str],
    unidentified: list[str],
    fitted: list[str],
    most: int,
    held_out: dict[int, float],
) -> list[str]:
    """What the report warns about: unidentified parameters, an under-determined fit, the cross-check."""
    out = []
    if unidentified:
        out.append(
            f"{len(unidentified)} parameter(s) cannot be identified from these rows (moving each by "
            f"{IDENTIFY_STEP:.0%} of its range changes no prediction by more than {IDENTIFY_TOL:.1%}); "
            f"kept at the start value: {', '.join(unidentified)}"
        )
    if most < len(ranked):
        out.append(
            f"under-determined: {rows} row(s) for {len(ranked)} identified parameters; at most {most} "
            f"(the most sensitive) may be fitted"
        )
    if held_out:
        scores = ", ".join(
            f"{'shared GEMM scale' if k == SHARED_SCALE else k}: {v:.1%}" for k, v in held_out.items()
        )
        out.append(
            f"held-out check (each row predicted by a fit without it or its fold), MAPE by number of fitted "
            f"parameters: "
            f"{scores}; fitted {'one shared GEMM scale' if fitted and len(fitted) > most else len(fitted)}"
        )
        if not fitted:
            out.append(
                "no fit predicted your held-out rows better than the start calibration: the file keeps the "
                "start values (your rows disagree with each other more than any shared efficiency explains)"
            )
    elif rows < 2 and fitted:
        out.append("one row: the fit cannot be cross-checked; treat it with care")
    if not ranked:
        out.append("no parameter is identified by these rows: the calibration is the start one")
    held = [n for n in ranked if n not in fitted]
    if fitted and held:
        out.append(f"kept at the start value (identified but not fitted): {', '.join(held)}")
    return out
