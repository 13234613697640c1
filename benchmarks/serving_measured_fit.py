"""Would the measured serving kernels lower tenfold's serving error? A what-if refit, side by side.

The same fit (`tenfold.perf.validation.fit`, inference kind) and leave-one-source-out cross-validation
(`tenfold.perf.validation.crossval.cross_validate`) run twice on the shipped serving rows:

* base: tenfold's step model as committed;
* measured: in every engine step, the decode-attention core and the routed-expert computation of each
  MoE layer are replaced by aiconfigurator-core's silicon-measured kernels for the row's GPU, format and
  shape (`tenfold.perf.measured.serving`; TensorRT-LLM tables; balanced routing) wherever the tables cover
  the shape, tenfold's own terms elsewhere. The routed-expert term replaced is step.py's own
  `routed_expert_seconds` (grouped GEMMs or the weight stream, and the fixed costs); router, shared
  experts, elementwise and collectives stay tenfold's.

The step function is swapped in for this script only (a what-if); the library is unchanged.

Result on the 21 rows of 2026-12-03 before issue 16's model changes (fit 600 x 2 iterations, leave-one-out
250): MAPE in-sample 9.2 % -> 11.1 %, leave-one-out 12.7 % -> 13.1 %: the measured kernels did not lower
the error on those rows (docs/inference.md, "Peer comparison"); not rerun on the 186 rows.
Run: `python benchmarks/serving_measured_fit.py` (needs the `measured` extra; about ten minutes on
two cores per 20 rows; the folds run on two workers).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys

import numpy as np

import tenfold.perf.serving.steady_state as steady_state
import tenfold.perf.validation.serving as serving
from tenfold.perf.measured import available
from tenfold.perf.measured.serving import layer_decode_attention_seconds, moe_seconds
from tenfold.perf.serving.step import routed_expert_seconds
from tenfold.perf.validation.crossval import cross_validate
from tenfold.perf.validation.fit import fit_calibration

ORIGINAL_STEP = steady_state.step_times
ORIGINAL_PREDICT = serving.predict_case
CURRENT: dict = {}  # the query being predicted (step_times is not told the GPU)
USED = {"attention": 0, "moe": 0, "calls": 0}


def _routed_tenfold(model, kw, t_ep):
    """step.py's routed-expert term for `t_ep` tokens routed by the EP group (see the module docstring)."""
    moe_tp = kw["tp"] * kw["dp"] // kw["ep"]
    return routed_expert_seconds(
        t_ep, model=model, formats=kw["formats"], rates=kw["rates"], ep=kw["ep"], moe_tp=moe_tp
    )


def measured_step_times(model, **kw):
    """step.py's step with the measured decode attention and routed MoE swapped in (module docstring)."""
    st = ORIGINAL_STEP(model, **kw)
    q = CURRENT.get("query")
    if q is None:
        return st
    USED["calls"] += 1
    b = np.asarray(kw["b"], dtype=float)
    tokens = float(kw.get("q", 1.0))
    ctx = float(kw["ctx_dec"])
    gpu, kv, tp = q.hardware.name, q.formats.kv, kw["tp"]
    attn = [
        layer_decode_attention_seconds(gpu, kv, model, tp=tp, batch=bi * tokens, ctx=ctx)
        for bi in np.ravel(b)
    ]
    if all(a is not None for a in attn):
        USED["attention"] += 1
        prefill_only = ORIGINAL_STEP(model, **(kw | {"b": 0.0 * b}))["attention_s"]
        st["attention_s"] = prefill_only + model.layers * np.reshape(attn, b.shape)
    if model.is_moe:
        p_mean = kw.get("p_mean")
        p_mean = kw["p"] if p_mean is None else p_mean
        t_ep = (b * tokens + np.asarray(p_mean, dtype=float)) * kw["dp"]
        dtype = "fp8_block" if q.precision == "fp8" and model.is_mla else q.precision
        shape = dict(
            hidden=model.hidden,
            inter=model.moe_ffn,
            topk=model.topk,
            experts=model.experts,
            moe_tp=kw["tp"] * kw["dp"] // kw["ep"],
            moe_ep=kw["ep"],
        )
        meas = [moe_seconds(q.hardware.name, dtype, tokens=t, **shape) for t in np.ravel(t_ep)]
        if all(x is not None for x in meas):
            USED["moe"] += 1
            delta = np.reshape(meas, t_ep.shape) - _routed_tenfold(model, kw, t_ep)
            st["ffn_s"] = st["ffn_s"] + model.moe_layers * delta
    parts = ("attn_proj_s", "attention_s", "ffn_s", "tp_s", "ep_s", "head_s", "draft_s")
    st["step_s"] = sum(st[k] for k in parts) + st["overhead_s"]
    return st


