"""Training model accuracy before and after issue 15's fitting procedure, side by side in one run.

Both procedures fit on the shipped rows marked `split = fit` and are scored three ways: in-sample (the rows
they were fitted on), leave-one-source-out cross-validated (each source predicted by a fit without it), and
on the rows marked `holdout` (never fitted on by either):

* before: every "<arch>/<bits>" GEMM efficiency a free parameter (8 of them), started from the committed
  values' physical defaults without shrinkage;
* shipped: the same with the shrinkage `crossval.DEFAULT_PENALTY` toward the physical defaults (what
  `python -m tenfold.perf.validation.crossval --write` runs);
* tied: the GEMM efficiencies tied to NVIDIA's measured kernel tables (aiconfigurator-core) through one
  shared scale, the other parameters shrunk toward physical defaults (`crossval.TIED_PENALTY`).

Measured 2026-12-03 on 90 rows: "before" won on cross-validation against "tied" (14.6 % vs 15.8 %), so the
shipped calibration keeps free efficiencies; on the 50 rows shipped before issue 15 the tie won (13.0 % ->
10.8 %). On 2026-12-04 (after `torch_kernel_efficiency`) the crossval module gave "before" 15.3 % CV,
11.4 % in-sample, 14.8 % hold-out and "shipped" 15.5 %, 11.6 %, 11.5 %; see crossval.DEFAULT_PENALTY.

Also prints the 80 % interval coverage on the cross-validated rows (target 75-85 %). Takes tens of minutes
on one core (three cross-validations of ~20 folds each). Needs the `measured` extra for "tied".

    python benchmarks/training_cv.py [--iters 300] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import time

from tenfold.perf.calibration import load_calibration
from tenfold.perf.validation.crossval import DEFAULT_PENALTY, TIED_PENALTY, fit_with_uncertainty
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
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    results = {
        "before": run("before", tie=False, penalty=0.0, iters=args.iters, workers=args.workers),
        "shipped": run("shipped", tie=False, penalty=DEFAULT_PENALTY, iters=args.iters, workers=args.workers),
        "tied": run("tied", tie=True, penalty=TIED_PENALTY, iters=args.iters, workers=args.workers),
    }
    print(f"\n{'':34s}" + "".join(f"{name:>10s}" for name in results))
    for key in results["before"]:
        values = [r[key] for r in results.values()]
        if isinstance(values[0], int) or key == "seconds":
            print(f"{key:34s}" + "".join(f"{v:10.0f}" for v in values))
        else:
            print(f"{key:34s}" + "".join(f"{v:10.1%}" for v in values))


if __name__ == "__main__":
    main()
