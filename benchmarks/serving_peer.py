"""tenfold's serving model against NVIDIA's aiconfigurator-core on the shipped serving rows, side by side.

For every row of `tenfold/data/validation/inference_runs.csv`: tenfold's prediction (the committed
inference calibration, `tenfold.perf.validation.serving.predict_case`) and aiconfigurator's own
end-to-end aggregated estimate of the same deployment (`tenfold.perf.measured.peer.peer_estimate`: same
model architecture, GPU, TP / attention DP / EP, weight and KV formats, ISL/OSL, concurrency or max load,
MTP), each with its signed error against the measurement, the row's split (fit/holdout) and, where a tool
cannot predict the row, why. Then the MAPE of each tool over the rows it predicts, over the rows both
predict, and by split. Because tenfold's errors on `fit` rows are in-sample, the summary also gives its
out-of-sample error on every row: the leave-one-source-out prediction stored in `inference_cv.csv` for fit
rows, the plain prediction for holdout rows (never fitted).

Run: `python benchmarks/serving_peer.py` (needs the `measured` extra: aiconfigurator-core and pyarrow; says
so and exits otherwise). Prints; never asserts. tenfold's errors on `fit` rows are in-sample (the
calibration was fitted on them); aiconfigurator was fitted on none of them.
`--kernels` adds the measured-kernel comparison of `benchmarks/serving_kernels.py`.
"""

from __future__ import annotations

import math
import statistics
import sys
import time

from tenfold.perf.calibration import load_calibration
from tenfold.perf.measured import available
from tenfold.perf.measured.peer import peer_estimate
from tenfold.perf.validation.cvresults import read_cv
from tenfold.perf.validation.serving import load_cases, predict_case


def _pct(x: float) -> str:
    return f"{x * 100:+7.1f}%" if math.isfinite(x) else "      - "


def _mape(errors: list[float]) -> str:
    return f"{statistics.mean(abs(e) for e in errors) * 100:6.1f}%" if errors else "     -"


def run_rows() -> list[dict]:
    """Both tools on every shipped row (progress to stderr)."""
    cal = load_calibration(kind="inference")
    cv = read_cv(kind="inference")
    cases = load_cases()
    rows = []
    for i, c in enumerate(cases, 1):
        t0 = time.perf_counter()
        row = {"id": c.id, "split": c.split, "metric": c.metric, "measured": c.measured}
        row["tf"], row["tf_why"], row["tf_out"] = math.nan, c.reason, math.nan
        row["aic"], row["aic_why"], row["setup"] = math.nan, c.reason, ""
        if not c.reason:
            r = predict_case(c, cal)
            row["tf"] = r.predicted
            held = c.id in cv and c.split == "fit"
            plain = r.predicted if c.split == "holdout" else math.nan
            row["tf_out"] = cv[c.id].predicted if held else plain
            row["tf_why"] = "" if math.isfinite(r.predicted) else f"infeasible: {r.layout}"
            p = peer_estimate(c.query, metric=c.metric, concurrency=c.concurrency, model_name=c.model_name)
            row["aic"], row["aic_why"], row["setup"] = p.value, p.reason, p.setup
        rows.append(row)
        print(f"[{i:2d}/{len(cases)}] {c.id} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    return rows


def print_rows(rows: list[dict]) -> None:
    print(
        f"{'row':<46} {'split':<7} {'metric':<30} {'measured':>9} {'tenfold':>9} {'err':>8} "
        f"{'aiconfig':>9} {'err':>8}"
    )
    for r in rows:
        tf_err, aic_err = r["tf"] / r["measured"] - 1.0, r["aic"] / r["measured"] - 1.0
        tf = f"{r['tf']:9.1f}" if math.isfinite(r["tf"]) else "        -"
        aic = f"{r['aic']:9.1f}" if math.isfinite(r["aic"]) else "        -"
        print(
            f"{r['id'][:46]:<46} {r['split']:<7} {r['metric'][:30]:<30} {r['measured']:9.1f} {tf} "
            f"{_pct(tf_err)} {aic} {_pct(aic_err)}"
        )
        if r["tf_why"] and r["tf_why"] == r["aic_why"]:
            print(f"{'':<4}both skip: {r['tf_why']}")
        else:
            if r["tf_why"]:
                print(f"{'':<4}tenfold skips: {r['tf_why']}")
            if r["aic_why"]:
                print(f"{'':<4}aiconfigurator skips: {r['aic_why']}")
        if r["setup"]:
            print(f"{'':<4}aiconfigurator ran: {r['setup']}")


def print_summary(rows: list[dict]) -> None:
    def errs(key: str, keep) -> list[float]:
        return [r[key] / r["measured"] - 1.0 for r in rows if keep(r)]

    def ok(r: dict, key: str) -> bool:
        return math.isfinite(r[key])

    both = [r for r in rows if ok(r, "tf") and ok(r, "aic")]
    print("\nMAPE against the measurements (rows: how many each figure covers)")
    print(f"{'subset':<34} {'rows':>4} {'tenfold':>8} {'aiconfigurator':>15}")
    tf_all, aic_all = errs("tf", lambda r: ok(r, "tf")), errs("aic", lambda r: ok(r, "aic"))
    print(f"{'tenfold predicts':<34} {len(tf_all):>4} {_mape(tf_all):>8} {'':>15}")
    print(f"{'aiconfigurator predicts':<34} {len(aic_all):>4} {'':>8} {_mape(aic_all):>15}")
    print(
        f"{'both predict':<34} {len(both):>4} {_mape(errs('tf', lambda r: r in both)):>8} "
        f"{_mape(errs('aic', lambda r: r in both)):>15}"
    )
    for split in sorted({r["split"] for r in both}):
        sel = [r for r in both if r["split"] == split]
        tf = [r["tf"] / r["measured"] - 1.0 for r in sel]
        aic = [r["aic"] / r["measured"] - 1.0 for r in sel]
        print(f"{'both predict, split ' + split:<34} {len(sel):>4} {_mape(tf):>8} {_mape(aic):>15}")
    out = [r for r in both if ok(r, "tf_out")]
    tf_out, aic_out = errs("tf_out", lambda r: r in out), errs("aic", lambda r: r in out)
    label = "both predict, tenfold out of sample"
    print(f"{label:<34} {len(out):>4} {_mape(tf_out):>8} {_mape(aic_out):>15}")
    within = sum(abs(r["tf"] / r["measured"] - 1) < abs(r["aic"] / r["measured"] - 1) for r in both)
    print(f"tenfold closer on {within} of {len(both)} rows both predict")


def main() -> int:
    if not available():
        print("aiconfigurator-core is not installed (pip install 'tenfold[measured]'): nothing to compare.")
        return 0
    rows = run_rows()
    print_rows(rows)
    print_summary(rows)
    if "--kernels" in sys.argv[1:]:
        from serving_kernels import main as kernels

        kernels()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
