"""Training model accuracy before and after issue 15's fitting procedure, side by side in one run.

Both procedures fit on the shipped rows marked `split = fit` and are scored three ways: in-sample (the rows
they were fitted on), leave-one-source-out cross-validated (each source predicted by a fit without it), and
on the rows marked `holdout` (never fitted on by either):

* before: every "<arch>/<bits>" GEMM efficiency a free parameter (8 of them), started from the committed
  values' physical defaults without shrinkage;
* after: the GEMM efficiencies tied to NVIDIA's measured kernel tables (aiconfigurator-core) through one
  shared scale, the other parameters shrunk toward physical defaults (`crossval.TIED_PENALTY`).

Measured 2026-12-03 on 90 rows: "before" won on cross-validation (14.6 % vs 15.8 %), so the shipped
calibration uses it; on the 50 rows shipped before issue 15 the tie won (13.0 % -> 10.8 %).

Also prints the 80 % interval coverage on the cross-validated rows (target 75-85 %). Takes tens of minutes
on one core (two cross-validations of ~20 folds each). Needs the `measured` extra for "after".

    python benchmarks/training_cv.py [--iters 200] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import time

from tenfold.perf.calibration import load_calibration
from tenfold.perf.validation.crossval import TIED_PENALTY, fit_with_uncertainty
from tenfold.perf.validation.cvresults import summary
from tenfold.perf.validation.training import load_cases, predict_case


def run(label: str, *, tie: bool, penalty: float, iters: int, workers: int) -> dict[str, float]:
    t0 = time.time()
    cases = load_cases()
    cal, rows = fit_with_uncertainty(
        cases,
        template=load_calibration(),
        penalty=penalty,
        iters=iters,
        tie=tie,
        workers=workers,
        progress=lambda s: print(f"  [{label} {time.time() - t0:5.0f} s] without {s}", flush=True),
    )
    scored = {c.id: predict_case(c, cal) for c in cases if not c.reason}
    fit = [r for r in scored.values() if r.split == "fit"]
    hold = [r for r in scored.values() if r.split == "holdout"]
    cv = summary(rows)

    def mape(rs: list) -> float:
        return sum(abs(r.error) for r in rs) / len(rs) if rs else float("nan")

    return {
        "in-sample MAPE": mape(fit),
        "CV MAPE (leave one source out)": cv["mape"],
        "CV 80 % coverage": cv["coverage"],
        "holdout MAPE": mape(hold),
        "fit rows": len(fit),
        "holdout rows": len(hold),
        "seconds": time.time() - t0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    before = run("before", tie=False, penalty=0.0, iters=args.iters, workers=args.workers)
    after = run("after", tie=True, penalty=TIED_PENALTY, iters=args.iters, workers=args.workers)
    print(f"\n{'':34s} {'before':>10s} {'after':>10s}")
    for key in before:
        b, a = before[key], after[key]
        if isinstance(b, int) or key == "seconds":
            print(f"{key:34s} {b:10.0f} {a:10.0f}")
        else:
            print(f"{key:34s} {b:10.1%} {a:10.1%}")


if __name__ == "__main__":
    main()
