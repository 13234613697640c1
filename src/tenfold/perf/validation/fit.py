"""Fitting the calibration's free parameters on published runs, and measuring how well the fit generalises.

`fit_calibration()` minimises the reliability-weighted mean absolute percentage error over the shipped
validation rows with a Nelder-Mead search on transformed parameters (logit for fractions, log for the
overhead); `leave_one_out()` refits without each row in turn and predicts it. The parameters and their
physical bounds are documented in `tenfold.perf.calibration`.

Run `python -m tenfold.perf.validation.fit --kind inference --write` to refit the serving calibration. The
shipped training calibration is refitted by `python -m tenfold.perf.validation.crossval --write`, which also
cross-validates the fit by source and stores the uncertainty and the CV table the tests check against.
"""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import numpy as np

from tenfold.perf.calibration import (
    KINDS,
    Calibration,
    calibration_kind,
    calibration_to_toml,
    load_calibration,
)
from tenfold.perf.specs.catalog import data_dir
from tenfold.perf.validation import serving, training

RELIABILITY_WEIGHT = {"high": 1.0, "medium": 0.5, "low": 0.25}
ERROR_CAP = 0.5
TIE_SCALE = (0.5, 1.2)
"""Range of the shared scale on tied GEMM efficiencies (training realises 50-120 % of a kernel table)."""


