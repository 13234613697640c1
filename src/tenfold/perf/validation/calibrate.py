"""Calibrating the training model on a user's own measured runs (`tenfold calibrate training`).

The runs are a CSV in the shipped validation schema (docs/validation.md). Every row must be predictable
(`load_user_cases` raises ValueError naming the row and the reason otherwise). The fit then:

1. Identification. Each free parameter of the start calibration (the shipped fit by default) is moved by
   ±0.2 of its physical range (0.2 in the normalised coordinate p = (v - lo) / (hi - lo) that the fit's
   logit transform acts on; clipped to the range, so a parameter at a bound is moved inwards only). A
   parameter that changes no row's prediction by more than `IDENTIFY_TOL` (0.1 %) is unidentified: the
   rows carry no information about it (a Blackwell GEMM efficiency for Hopper rows, the MoE dispatch
   overhead for dense runs), so it keeps the start value and is listed in the warnings and in the
   written file's [fit] fixed_parameters.
2. Under-determination. With fewer rows than identified parameters, only as many parameters as there are
   rows are fitted: those whose moves change the predictions most (sum over rows of the relative change),
   the rest are held at the start value and listed (also under fixed_parameters). A handful of rows then
   moves the few efficiencies they actually measure instead of spreading an error over all of them.
3. The fit itself is `fit_calibration` (Nelder-Mead on the reliability-weighted, capped MAPE) over the
   chosen parameters, starting from the start calibration.
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
from tenfold.perf.validation.fit import fit_calibration
from tenfold.perf.validation.rows import read_rows
from tenfold.perf.validation.training import REQUIRED, TrainingCase, case_from_row, predict_case

IDENTIFY_TOL = 1e-3
"""A parameter is identified when moving it changes some row's prediction by more than this fraction."""
USER_ERROR_CAP = 2.0
"""Each row's error is capped at 200 % in the objective (the shipped fit caps at 50 % against outliers among
published runs; a user's own rows of one stack may all start beyond 50 %, and a cap they all sit above
leaves the fit free to make them worse)."""
IDENTIFY_STEP = 0.2
"""How far each parameter is moved to test identification, as a fraction of its physical range."""


def load_user_cases(path: str | Path) -> list[TrainingCase]:
    """Every row of a user's runs CSV as a predictable TrainingCase. ValueError naming each bad row (its id,
    or its line number when the id is empty) and why: a missing column or empty cell, an unknown GPU, a
    layout whose TP·PP·DP·CP is not num_gpus, a value that is not a positive number, ..."""
    rows = read_rows(path, REQUIRED)
    if not rows:
        raise ValueError("the file has no rows")
    shipped = load_calibration()
    cases, bad = [], []
    for i, row in enumerate(rows):
        rid = (row.get("id") or "").strip() or f"line {i + 2}"
        try:
            case = case_from_row(row)
        except (ValueError, TypeError, ZeroDivisionError) as exc:
            bad.append(f"row {rid}: {exc}")
            continue
        if case.reason:
            bad.append(f"row {rid}: {case.reason}")
        elif not (math.isfinite(case.measured) and case.measured > 0):
            bad.append(f"row {rid}: value must be a positive number, got {row.get('value')!r}")
        elif not math.isfinite(predict_case(case, shipped).predicted):
            bad.append(f"row {rid}: no plan of the row's layout is valid for the model (check the layout)")
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


def sensitivities(cases: list[TrainingCase], cal: Calibration) -> dict[str, np.ndarray]:
    """Free parameter -> per-row largest |relative change of the prediction| when the parameter moves by
    ±IDENTIFY_STEP of its range (module docstring, step 1)."""
    base = np.array([predict_case(c, cal).predicted for c in cases])
    out = {}
    for name in cal.free_names():
        lo, hi = cal.bounds(name)
        p = (parameter_value(cal, name) - lo) / (hi - lo)
        change = np.zeros(len(cases))
        for q in (min(p + IDENTIFY_STEP, 1.0), max(p - IDENTIFY_STEP, 0.0)):
            moved = with_value(cal, name, lo + (hi - lo) * q)
            pred = np.array([predict_case(c, moved).predicted for c in cases])
            change = np.maximum(change, np.abs(pred / base - 1.0))
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


def choose_parameters(
    sens: dict[str, np.ndarray], rows: int
) -> tuple[list[str], list[str], list[str], list[str]]:
    """(fitted, unidentified, held, warnings) from the sensitivities (module docstring, steps 1-2)."""
    unidentified = [n for n, s in sens.items() if float(np.max(s, initial=0.0)) <= IDENTIFY_TOL]
    identified = sorted((n for n in sens if n not in unidentified), key=lambda n: -float(np.sum(sens[n])))
    keep = len(identified) if rows >= len(identified) else max(1, rows // 2)
    fitted, held = identified[:keep], identified[keep:]
    warnings = []
    if unidentified:
        warnings.append(
            f"{len(unidentified)} parameter(s) cannot be identified from these rows (moving each by "
            f"{IDENTIFY_STEP:.0%} of its range changes no prediction by more than {IDENTIFY_TOL:.1%}); "
            f"kept at the start value: {', '.join(unidentified)}"
        )
    if held:
        warnings.append(
            f"under-determined: {rows} row(s) for {len(identified)} identified parameters; fitted only the "
            f"{len(fitted)} most sensitive ({', '.join(fitted)}), kept at the start value: {', '.join(held)}"
        )
    if not fitted:
        warnings.append("no parameter is identified by these rows: the calibration is the start one")
    return fitted, unidentified, held, warnings


def calibrate_on_runs(
    cases: list[TrainingCase],
    *,
    start: Calibration | None = None,
    iters: int = 300,
    restarts: int = 2,
    source: str = "",
    start_label: str = "the shipped calibration (tenfold/data/calibration/training.toml)",
    progress: Callable[[int, int], None] | None = None,
) -> CalibrationResult:
    """Fit the parameters these rows identify (module docstring), starting from `start` (default: the
    shipped calibration). `source` (the runs file's name) is recorded in the result's [fit] section."""
    start = start or load_calibration()
    start = replace(start, fit=MappingProxyType({}))
    sens = sensitivities(cases, start)
    fitted_names, unidentified, _, warnings = choose_parameters(sens, len(cases))
    fixed = [n for n in start.free_names() if n not in fitted_names]
    held_start = replace(start, fit=MappingProxyType({"fixed_parameters": fixed}))
    if fitted_names:
        cal = fit_calibration(
            cases,
            start=held_start,
            iters=iters,
            restarts=restarts,
            progress=progress,
            error_cap=USER_ERROR_CAP,
        )
    else:
        cal = held_start
    info = dict(cal.fit) | {
        "rows": len(cases),
        "date": datetime.date.today().isoformat(),
        "source": source,
        "start": start_label,
        "fixed_parameters": fixed,
        "unidentified_parameters": unidentified,
    }
    cal = replace(cal, fit=MappingProxyType(info))
    rows = tuple(
        RowFit(
            id=c.id,
            metric=c.metric,
            measured=c.measured,
            before=predict_case(c, start).error,
            after=predict_case(c, cal).error,
        )
        for c in cases
    )
    status = {n: "fitted" for n in fitted_names} | {n: "unidentified" for n in unidentified}
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
