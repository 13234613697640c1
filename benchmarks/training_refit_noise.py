"""How far does the training fit move when only its starting point moves? The refit noise that an
adoption rule must clear.

A change to the model is judged by refitting it (`python -m tenfold.perf.validation.crossval --write`)
and comparing in-sample, cross-validated and hold-out MAPE with the shipped model's. The fit is a local
search (Nelder-Mead, 300 iterations x 2 restarts, shrunk toward the physical prior), so a small change to
the model can also change where the search stops. This benchmark measures that part alone: the shipped
model and rows, fitted by the shipped procedure from the physical prior (seed 0, which reproduces the
shipped calibration) and from starts perturbed around it in the fit's own coordinates
(`Calibration.to_vector`, normal with standard deviation `--sigma`). A rule whose thresholds sit inside
this spread cannot tell a better model from a luckier search.

About 4 minutes per fit on one core; the fits run in parallel (`--workers`).

    python benchmarks/training_refit_noise.py [--seeds 0,1,2,3] [--sigma 0.1] [--workers 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import time

import numpy as np

from tenfold.perf.calibration import load_calibration
from tenfold.perf.validation.crossval import DEFAULT_PENALTY, FIT_ITERS, FIT_RESTARTS, physical_prior
from tenfold.perf.validation.fit import fit_calibration
from tenfold.perf.validation.training import load_cases, validate_training


def refit(seed: int, sigma: float) -> dict[str, float]:
    """In-sample and hold-out MAPE (as `tenfold validate training` scores them) after the shipped
    procedure's full fit from the prior, moved by `sigma` in the fit's coordinates unless `seed` is 0."""
    prior = physical_prior(load_calibration())
    start = prior
    if seed:
        x = prior.to_vector()
        start = prior.from_vector(x + np.random.default_rng(seed).normal(0.0, sigma, size=x.shape))
    cal = fit_calibration(
        load_cases(),
        start=start,
        prior=prior,
        penalty=DEFAULT_PENALTY,
        iters=FIT_ITERS,
        restarts=FIT_RESTARTS,
    )
    report = validate_training(calibration=cal)
    return {
        "seed": seed,
        "fit": report.mape_by_split["fit"],
        "holdout": report.mape_by_split["holdout"],
        "hopper/8": cal.gemm_efficiency["hopper/8"],
        "scaleout": cal.scaleout_efficiency,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2,3", help="comma-separated; 0 = the unperturbed prior start")
    ap.add_argument("--sigma", type=float, default=0.1, help="start perturbation in the fit's coordinates")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]

    t0 = time.time()
    print(
        f"{len(seeds)} fits of the shipped model, start sigma {args.sigma}, {args.workers} workers",
        flush=True,
    )
    jobs = [(s, args.sigma) for s in seeds]
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        results = sorted(pool.starmap(refit, jobs), key=lambda r: r["seed"])
    print(f"done in {time.time() - t0:.0f} s\n")

    print(f"{'start':>12s} {'in-sample MAPE':>15s} {'hold-out MAPE':>14s} {'hopper/8':>9s} {'scaleout':>9s}")
    for r in results:
        label = "prior" if r["seed"] == 0 else f"seed {r['seed']}"
        print(f"{label:>12s} {r['fit']:15.2%} {r['holdout']:14.2%} {r['hopper/8']:9.4f} {r['scaleout']:9.4f}")
    for key, name in (("fit", "in-sample"), ("holdout", "hold-out")):
        lo, hi = min(r[key] for r in results), max(r[key] for r in results)
        print(f"{name} spread: {lo:.2%} - {hi:.2%} ({(hi - lo) * 100:.2f} points)")


if __name__ == "__main__":
    main()