def nelder_mead(
    f,
    x0: np.ndarray,
    *,
    step: float = 0.3,
    iters: int = 600,
    tol: float = 1e-6,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Minimise f from x0 (Nelder & Mead 1965, standard coefficients). Plain and dependency-free.
    `progress(i)` is called after iteration i (for a progress bar)."""
    n = len(x0)
    simplex = [x0.astype(float)] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    for it in range(iters):
        if progress is not None:
            progress(it)
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        xr = centroid + (centroid - simplex[-1])
        fr = f(xr)
        if fr < values[0]:
            xe = centroid + 2.0 * (centroid - simplex[-1])
            fe = f(xe)
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(xc)
            if fc < values[-1]:
                simplex[-1], values[-1] = xc, fc
            else:
                best = simplex[0]
                simplex = [best] + [best + 0.5 * (x - best) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    return simplex[int(np.argmin(values))]


def validator(kind: str):
    """The validation module whose `load_cases` / `predict_case` / `case_group` a fit of this kind uses."""
    calibration_kind(kind)
    return serving if kind == "inference" else training


def fit_calibration(
    cases=None,
    *,
    start: Calibration | None = None,
    iters: int = 600,
    restarts: int = 2,
    exclude: frozenset[str] = frozenset(),
    kind: str = "training",
    progress: Callable[[int, int], None] | None = None,
    prior: Calibration | None = None,
    penalty: float = 0.0,
    tie: Mapping[str, float] | None = None,
    error_cap: float = ERROR_CAP,
    weights: Mapping[str, float] | None = None,
) -> Calibration:
    """Fit the free parameters on validation cases (default: the shipped rows), leaving out `exclude` ids.

    Objective: reliability-weighted mean |predicted/measured - 1| over the rows that can be predicted,
    each row's error capped at `ERROR_CAP` so that one unexplained outlier cannot move every efficiency.
    `kind` picks the model: "training" (training_runs.csv) or "inference" (inference_runs.csv).
    `progress(done, total)` is called as the search advances (iterations over all restarts).
    Only rows whose split is "fit" are fitted on ("holdout" and "defect" rows never are). With a `prior`
    (a calibration of physical defaults, e.g. measured kernel efficiencies) the objective adds `penalty` x
    the mean squared distance of the free parameters from the prior's in their transformed (logit) space,
    so a parameter the rows barely constrain stays near the prior instead of absorbing noise; `start`
    defaults to the prior when one is given.
    `tie` (GEMM key -> reference efficiency, e.g. measured kernel tables) replaces those keys' free
    efficiencies by one shared scale: each = reference x scale, so the data fit one number (how much of a
    micro-benchmark a training step realises) and the measurements carry the differences between GPUs
    and formats.
    `error_cap` replaces ERROR_CAP (a user's few rows of one stack may all start beyond 50 %).
    `weights` (reliability -> weight) replaces RELIABILITY_WEIGHT: all 1.0 makes the objective the plain
    in-sample MAPE that `tenfold validate training` reports.
    """
    validate = validator(kind)
    cases = validate.load_cases() if cases is None else cases
    cases = [c for c in cases if c.reason == "" and c.id not in exclude and c.split == "fit"]
    start = start or prior or load_calibration(kind=kind)
    tied = sorted(k for k in (tie or {}) if k in start.gemm_efficiency)
    own_fixed = tuple(start.fit.get("fixed_parameters", ()))
    base = replace(
        start,
        fit=MappingProxyType(
            dict(start.fit) | {"fixed_parameters": own_fixed + tuple(f"gemm:{k}" for k in tied)}
        ),
    )
    lo, hi = start.GEMM_BOUNDS

    def build(x: np.ndarray) -> Calibration:
        if not tied:
            return base.from_vector(x)
        cal = base.from_vector(x[1:])
        scale = TIE_SCALE[0] + (TIE_SCALE[1] - TIE_SCALE[0]) / (1.0 + np.exp(-x[0]))
        gemm = dict(cal.gemm_efficiency) | {k: float(np.clip(tie[k] * scale, lo, hi)) for k in tied}
        return replace(cal, gemm_efficiency=MappingProxyType(gemm))

    x0 = base.to_vector() if not tied else np.concatenate([[0.0], base.to_vector()])
    anchor = None
    if prior is not None:
        anchor = replace(prior, fit=base.fit).to_vector()
        anchor = anchor if not tied else np.concatenate([[x0[0]], anchor])
    by_reliability = RELIABILITY_WEIGHT if weights is None else weights
    row_weights = np.array([by_reliability.get(c.reliability, 0.5) for c in cases])

    def data_term(x: np.ndarray) -> float:
        cal = build(x)
        errs = np.array([abs(validate.predict_case(c, cal).error) for c in cases])
        errs = np.minimum(np.where(np.isfinite(errs), errs, error_cap), error_cap)
        return float(np.sum(row_weights * errs) / np.sum(row_weights))

    def objective(x: np.ndarray) -> float:
        if anchor is None or penalty <= 0:
            return data_term(x)
        return data_term(x) + penalty * float(np.mean((x - anchor) ** 2))

    x = x0
    for r in range(restarts):
        tick = None if progress is None else (lambda i, r=r: progress(r * iters + i + 1, restarts * iters))
        x = nelder_mead(objective, x, iters=iters, progress=tick)
    fitted = build(x)
    info = dict(start.fit) | {
        "rows": len(cases),
        "objective_value": round(data_term(x), 5),
        "date": datetime.date.today().isoformat(),
        "objective": (
            "reliability-weighted MAPE"
            if weights is None
            else f"MAPE weighted {dict(weights)} by reliability"
        )
        + f", errors capped at {error_cap:.0%}",
    }
    if tied:
        info["gemm_tied"] = tied
        info["gemm_tied_scale"] = round(float(build(x).gemm_efficiency[tied[0]] / tie[tied[0]]), 4)
    return replace(fitted, fit=MappingProxyType(info))


def leave_one_out(
    cases=None, *, start: Calibration | None = None, iters: int = 250, kind: str = "training"
) -> dict[str, float]:
    """Refit without each row and predict it: id -> held-out signed error (predicted/measured - 1)."""
    validate = validator(kind)
    cases = validate.load_cases() if cases is None else cases
    start = start or load_calibration(kind=kind)
    out = {}
    for c in cases:
        if c.reason:
            continue
        cal = fit_calibration(
            cases, start=start, iters=iters, restarts=1, exclude=frozenset({c.id}), kind=kind
        )
        out[c.id] = validate.predict_case(c, cal).error
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Refit a calibration on the shipped validation rows.")
    ap.add_argument("--kind", choices=list(KINDS), default="training")
    ap.add_argument("--write", action="store_true", help="rewrite tenfold/data/calibration/<kind>.toml")
    ap.add_argument("--iters", type=int, default=600)
    ap.add_argument("--loo", action="store_true", help="also report leave-one-out errors")
    args = ap.parse_args(argv)
    cal = fit_calibration(iters=args.iters, kind=args.kind)
    runs = "training_runs.csv" if args.kind == "training" else "inference_runs.csv"
    header = (
        f"Fitted by `python -m tenfold.perf.validation.fit --kind {args.kind} --write`\n"
        f"(tenfold.perf.validation.fit.fit_calibration) on tenfold/data/validation/{runs};\n"
        "see the module docstring for what each value means and BOUNDS for each one's physical range."
    )
    text = calibration_to_toml(cal, header=header)
    print(text)
    if args.write:
        target = Path(str(data_dir("calibration") / calibration_kind(args.kind).FILE))
        target.write_text(text)
        print(f"wrote {target}")
    if args.loo:
        errs = leave_one_out(start=cal, kind=args.kind)
        for k, v in errs.items():
            print(f"{k:45s} {v * 100:+7.1f} %")
        print(f"leave-one-out MAPE {np.mean(np.abs(list(errs.values()))) * 100:.2f} % over {len(errs)} rows")


if __name__ == "__main__":
    main()