def measured_predict(case, calibration):
    CURRENT["query"] = case.query
    try:
        return ORIGINAL_PREDICT(case, calibration)
    finally:
        CURRENT.clear()


def run(label: str, iters: int, loo_iters: int) -> dict[str, tuple[float, float]]:
    """Refit, then leave-one-out from that fit: id -> (in-sample error, held-out error)."""
    print(f"[{label}] fitting ...", file=sys.stderr, flush=True)
    cal = fit_calibration(kind="inference", iters=iters, restarts=2)
    cases = [c for c in serving.load_cases() if not c.reason]
    fitted = {c.id: serving.predict_case(c, cal).error for c in cases}
    print(f"[{label}] leave-one-source-out over {len(cases)} rows ...", file=sys.stderr, flush=True)
    held = cross_validate(cases, prior=cal, kind="inference", iters=loo_iters, restarts=1, workers=2)
    measured = {c.id: c.measured for c in cases}
    loo = {i: v / measured[i] - 1.0 for i, v in held.items()}
    print(
        f"[{label}] fitted: moe_efficiency {cal.moe_efficiency:.3f}, "
        f"kernel_overhead_us {cal.kernel_overhead_us:.2f}, "
        f"attention_efficiency {cal.attention_efficiency:.3f}, hbm_efficiency {cal.hbm_efficiency:.3f}",
        flush=True,
    )
    return {i: (fitted[i], loo.get(i, math.nan)) for i in fitted}


def _mape(xs) -> float:
    xs = [abs(x) for x in xs if math.isfinite(x)]
    return statistics.mean(xs) * 100 if xs else math.nan


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=600, help="fit iterations per restart (2 restarts)")
    ap.add_argument("--loo-iters", type=int, default=250, help="iterations of each cross-validation refit")
    args = ap.parse_args()
    if not available():
        print("aiconfigurator-core is not installed (pip install 'tenfold[measured]'): nothing to compare.")
        return 0
    base = run("base", args.iters, args.loo_iters)
    steady_state.step_times = measured_step_times
    serving.predict_case = measured_predict
    try:
        meas = run("measured", args.iters, args.loo_iters)
    finally:
        steady_state.step_times = ORIGINAL_STEP
        serving.predict_case = ORIGINAL_PREDICT
    print(
        f"\nmeasured kernels used in {USED['attention']} / {USED['moe']} of {USED['calls']} step evaluations "
        "(attention / MoE)"
    )
    print(f"{'row':<46} {'base fit':>9} {'base CV':>9} {'meas fit':>9} {'meas CV':>9}")
    for i in base:
        (bf, bl), (mf, ml) = base[i], meas[i]
        print(f"{i[:46]:<46} {bf * 100:+8.1f}% {bl * 100:+8.1f}% {mf * 100:+8.1f}% {ml * 100:+8.1f}%")
    print(
        f"{'MAPE':<46} {_mape(v[0] for v in base.values()):8.1f}% {_mape(v[1] for v in base.values()):8.1f}% "
        f"{_mape(v[0] for v in meas.values()):8.1f}% {_mape(v[1] for v in meas.values()):8.1f}%"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
