"""GEMM efficiency from measured tables: achieved FLOP/s over tenfold's dense peak, per shape and per layer.

Interpolation: the tables measure a full grid of (m, n, k) (m from 1 to 32768, n and k from 32 to 65536,
denser where kernels change tile). Between grid points the achieved FLOP/s is interpolated trilinearly in
(log m, log n, log k) on its logarithm, from the 8 nearest measured neighbours (the grid cell around the
shape): a power law in each size, so the latency moves smoothly between two measured sizes and an
interpolated efficiency always lies between its neighbours'. Corners the table lacks are left out and the
weights of the others renormalised. Outside the measured range each size is clamped to the nearest edge
(beyond 32768 tokens a GEMM is as efficient as at 32768).

Training GEMMs: a linear layer's forward Y[T, N] = X[T, K] W[K, N] is read at (m, n, k) = (T, N, K), its
dgrad dX = dY W^T at (T, K, N) and its wgrad dW = dY^T X at (N, K, T) (the reduction runs over tokens).
The tables were measured in one operand layout (inference's X W^T); the transposed layouts of the
backward GEMMs are assumed to run as fast. MoE experts are read as ordinary GEMMs of tokens-per-expert
rows (a grouped GEMM with balanced experts), not from the grouped-GEMM tables.
"""

from __future__ import annotations

import math

import numpy as np

from tenfold.perf.measured.tables import GemmTable, gemm_dtype, gemm_system, gemm_table
from tenfold.perf.specs.hardware import load_hardware
from tenfold.perf.specs.models import ModelSpec
from tenfold.perf.specs.precision import get_precision
from tenfold.perf.training.compute import layer_gemms


def _cell(axis: np.ndarray, x: float) -> tuple[int, float]:
    """Lower grid index and fraction of log-size `x` within its cell, clamped to the measured range."""
    if len(axis) == 1:
        return 0, 0.0
    x = min(max(x, axis[0]), axis[-1])
    i = int(np.clip(np.searchsorted(axis, x, side="right") - 1, 0, len(axis) - 2))
    return i, float((x - axis[i]) / (axis[i + 1] - axis[i]))


def table_log_flops(table: GemmTable, m: float, n: float, k: float) -> float | None:
    """log of the achieved FLOP/s at (m, n, k), interpolated as the module docstring says (None: no
    measured neighbour)."""
    axes = (table.log_m, table.log_n, table.log_k)
    cells = [_cell(ax, math.log(x)) for ax, x in zip(axes, (m, n, k), strict=True)]
    total, weight = 0.0, 0.0
    for corner in range(8):
        idx, w = [], 1.0
        for axis, (i, t) in enumerate(cells):
            up = (corner >> axis) & 1
            idx.append(min(i + up, table.log_flops.shape[axis] - 1))
            w *= t if up else 1.0 - t
        value = table.log_flops[tuple(idx)]
        if w > 0 and np.isfinite(value):
            total += w * value
            weight += w
    if weight <= 1e-12:
        return None
    return total / weight


def _peak(gpu: str, precision: str) -> float | None:
    try:
        return load_hardware(gpu).peak(get_precision(precision).peak_key)
    except ValueError:  # unknown GPU or precision, or no such tensor-core rate
        return None


def _table(gpu: str, precision: str) -> GemmTable | None:
    system = gemm_system(gpu)
    dtype = gemm_dtype(system, precision) if system else None
    return gemm_table(system, dtype) if dtype else None


def gemm_efficiency(gpu: str, precision: str, m: float, n: float, k: float) -> float | None:
    """Measured 2mnk/latency of Y[m, n] = X[m, k] W[k, n] over tenfold's dense peak for `precision` on
    tenfold hardware `gpu` (`load_hardware(gpu).peak(...)`); None where no table covers the pair."""
    if min(m, n, k) <= 0:
        raise ValueError(f"GEMM sizes must be > 0, got m={m}, n={n}, k={k}")
    table = _table(gpu, precision)
    peak = _peak(gpu, precision) if table else None
    if table is None or peak is None:
        return None
    log_flops = table_log_flops(table, m, n, k)
    return None if log_flops is None else math.exp(log_flops) / peak


def _scalar(x) -> float:
    return float(np.asarray(x, dtype=float).reshape(-1)[0])


def layer_gemm_efficiency(
    gpu: str,
    precision: str,
    model: ModelSpec,
    *,
    tp: int,
    tokens: float,
    ep: int = 1,
) -> float | None:
    """FLOP-weighted measured efficiency of one transformer layer's forward, dgrad and wgrad GEMMs.

    The GEMMs are `tenfold.perf.training.compute.layer_gemms` (QKV or MLA projections, attention output,
    FFN up/gate and down, or the MoE experts at tokens/tp·topk·ep/experts rows each and shared experts)
    for `tokens` tokens per micro-batch per TP group; the 16-bit router is left out. Dense and MoE layers
    are weighted by their counts in the model. The result is total FLOPs over the sum of each GEMM's
    FLOPs / efficiency, i.e. the single efficiency that gives the layer's measured GEMM time.
    None where any GEMM has no table.
    """
    table = _table(gpu, precision)
    peak = _peak(gpu, precision) if table else None
    if table is None or peak is None:
        return None
    kinds = [(n, moe) for n, moe in ((model.n_dense_layers, False), (model.moe_layers, True)) if n]
    flops, seconds = 0.0, 0.0
    for count, moe in kinds:
        for g in layer_gemms(model, moe=moe, tokens=tokens, tp=tp, ep=ep):
            if not g.low:
                continue
            M, N, K, c = _scalar(g.M), _scalar(g.N), _scalar(g.K), _scalar(g.count)
            for shape in ((M, N, K), (M, K, N), (N, K, M)):  # forward, dgrad, wgrad
                log_flops = table_log_flops(table, *shape)
                if log_flops is None:
                    return None
                f = count * c * 2.0 * M * N * K
                flops += f
                seconds += f / math.exp(log_flops)
    if flops <= 0:
        return None
    return flops / seconds / peak
