"""Does calibrating on a handful of one's own runs improve prediction of the same stack's other runs?

Setup (issue 15, part 3): the stack is the Megatron-Bridge 26.04.01 rows of the shipped validation data
(`source` == "mbridge-26.04.01"; NVIDIA's published performance tables, URLs in the CSV). To play a user
who has never been in the shipped fit:

1. the start calibration is the shipped one refitted WITHOUT any of that stack's rows
   (`fit_calibration(exclude=...)`), so the stack is new to the model;
2. for each of several random splits (fixed seeds), `calibrate_on_runs` fits on K of the stack's rows (what
   `tenfold calibrate training` runs: identification, under-determination, the fit) and the rest of the
   stack's rows are predicted with the start calibration (before) and the user calibration (after);
3. printed: per split the held-out MAPE before and after, then the mean over splits.

Usage: PYTHONPATH=src python benchmarks/calibrate_own_stack.py [--source S] [--k 4] [--splits 6]
[--iters 150] [--start-iters 200]
"""

from __future__ import annotations

import argparse
import csv
import random
import time

import numpy as np

from tenfold.perf.validation.calibrate import calibrate_on_runs
from tenfold.perf.validation.fit import fit_calibration
from tenfold.perf.validation.training import default_runs_path, load_cases, predict_case


def mape(cases, cal) -> float:
    return float(np.mean([abs(predict_case(c, cal).error) for c in cases]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="mbridge-26.04.01")
    ap.add_argument("--k", type=int, default=4, help="rows the user calibrates on")
    ap.add_argument("--splits", type=int, default=6)
    ap.add_argument("--iters", type=int, default=150, help="user fit: Nelder-Mead iterations per restart")
    ap.add_argument("--start-iters", type=int, default=200, help="refit of the start calibration")
    args = ap.parse_args()

    with open(default_runs_path(), newline="") as fh:
        stack_ids = {r["id"] for r in csv.DictReader(fh) if r.get("source") == args.source}
    cases = [c for c in load_cases() if not c.reason]
    mine = sorted((c for c in cases if c.id in stack_ids), key=lambda c: c.id)
    t0 = time.perf_counter()
    start = fit_calibration(cases, iters=args.start_iters, restarts=1, exclude=frozenset(stack_ids))
    print(
        f"stack {args.source}: {len(mine)} rows; start calibration = shipped refitted on the other "
        f"{len(cases) - len(mine)} rows ({time.perf_counter() - t0:.0f} s)"
    )
    print(f"calibrate on {args.k} rows, predict the other {len(mine) - args.k}; {args.splits} splits")
    print(
        f"{'split':>5} {'seed':>5} {'fit MAPE before':>16} {'after':>7} {'held-out before':>16} {'after':>7}"
    )
    before, after = [], []
    for s in range(args.splits):
        rng = random.Random(1000 + s)
        fit_rows = rng.sample(mine, args.k)
        rest = [c for c in mine if c not in fit_rows]
        result = calibrate_on_runs(fit_rows, start=start, iters=args.iters, source=f"split {s}")
        b, a = mape(rest, start), mape(rest, result.calibration)
        before.append(b)
        after.append(a)
        print(
            f"{s:>5} {1000 + s:>5} {result.mape_before:>16.1%} {result.mape_after:>7.1%} {b:>16.1%} {a:>7.1%}"
        )
    print(
        f"mean held-out MAPE of the stack's other rows: before {np.mean(before):.1%}, "
        f"after {np.mean(after):.1%} (better in {sum(a < b for a, b in zip(after, before, strict=True))} "
        f"of {args.splits} splits); total {time.perf_counter() - t0:.0f} s"
    )


if __name__ == "__main__":
    main()
