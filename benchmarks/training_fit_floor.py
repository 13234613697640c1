"""How low can the training model's in-sample error go? The floor of its 16 parameters on the shipped rows.

Issue 15 asks for in-sample MAPE <= 6 % on the fitted rows. The shipped calibration is fitted for
generalisation (reliability weights, each row's error capped at 50 %, shrinkage toward physical values),
so its in-sample error is not the lowest the model can reach. This benchmark asks the model's structure
the plain question: fitted to minimise exactly the in-sample MAPE that `tenfold validate training` reports
(every row weight 1, no cap, no shrinkage), starting from the shipped values, how low does it go, and what
happens to the rows it never sees (the hold-out)? If that floor is above 6 %, no choice of the parameters
meets the target; only a change to what the model represents can.

Two optimisers, side by side: the project's Nelder-Mead (`fit_calibration`) and scipy's Powell in the
same coordinates (`Calibration.to_vector`); about 8 and 18 minutes on one core of a 2-core machine.

    python benchmarks/training_fit_floor.py [--iters 600] [--powell-evals 2500] [--no-powell]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.optimize import minimize

from tenfold.perf.calibration import Calibration, load_calibration
from tenfold.perf.validation.calibrate import parameter_value
from tenfold.perf.validation.fit import fit_calibration
from tenfold.perf.validation.training import TrainingCase, load_cases, predict_case, validate_training

EQUAL = {"high": 1.0, "medium": 1.0, "low": 1.0}
NO_CAP = 10.0  # a 1000 % error: no row reaches it, so nothing is capped


def powell(start: Calibration, rows: list[TrainingCase], evals: int) -> Calibration:
    """scipy's Powell on the plain in-sample MAPE (rows that cannot be predicted count as `NO_CAP`)."""

    def mape(x: np.ndarray) -> float:
        cal = start.from_vector(x)
        errs = np.array([abs(predict_case(c, cal).error) for c in rows])
        return float(np.mean(np.where(np.isfinite(errs), errs, NO_CAP)))

    result = minimize(
        mape,
        start.to_vector(),
        method="Powell",
        options={"maxfev": evals, "xtol": 1e-3, "ftol": 1e-5},
    )
    return start.from_vector(result.x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=600, help="Nelder-Mead iterations per restart (2 restarts)")
    ap.add_argument("--powell-evals", type=int, default=2500)
    ap.add_argument("--no-powell", action="store_true")
    args = ap.parse_args()

    cases = load_cases()
    fit_rows = [c for c in cases if c.split == "fit" and not c.reason]
    hold = [c for c in cases if c.split == "holdout" and not c.reason]
    shipped = load_calibration()
    cals = {"shipped (fitted for generalisation)": shipped}

    t0 = time.time()
    cals["floor, Nelder-Mead"] = fit_calibration(
        cases,
        start=shipped,
        iters=args.iters,
        weights=EQUAL,
        error_cap=NO_CAP,
        progress=lambda i, n: (
            print(f"  [Nelder-Mead {time.time() - t0:5.0f} s] {i}/{n}", flush=True) if i % 100 == 0 else None
        ),
    )
    if not args.no_powell:
        t0 = time.time()
        print(f"  [Powell] up to {args.powell_evals} evaluations", flush=True)
        cals["floor, Powell"] = powell(shipped, fit_rows, args.powell_evals)
        print(f"  [Powell {time.time() - t0:5.0f} s] done", flush=True)

    # scored as `tenfold validate training` scores them
    scores = {label: validate_training(calibration=cal).mape_by_split for label, cal in cals.items()}
    print(f"\n{len(fit_rows)} fit rows, {len(hold)} hold-out rows; target in-sample MAPE <= 6 %\n")
    print(f"{'calibration':38s} {'in-sample MAPE':>15s} {'hold-out MAPE':>14s}")
    for label, by_split in scores.items():
        print(f"{label:38s} {by_split['fit']:15.2%} {by_split['holdout']:14.2%}")

    names = shipped.free_names()
    print("\nparameters that moved by more than 5 % from the shipped values:")
    base = {n: parameter_value(shipped, n) for n in names}
    for label, cal in list(cals.items())[1:]:
        now = {n: parameter_value(cal, n) for n in names}
        moved = [
            f"{n} {base[n]:.3g} -> {now[n]:.3g}" for n in names if abs(now[n] - base[n]) > 0.05 * abs(base[n])
        ]
        print(f"  {label}: " + ("; ".join(moved) or "none"))

    floor = min(list(cals)[1:], key=lambda label: scores[label]["fit"])
    print(f"\nlargest in-sample errors at the lower floor ({floor}):")
    errs = sorted(((predict_case(c, cals[floor]).error, c.id) for c in fit_rows), key=lambda e: -abs(e[0]))
    for err, row in errs[:10]:
        print(f"  {err:+7.1%}  {row}")


if __name__ == "__main__":
    main()
