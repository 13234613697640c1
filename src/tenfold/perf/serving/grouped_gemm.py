"""Compute time of an MoE layer's two grouped expert GEMMs on one GPU, from the tiling of the kernel.

A grouped GEMM (TensorRT-LLM's CUTLASS MoE GEMMs, `cpp/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/` in
https://github.com/NVIDIA/TensorRT-LLM; SGLang's and vLLM's fused-MoE kernels work the same way) runs one
problem per expert: the rows routed to it (m = T·k/E on average) times that expert's weight matrix,
N x K. Every CTA computes one TILE_M x N_tile output tile by marching over K. Two costs follow that a
single "fraction of the dense rate" cannot express:

* Row padding: each touched expert's rows are rounded up to the token tile. TensorRT-LLM sizes that tile
  from the expected rows per expert: the next power of two of m, clamped to [8, 128]
  (`calculate_tile_tokens_dim`, tensorrt_llm/_torch/custom_ops/trtllm_gen_custom_ops.py), which pads m
  by a factor 1/ln 2 = 1.44 on average over m; above 128 rows whole 128-row tiles leave half a tile of
  zero rows per expert on average (m + 64). Mixtral-8x7B (8 experts, top-2: thousands of rows per
  expert) pads by a few per cent; 128-256 small experts with tens to hundreds of rows by 30-45 %.
* Per-tile fixed cost: before a tile's first MMA the pipeline fills (several K stages of TMA loads), and
  after its last the epilogue converts and writes TILE_M x N_tile outputs (32 KB in BF16 at the SM's
  share of HBM bandwidth, ~1.3 us on an H100); both take about the same time for any K, TILE_OVERHEAD_S
  per tile. In units of reduction length, K0 = TILE_OVERHEAD_S x (dense rate per SM) / (2 TILE_M
  TILE_N), so a tile of length K runs at K / (K + K0) of the streaming rate (K0 ~ 1070 for H100 FP8,
  ~270 on an H20 with a sixth of the FLOP/s per SM). Small experts have small K (Qwen3-30B-A3B's down
  projection: K = 768, or 384 under TP2), Mixtral's are large (K = 4096 and 14336).

The gate/up GEMM has N = 2·f (gated) or f, K = h; the down GEMM N = h, K = f (f the expert width on this
GPU after expert TP). The rate is the dense-GEMM rate of the operand format (the fitted dense
efficiency) times the fitted `moe_efficiency`, which keeps what the tiling does not explain (routing
imbalance across ranks, the autotuner's tile choices).

Constants, checked against aiconfigurator-core's silicon-measured TensorRT-LLM MoE tables
(`tenfold.perf.measured.serving.moe_seconds`; H100/H200/B200, BF16/FP8, Mixtral, Qwen3-30B/235B,
DeepSeek-V3 shapes, EP 1-8, TP 1-2, 1k-16k tokens; tests/perf/serving/test_grouped_gemm.py):
TILE_M = TILE_N = 128, the CTA tile of those kernels' large problems (128 x 128 x 64 on SM80,
128 x {128, 256} on SM90/SM100); TILE_OVERHEAD_S = 4 us. Modelling each table layer as these GEMMs
(against the weight read) plus its permute/activation/finalize traffic and one fixed floor, with one
fitted scale, the mean |log| error over 1k-16k tokens is 0.120 with a constant efficiency, 0.113 with
the padding, 0.100 with a per-tile cost alone and 0.091-0.093 with both (a per-tile time of 1, 2, 3, 4,
5 us gives 0.108, 0.102, 0.096, 0.093, 0.090; 4 us is kept, not the table optimum).
"""

from __future__ import annotations

import math

import numpy as np

TILE_M = 128
TILE_N = 128
TILE_MIN = 8
TILE_OVERHEAD_S = 4e-6
K_TILE_OVERHEAD = 1024.0


def padded_rows(pairs, touched, *, tile_m: int = TILE_M):
    """Rows the grouped GEMM computes for `pairs` token-expert pairs over `touched` experts (module
    docstring): per touched expert, its m = pairs/touched rows rounded up to the token tile. Below
    `tile_m` rows the tile is the next power of two of m (at least TILE_MIN), m/ln 2 on average over m;
    above, whole `tile_m` tiles, m + tile_m/2 on average; the smaller of the two is what the autotuner
    picks."""
    pairs = np.asarray(pairs, dtype=float)
    touched = np.maximum(np.asarray(touched, dtype=float), 1e-12)
    m = pairs / touched
    per_expert = np.maximum(TILE_MIN, np.minimum(m / math.log(2.0), m + tile_m / 2.0))
    return touched * per_expert


def k_efficiency(k: float, *, overhead: float = K_TILE_OVERHEAD) -> float:
    """Share of a tile's time spent in its MMA main loop for reduction length `k` (module docstring)."""
    return k / (k + overhead)


def tile_k_overhead(rate: float, sm_count: int | None) -> float:
    """The per-tile fixed time TILE_OVERHEAD_S as reduction length: the K one SM covers in that time
    at its share of the dense `rate` for a TILE_M x TILE_N tile. A GPU with few FLOP/s per SM (H20)
    loses less to it than an H100 or a B200; without an SM count, K_TILE_OVERHEAD (the H100 FP8 value)."""
    if not sm_count:
        return K_TILE_OVERHEAD
    return TILE_OVERHEAD_S * rate / sm_count / (2.0 * TILE_M * TILE_N)


def grouped_gemm_seconds(
    pairs,
    touched,
    *,
    hidden: int,
    width: int,
    gated: bool,
    rate: float,
    tile_m: int = TILE_M,
    k_overhead: float = K_TILE_OVERHEAD,
):
    """Compute-bound seconds of the gate/up and down grouped GEMMs for `pairs` token-expert pairs over
    `touched` experts on this GPU, expert width `width` (after expert TP), at `rate` FLOP/s."""
    rows = padded_rows(pairs, touched, tile_m=tile_m)
    n_up = (2 if gated else 1) * width
    up = 2.0 * rows * n_up * hidden / k_efficiency(hidden, overhead=k_overhead)
    down = 2.0 * rows * hidden * width / k_efficiency(width, overhead=k_overhead)
    return (up + down) / rate
