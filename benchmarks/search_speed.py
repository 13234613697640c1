"""Parallelism-search speed, measured side by side in one run.

1. Throughput of the vectorised evaluator (`evaluate_plans`: step time + memory) over every plan of the
   Llama 3.1 405B / 16,384 x H100 grid, unpruned, on one core: plans per second.
2. The same model through the plain per-plan path (`estimate_training` in a loop) on a sample of the
   grid: plans per second, and the ratio.
3. The full search (`search_training`: rules, memory pruning, timing, top 5) for Llama 3.1 405B on
   16,384 H100 (seq 8192, global batch 2048 = 16M tokens), wall time. Target < 5 s.

Printed beside Calculon's anchor (Isaev et al., SC'23, https://github.com/calculon-ai/calculon; one
evaluation of its 1T-parameter example timed on one core at ~7.3 ms, ~140 configurations per second).
Target: >= 100,000 plans/s on one core.
"""

from __future__ import annotations

import os

os.environ.setdefault(
    "OMP_NUM_THREADS", "1"
)  # one core: numpy's elementwise kernels are single-threaded anyway
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import time

import numpy as np

from tenfold.perf import estimate_training, load_calibration, load_hardware, load_model
from tenfold.perf.specs.precision import get_precision
from tenfold.perf.training.search import enumerate_plans, search_training
from tenfold.perf.training.stack import stack
from tenfold.perf.training.step import evaluate_plans

CALCULON_CONFIGS_PER_S = 140.0
CALCULON_MS_PER_EVAL = 7.3
N_GPUS, SEQ, GBS = 16384, 8192, 2048


def main() -> None:
    model, hw = load_model("llama3.1-405b"), load_hardware("h100-sxm")
    cal, prec, sw = load_calibration(), get_precision("bf16"), stack("megatron-core")
    grid = enumerate_plans(model, N_GPUS, seq_len=SEQ)
    n = len(grid)

    def vectorised() -> float:
        t0 = time.perf_counter()
        evaluate_plans(
            model, hw, grid, precision=prec, software=sw, calibration=cal, seq_len=SEQ, global_batch=GBS
        )
        return time.perf_counter() - t0

    vectorised()  # warm-up
    t_vec = min(vectorised() for _ in range(3))
    vec_rate = n / t_vec

    rng = np.random.default_rng(0)
    sample = rng.choice(n, size=300, replace=False)
    t0 = time.perf_counter()
    for j in sample:
        estimate_training(model, hw, grid.layout(j), seq_len=SEQ, global_batch=GBS, calibration=cal)
    loop_rate = len(sample) / (time.perf_counter() - t0)

    t0 = time.perf_counter()
    result = search_training(model, hw, N_GPUS, seq_len=SEQ, global_batch=GBS, calibration=cal, top_k=5)
    t_search = time.perf_counter() - t0

    print(f"Search speed, Llama 3.1 405B on {N_GPUS:,} x H100, seq {SEQ}, global batch {GBS} (one core)")
    print()
    print(f"{'':44s} {'plans/s':>12s} {'ms/plan':>9s} {'vs Calculon':>12s}")
    print(
        f"{'Calculon (anchor, brute force, 1 core)':44s} {CALCULON_CONFIGS_PER_S:12,.0f} "
        f"{CALCULON_MS_PER_EVAL:9.3f} {1.0:11.0f}x"
    )
    print(
        f"{'tenfold per-plan loop (estimate_training)':44s} {loop_rate:12,.0f} {1e3 / loop_rate:9.3f} "
        f"{loop_rate / CALCULON_CONFIGS_PER_S:11,.0f}x"
    )
    print(
        f"{'tenfold vectorised (evaluate_plans, unpruned)':44s} {vec_rate:12,.0f} {1e3 / vec_rate:9.5f} "
        f"{vec_rate / CALCULON_CONFIGS_PER_S:11,.0f}x"
    )
    print(
        f"  vectorised / per-plan loop: {vec_rate / loop_rate:,.0f}x;  target >= 100,000 plans/s: "
        f"{'met' if vec_rate >= 1e5 else 'NOT met'}"
    )
    print()
    met = "met" if t_search < 5 else "NOT met"
    print(
        f"Full search: {result.evaluated:,} plans enumerated, {result.valid:,} structurally valid, "
        f"{result.fits:,} fit in memory, in {t_search:.2f} s (target < 5 s: {met})"
    )
    calculon_s = result.evaluated / CALCULON_CONFIGS_PER_S
    print(
        f"  at Calculon's rate the same {result.evaluated:,} plans would take {calculon_s / 60:,.0f} min "
        f"({calculon_s / t_search:,.0f}x longer)"
    )
    reasons = sorted(result.rejected.items(), key=lambda kv: -kv[1])
    print(f"  rejected: {', '.join(f'{k} {v:,}' for k, v in reasons)}")
    best = result.top[0]
    print(
        f"  best: {best.layout.describe()}  step {best.step_time_s:.2f} s, "
        f"{best.tokens_per_s_per_gpu:,.0f} tok/s/GPU, MFU {best.mfu_bf16:.1%}, "
        f"{best.memory.total_GiB:.1f} GiB/GPU"
    )


if __name__ == "__main__":
    main()
