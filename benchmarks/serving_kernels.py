"""tenfold's decode-step parts against NVIDIA's silicon-measured serving kernels (aiconfigurator-core).

For a few deployments taken from the shipped serving rows (and the FP8 variant of the DeepSeek-R1 TP8
latency point that issue 16 reports at +386 %), at several batch sizes per attention rank, a pure decode
step (no prefill, one token per sequence, cached context ISL + OSL/2):

* attention core, one layer: tenfold's `attention_s` / layers (`tenfold.perf.serving.step.step_times`)
  against the measured MLA or GQA decode kernel, sliding-window layers at their window
  (`tenfold.perf.measured.serving.layer_decode_attention_seconds`);
* one MoE layer: tenfold's whole MoE-layer FFN time (routed experts, router, shared experts, elementwise,
  fixed per-layer and per-expert costs: the growth of `ffn_s` when one MoE layer is added) against the
  measured fused-MoE kernel (balanced routing, and aiconfigurator's default power-law skew 1.01) plus
  the shared experts' three GEMMs read from the measured GEMM tables (`gemm_efficiency`);
* the whole tenfold step and what its attention + MoE parts would become with the measured values.

Run: `python benchmarks/serving_kernels.py` (needs the `measured` extra). Prints; never asserts.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tenfold.perf.calibration import load_calibration
from tenfold.perf.measured import available, gemm_efficiency
from tenfold.perf.measured.serving import layer_decode_attention_seconds, moe_seconds
from tenfold.perf.serving.query import ServingQuery
from tenfold.perf.serving.step import serving_rates, step_times
from tenfold.perf.specs.precision import get_precision
from tenfold.perf.validation.serving import load_cases

# (row id, weights override or None, batches per attention rank)
SHAPES = (
    ("trtllm-blog-dsr1-b200-tp8-minlat", None, (1, 8, 32, 128)),
    ("trtllm-blog-dsr1-b200-tp8-minlat", "fp8", (1, 8, 32, 128)),
    ("trtllm-blog-dsr1-h200-tp8-minlat", None, (1, 8, 32, 128)),
    ("trtllm12-dsr1-b200-dep4-fp4-1k1k", None, (8, 64, 256, 892)),
    ("trtllm12-dsr1-h200-dep8-fp8-1k1k", None, (8, 64, 256, 603)),
    ("trtllm12-qwen3-235b-b200-dep4-fp4-1k1k", None, (8, 64, 256, 723)),
    ("trtllm12-qwen3-30b-b200-tp1-fp4-1k1k", None, (1, 32, 256, 1600)),
    ("trtllm12-gptoss120b-b200-dep2-1k1k", None, (8, 64, 512)),
    ("trtllm12-llama33-70b-h200-tp2-fp8-1k1k", None, (1, 32, 256, 627)),
)


def _table_dtype(q: ServingQuery) -> str:
    """The measured MoE operand type: DeepSeek's FP8 checkpoint is 128x128 block-scaled."""
    return "fp8_block" if q.precision == "fp8" and q.model.is_mla else q.precision


def _tenfold_parts(q: ServingQuery, b: float, cal) -> dict[str, float]:
    """tenfold's decode step at `b` sequences per rank: step, attention per layer, MoE layer."""
    hw, f, dep = q.hardware, q.formats, q.deployment
    kv_compute = get_precision("fp8" if f.kv in ("fp8", "nvfp4") and "fp8" in hw.peak_flops else "bf16")
    kw = dict(
        formats=f,
        rates=serving_rates(hw, f, cal, kv_compute),
        links=cal.links(hw),
        tp=dep.tp,
        dp=dep.dp,
        ep=dep.ep,
        b=b,
        p=0.0,
        q=1.0,
        ctx_dec=q.input_len + q.output_len / 2,
        isl=q.input_len,
        ep_overlap=q.engine.ep_overlap,
        ep_comm=q.engine.ep_comm,
    )
    st = step_times(q.model, **kw)
    out = {"step": float(st["step_s"]), "attn": float(st["attention_s"]) / q.model.layers}
    if q.model.is_moe:
        more = step_times(replace(q.model, layers=q.model.layers + 1), **kw)
        out["moe"] = float(more["ffn_s"] - st["ffn_s"])
    return out


