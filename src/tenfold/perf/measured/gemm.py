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
from functools import lru_cache

import numpy as np

from tenfold.perf.calibration import Calibration
from tenfold.perf.measured.tables import GEMM_SYSTEMS, GemmTable, gemm_dtype, gemm_system, gemm_table
from tenfold.perf.specs.hardware import Hardware, load_hardware
from tenfold.perf.specs.models import ModelSpec, load_model
from tenfold.perf.specs.precision import Precision, get_precision
from tenfold.perf.training.compute import ShapeFactor, layer_gemms


def table_log_flops(table: GemmTable, m, n, k) -> np.ndarray:
    """log of the achieved FLOP/s at (m, n, k), interpolated as the module docstring says; arrays
    broadcast, NaN where no measured neighbour."""
    m, n, k = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (m, n, k)))
    cells = []
    for axis, x in zip((table.log_m, table.log_n, table.log_k), (m, n, k), strict=True):
        lx = np.clip(np.log(x), axis[0], axis[-1])
        if len(axis) == 1:
            cells.append((np.zeros(lx.shape, dtype=int), np.zeros(lx.shape)))
            continue
        i = np.clip(np.searchsorted(axis, lx, side="right") - 1, 0, len(axis) - 2)
        cells.append((i, (lx - axis[i]) / (axis[i + 1] - axis[i])))
    total, weight = np.zeros(m.shape), np.zeros(m.shape)
    for corner in range(8):
        idx, w = [], np.ones(m.shape)
        for axis, (i, t) in enumerate(cells):
            up = (corner >> axis) & 1
            idx.append(np.minimum(i + up, table.log_flops.shape[axis] - 1))
            w = w * (t if up else 1.0 - t)
        value = table.log_flops[tuple(idx)]
        ok = (w > 0) & np.isfinite(value)
        total += np.where(ok, w * np.where(ok, value, 0.0), 0.0)
        weight += np.where(ok, w, 0.0)
    return np.where(weight > 1e-12, total / np.maximum(weight, 1e-12), np.nan)


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
    log_flops = float(table_log_flops(table, m, n, k))
    return None if math.isnan(log_flops) else math.exp(log_flops) / peak


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
    rate = layer_flops_rate(table, model, tp=tp, tokens=tokens, ep=ep)
    return None if rate is None else rate / peak


def layer_flops_rate(
    table: GemmTable, model: ModelSpec, *, tp: int, tokens: float, ep: int = 1
) -> float | None:
    """The FLOP/s `table` measures over a layer's training-precision GEMMs (forward, dgrad, wgrad; dense
    and MoE layers weighted by their counts): total FLOPs over the sum of each GEMM's measured time. None
    where a shape has no measured neighbour."""
    kinds = [(n, moe) for n, moe in ((model.n_dense_layers, False), (model.moe_layers, True)) if n]
    flops, seconds = 0.0, 0.0
    for count, moe in kinds:
        for g in layer_gemms(model, moe=moe, tokens=tokens, tp=tp, ep=ep):
            if not g.low:
                continue
            M, N, K, c = _scalar(g.M), _scalar(g.N), _scalar(g.K), _scalar(g.count)
            for shape in ((M, N, K), (M, K, N), (N, K, M)):  # forward, dgrad, wgrad
                log_flops = float(table_log_flops(table, *shape))
                if math.isnan(log_flops):
                    return None
                f = count * c * 2.0 * M * N * K
                flops += f
                seconds += f / math.exp(log_flops)
    return flops / seconds if flops > 0 else None


# The reference training layer (also the prior's, `measured.prior`): a Llama-3-70B layer (hidden 8192,
# FFN 28672, 64 query and 8 KV heads) at TP 4 with 8192 tokens per micro-batch.
REFERENCE_MODEL = "llama3-70b"
REFERENCE_TP = 4
REFERENCE_TOKENS = 8192

