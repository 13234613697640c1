"""The serving model's accuracy tables for docs/inference.md, from the shipped rows and calibration.

Prints, as Markdown: the headline figures (in-sample, leave-one-source-out cross-validated and hold-out
MAPE, 80 % range coverage of each), the same by group (dense/MoE, engine family, low-concurrency TPOT),
the spread of the cross-validated errors per uncertainty group, and the per-row table. "In-sample" rows
are those the committed calibration was fitted on (`split = fit`); their cross-validated errors come from
`inference_cv.csv`, written by `python -m tenfold.perf.validation.crossval --kind inference --write`
(run that first after any model change); hold-out rows were never fitted on.

A low-concurrency TPOT row is one whose metric is a per-user rate or TPOT (tpot_ms,
output_tokens_per_s_per_user) at a stated concurrency of at most 64 (issue 16's bar: <= 20 %).

    python benchmarks/serving_accuracy.py [--rows]     # --rows adds the per-row table
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from tenfold.perf.calibration import load_calibration
from tenfold.perf.validation.serving import load_cases, validate_inference

LOW_CONCURRENCY = 64
PER_USER_METRICS = ("tpot_ms", "output_tokens_per_s_per_user")


def _mape(errors: list[float]) -> str:
    return f"{100 * sum(map(abs, errors)) / len(errors):.1f}%" if errors else ""


def _share(flags: list[bool]) -> str:
    return f"{100 * sum(flags) / len(flags):.0f}%" if flags else ""


def _inside(value: float, interval) -> bool:
    return interval is not None and interval[0] <= value <= interval[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", action="store_true", help="also print the per-row table")
    args = ap.parse_args()

    report = validate_inference()
    cases = {c.id: c for c in load_cases()}
    rows = report.rows
    fit = [r for r in rows if r.split == "fit" and r.cv_error is not None]
    hold = [r for r in rows if r.split == "holdout"]

    def moe(r) -> bool:
        q = cases[r.id].query
        return q is not None and q.model.is_moe

    def engine(r) -> str:
        return cases[r.id].query.engine.name.split("-")[0]

    def low_tpot(r) -> bool:
        c = cases[r.id]
        return r.metric in PER_USER_METRICS and (c.concurrency or math.inf) <= LOW_CONCURRENCY

    cv = report.cross_validation
    print(
        f"rows predicted {len(rows)}; fit rows {len(fit)} from {cv['sources']} sources; hold-out {len(hold)}"
    )
    print()
    print("| figure | value |\n|---|---:|")
    print(f"| in-sample MAPE ({len(fit)} fit rows) | {_mape([r.error for r in fit])} |")
    print(f"| **leave-one-source-out MAPE ({len(fit)} fit rows)** | **{_mape([r.cv_error for r in fit])}** |")
    print(f"| **hold-out MAPE ({len(hold)} rows, never fitted)** | **{_mape([r.error for r in hold])}** |")
    cov = (
        _share([_inside(r.measured, r.cv_interval) for r in fit]),
        _share([_inside(r.measured, r.interval) for r in fit]),
        _share([_inside(r.measured, r.interval) for r in hold]),
    )
    print(f"| 80 % range coverage, cross-validated / in-sample / hold-out | {' / '.join(cov)} |")
    print()

    groups: list[tuple[str, Callable]] = [
        ("all fit rows", lambda r: True),
        ("moe", moe),
        ("dense", lambda r: not moe(r)),
        (f"low-concurrency TPOT (concurrency <= {LOW_CONCURRENCY})", low_tpot),
        *[(f"engine {e}", lambda r, e=e: engine(r) == e) for e in sorted({engine(r) for r in rows})],
    ]
    print(
        "| group | rows | in-sample MAPE | CV MAPE (leave one source out) | 80 % coverage in-sample |", end=""
    )
    print(" 80 % coverage CV |\n|---|---:|---:|---:|---:|---:|")
    for name, keep in groups:
        sel = [r for r in fit if keep(r)]
        if sel:
            ins = _share([_inside(r.measured, r.interval) for r in sel])
            out = _share([_inside(r.measured, r.cv_interval) for r in sel])
            print(
                f"| {name} | {len(sel)} | {_mape([r.error for r in sel])} | "
                f"{_mape([r.cv_error for r in sel])} | {ins} | {out} |"
            )
    for name, keep in [
        ("holdout rows (never fitted)", lambda r: True),
        ("low-concurrency TPOT, holdout", low_tpot),
    ]:
        sel = [r for r in hold if keep(r)]
        if sel:
            ins = _share([_inside(r.measured, r.interval) for r in sel])
            print(f"| {name} | {len(sel)} | {_mape([r.error for r in sel])} (out of sample) | | {ins} | |")
    print()

    u = load_calibration(kind="inference").uncertainty
    if u is not None:
        print("| group | CV rows | sigma of log(pred/measured) | 80 % range factor |\n|---|---:|---:|---:|")
        for g, s in sorted(u.log_sigma.items()):
            print(f"| {g} | {u.rows.get(g, 0)} | {s:.3f} | x/÷ {math.exp(1.2816 * s):.2f} |")
        print(f"\npooled {u.pooled:.3f}; ratio correlation {u.ratio_correlation:.2f}; {u.method}.")

    if args.rows:
        print(
            "\n| id | source | split | GPU | metric | measured | predicted | 80 % range | in-sample error |",
            end="",
        )
        print(" CV / hold-out error | layout used |\n|---|---|---|---|---|---:|---:|---:|---:|---:|---|")
        for r in rows:
            lo, hi = r.interval if r.interval is not None else (math.nan, math.nan)
            ins = f"{100 * r.error:+.1f}%" if r.split == "fit" else ""
            out = r.cv_error if r.split == "fit" else r.error
            out_s = f"{100 * out:+.1f}%" if out is not None else ""
            print(
                f"| {r.id} | {cases[r.id].source} | {r.split} | {r.gpu} | {r.metric} | {r.measured:.4g} | "
                f"{r.predicted:.4g} | {lo:.4g}-{hi:.4g} | {ins} | {out_s} | {r.layout} |"
            )


if __name__ == "__main__":
    main()
