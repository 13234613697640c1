"""Does calibrating on a handful of one's own runs improve prediction of the same stack's other runs?

Setup (issue 15, part 3): a stack is the rows of one `source` of the shipped validation data, or of several
joined with "+". Five by default: every torchtitan run (its 2024 and 2025 benchmarks on Grand Teton H100s
at 500 W and Trainy's H200 run: a framework the start calibration has never seen), the Megatron-MoE model zoo
(Qwen3-235B on H100, GB200, GB300), the Megatron-Bridge 26.04.01 rows (NVIDIA's published performance
tables: H100, B200, GB200, GB300; BF16 to NVFP4; dense and MoE models), Narayanan et al. 2021's Table 1
(Megatron-LM on A100, dense GPTs; https://arxiv.org/abs/2104.04473) and the Megatron-Bridge 26.02 rows (a
release whose five runs were all slower than later releases' runs of the same models on the same GPUs: a
stack uniformly off the published average, the case calibration is for). To play a user who has never been in
the shipped fit:

1. the start calibration is fitted WITHOUT any of that stack's rows, from the physical defaults with the
   cross-validation's shrinkage (`crossval.physical_prior`, `DEFAULT_PENALTY`), as a cross-validation fold
   is: starting from the shipped values would leak them into parameters no other row identifies (the
   torchtitan kernel factor);
2. for each of several random splits (fixed seeds), `calibrate_on_runs` fits on K of the stack's rows (what
   `tenfold calibrate training` runs: identification, under-determination, the fit) and the rest of the
   stack's rows are predicted with the start calibration (before) and the user calibration (after);
3. printed: per split the held-out MAPE before and after, then the mean over splits.

`--scale 0.8` multiplies the stack's measured values by 0.8 before anything is fitted: the same runs on a
cluster that is 20 % slower at every job, a stack off the published average by construction.

Usage: PYTHONPATH=src python benchmarks/calibrate_own_stack.py [--source S ...] [--k 4] [--splits 6]
[--iters 150] [--start-iters 200] [--scale 0.8]
"""

from __future__ import annotations

import argparse
import csv
import random
import time
from dataclasses import replace

import numpy as np

from tenfold.perf.calibration import load_calibration
from tenfold.perf.validation.calibrate import calibrate_on_runs
from tenfold.perf.validation.crossval import DEFAULT_PENALTY, physical_prior
from tenfold.perf.validation.fit import fit_calibration
from tenfold.perf.validation.training import default_runs_path, load_cases, predict_case

DEFAULT_SOURCES = (
    "torchtitan-2024+torchtitan-2025+torchtitan-trainy-2025",
    "megatron-moe-zoo",
    "mbridge-26.04.01",
    "narayanan2021",
    "mbridge-26.02",
)


def mape(cases, cal) -> float:
    return float(np.mean([abs(predict_case(c, cal).error) for c in cases]))


def run_stack(source: str, cases: list, args: argparse.Namespace) -> tuple[float, float]:
    """Print one stack's splits; return its mean held-out MAPE before and after calibrating."""
    sources = set(source.split("+"))
    with open(default_runs_path(), newline="") as fh:
        stack_ids = {r["id"] for r in csv.DictReader(fh) if r.get("source") in sources}
    mine = sorted((c for c in cases if c.id in stack_ids), key=lambda c: c.id)
    if args.scale != 1.0:  # a cluster whose every run is this factor of the published one
        mine = [replace(c, measured=c.measured * args.scale) for c in mine]
    t0 = time.perf_counter()
    prior = physical_prior(load_calibration())
    start = fit_calibration(
        cases,
        iters=args.start_iters,
        restarts=1,
        exclude=frozenset(stack_ids),
        prior=prior,
        penalty=DEFAULT_PENALTY,
    )
    print(
        f"\nstack {source}: {len(mine)} rows; start calibration = fitted from physical defaults on the "
        f"other {len(cases) - len(mine)} rows ({time.perf_counter() - t0:.0f} s)"
    )
    k = max(1, min(args.k, len(mine) - 2))  # one row or more to fit, two to predict if there are 3
    print(f"calibrate on {k} rows, predict the other {len(mine) - k}; {args.splits} splits")
    print(f"{'split':>5} {'fit MAPE before':>16} {'after':>7} {'held-out before':>16} {'after':>7}  fitted")
    before, after = [], []
    for s in range(args.splits):
        fit_rows = random.Random(1000 + s).sample(mine, k)
        rest = [c for c in mine if c not in fit_rows]
        result = calibrate_on_runs(fit_rows, start=start, iters=args.iters, source=f"split {s}")
        before.append(mape(rest, start))
        after.append(mape(rest, result.calibration))
        fitted = [p.name for p in result.parameters if p.status == "fitted"]
        print(
            f"{s:>5} {result.mape_before:>16.1%} {result.mape_after:>7.1%} {before[-1]:>16.1%} "
            f"{after[-1]:>7.1%}  {', '.join(fitted) or '(none: kept the start values)'}"
        )
    better = sum(a < b - 1e-9 for a, b in zip(after, before, strict=True))
    worse = sum(a > b + 1e-9 for a, b in zip(after, before, strict=True))
    print(
        f"mean held-out MAPE of {source}'s other rows: before {np.mean(before):.1%}, after "
        f"{np.mean(after):.1%} (better in {better}, worse in {worse} of {args.splits} splits)"
    )
    return float(np.mean(before)), float(np.mean(after))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", action="append", help="stack(s): the CSV's `source` (default: two)")
    ap.add_argument("--k", type=int, default=4, help="rows the user calibrates on")
    ap.add_argument("--splits", type=int, default=6)
    ap.add_argument("--iters", type=int, default=150, help="user fit: Nelder-Mead iterations per restart")
    ap.add_argument("--start-iters", type=int, default=200, help="refit of the start calibration")
    ap.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply the stack's measured values by this (0.8: a cluster that runs every job 20 %% slower "
        "than the published runs, the case calibration is for)",
    )
    args = ap.parse_args()
    t0 = time.perf_counter()
    cases = [c for c in load_cases() if not c.reason]
    summary = {s: run_stack(s, cases, args) for s in args.source or DEFAULT_SOURCES}
    scaled = f"; measured values x {args.scale:g}" if args.scale != 1.0 else ""
    print(
        f"\nsummary{scaled} (K = {args.k} rows calibrated on, fewer where a stack has under K + 2; seeds "
        f"1000-{999 + args.splits}):"
    )
    for source, (b, a) in summary.items():
        print(f"  {source:54s} other rows' MAPE {b:.1%} -> {a:.1%}")
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