# tenfold hardware -> the system whose tables give its shape factors. Only ratios between shapes are read
# here, so Meta's 500 W Grand Teton H100 (not in GEMM_SYSTEMS: its absolute rate is capped) uses the H100's.
SHAPE_SYSTEMS = GEMM_SYSTEMS | {"grandteton-h100": "h100_sxm"}
SHAPE_FACTOR_RANGE = (0.2, 1.5)
# Memoised: the few-candidate arrays a fit evaluates thousands of times; not the search's large plan
# arrays, which are seldom repeated and would cost more to key than to interpolate.
MEMO_MAX_SIZE = 256
MEMO_MAX_ENTRIES = 20_000


class ShapeEfficiency:
    """Per-shape GEMM efficiency relative to the reference layer, from one measured table.

    `factor(m, n, k)` is the table's achieved FLOP/s at (m, n, k) over the FLOP-weighted rate of the
    reference layer's forward, dgrad and wgrad GEMMs on the same table (so 1 means "as efficient as a large
    Llama-3-70B layer"). A calibration with `gemm_shapes = "measured"` (every GEMM) or
    "measured-experts" (the routed experts' only) multiplies its fitted "<arch>/<bits>" efficiency (then the
    efficiency of the reference layer) by it, per GEMM and pass (`training.compute.gemm_times`). Clipped
    to SHAPE_FACTOR_RANGE: below 0.2 a shape is latency-bound and its measured time mostly the launch the
    model already charges as `kernel_overhead_us`. Results for small argument arrays are memoised
    (MEMO_MAX_SIZE), since a fit evaluates the same shapes thousands of times.
    """

    def __init__(self, table: GemmTable, reference_log_flops: float) -> None:
        self.table = table
        self.reference_log_flops = reference_log_flops
        self._memo: dict[tuple, np.ndarray] = {}

    def __repr__(self) -> str:
        return f"ShapeEfficiency({self.table.system}/{self.table.dtype})"

    def factor(self, m, n, k) -> np.ndarray:
        m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
        key = None
        if max(m.size, n.size, k.size) <= MEMO_MAX_SIZE:
            key = (m.shape, n.shape, k.shape, m.tobytes(), n.tobytes(), k.tobytes())
            if key in self._memo:
                return self._memo[key]
        log_flops = table_log_flops(self.table, m, n, k)
        rel = np.exp(np.where(np.isfinite(log_flops), log_flops - self.reference_log_flops, 0.0))
        out = np.clip(rel, *SHAPE_FACTOR_RANGE)
        if key is not None and len(self._memo) < MEMO_MAX_ENTRIES:
            self._memo[key] = out
        return out


@lru_cache(maxsize=64)
def shape_efficiency(gpu: str, precision: str) -> ShapeEfficiency | None:
    """The per-shape factors of tenfold hardware `gpu` in `precision` (cached; None without a table)."""
    system = SHAPE_SYSTEMS.get(gpu)
    dtype = gemm_dtype(system, precision) if system else None
    table = gemm_table(system, dtype) if dtype else None
    if table is None:
        return None
    rate = layer_flops_rate(table, load_model(REFERENCE_MODEL), tp=REFERENCE_TP, tokens=REFERENCE_TOKENS)
    return None if rate is None else ShapeEfficiency(table, math.log(rate))


def shape_factors(
    hw: Hardware, precision: Precision, calibration: Calibration
) -> tuple[ShapeFactor | None, ShapeFactor | None]:
    """(training-precision, 16-bit) per-shape factors for `training.compute.rates` (which applies them to
    every GEMM or to the routed experts' only, by `calibration.gemm_shapes`): both None for a
    calibration with flat GEMM efficiencies, and each None where `hw` has no table for it (the flat
    roofline then prices those GEMMs)."""
    if calibration.gemm_shapes == "flat":
        return None, None
    out = []
    for name in (precision.name, "bf16"):
        shape = shape_efficiency(hw.name, name)
        out.append(shape.factor if shape is not None else None)
    return out[0], out[1]