def _shared_seconds(q: ServingQuery, tokens: float) -> float | None:
    """Measured time of the shared experts' gate, up and down GEMMs for `tokens` tokens under TP."""
    m = q.model
    if not m.shared_experts:
        return 0.0
    fs = m.shared_experts * m.moe_ffn // q.deployment.tp
    peak = q.hardware.peak(get_precision(q.precision).peak_key)
    total = 0.0
    for n, k in ((2 * fs, m.hidden), (m.hidden, fs)):
        eff = gemm_efficiency(q.hardware.name, q.precision, tokens, n, k)
        if eff is None:
            return None
        total += 2.0 * tokens * n * k / (eff * peak)
    return total


def _measured(q: ServingQuery, b: float) -> dict[str, float | None]:
    m, dep, gpu = q.model, q.deployment, q.hardware.name
    ctx = q.input_len + q.output_len / 2
    attn = layer_decode_attention_seconds(gpu, q.kv_precision, m, tp=dep.tp, batch=b, ctx=ctx)
    out: dict[str, float | None] = {"attn": attn}
    if m.is_moe:
        tokens = b * dep.dp  # tokens entering the MoE on a rank (gathered over attention DP)
        shape = dict(
            tokens=tokens,
            hidden=m.hidden,
            inter=m.moe_ffn,
            topk=m.topk,
            experts=m.experts,
            moe_tp=dep.moe_tp,
            moe_ep=dep.ep,
        )
        shared = _shared_seconds(q, b)
        for key, dist in (("moe", "balanced"), ("moe_skew", "power_law_1.01")):
            t = moe_seconds(gpu, _table_dtype(q), distribution=dist, **shape)
            out[key] = None if t is None or shared is None else t + shared
    return out


def _us(x: float | None) -> str:
    return f"{x * 1e6:8.1f}" if x is not None else "       -"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:6.2f}" if a is not None and b else "     -"


def main() -> None:
    if not available():
        print("aiconfigurator-core is not installed (pip install 'tenfold[measured]'): nothing to compare.")
        return
    cal = load_calibration(kind="inference")
    cases = {c.id: c for c in load_cases() if not c.reason}
    print("\nDecode step per layer: tenfold vs measured kernels (us; ratio = tenfold / measured)")
    print(
        f"{'deployment':<44} {'b':>5} {'attn tf':>8} {'meas':>8} {'ratio':>6} {'MoE tf':>8} "
        f"{'meas':>8} {'ratio':>6} {'skew':>8} {'step tf ms':>10} {'w/ meas':>8}"
    )
    for row_id, weights, batches in SHAPES:
        case = cases.get(row_id)
        if case is None:
            print(f"{row_id}: not in the shipped rows or not predictable")
            continue
        q = (
            case.query
            if weights is None
            else replace(case.query, precision=weights, attention_precision=weights)
        )
        dep = q.deployment
        label = f"{q.model.name} {q.hardware.name} {q.precision} {dep.describe()}"[:44]
        for b in batches:
            tf, me = _tenfold_parts(q, float(b), cal), _measured(q, float(b))
            step = tf["step"]
            swapped = step
            if me["attn"] is not None:
                swapped += (me["attn"] - tf["attn"]) * q.model.layers
            if q.model.is_moe and me.get("moe") is not None:
                swapped += (me["moe"] - tf["moe"]) * q.model.moe_layers
            print(
                f"{label:<44} {b:>5} {_us(tf['attn'])} {_us(me['attn'])} {_ratio(tf['attn'], me['attn'])} "
                f"{_us(tf.get('moe'))} {_us(me.get('moe'))} {_ratio(tf.get('moe'), me.get('moe'))} "
                f"{_us(me.get('moe_skew'))} {step * 1e3:10.2f} {swapped * 1e3:8.2f}"
            )


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
