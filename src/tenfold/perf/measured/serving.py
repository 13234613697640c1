"""Measured serving kernels (optional): MoE, MLA decode and GQA/MHA decode attention times from NVIDIA's
aiconfigurator-core tables, for comparison with tenfold's step parts (`tenfold.perf.serving.step`).

Files (per system, backend and version; the newest version that measured the shape; TensorRT-LLM by
default):

* `moe/<backend>/<v>/moe_perf.parquet`: one MoE layer's fused expert computation on one GPU (routing
  kernels, permute, the two grouped GEMMs with the activation, finalize; no router GEMM, no shared
  experts, no dispatch collective), in ms, by operand type `moe_dtype`, `num_tokens` (tokens entering
  the layer on the rank: under attention DP the gathered tokens of the EP group, as aiconfigurator's
  `ops.MoE` takes the attention-DP size), hidden, the model's full `inter_size` (split by moe_tp),
  topk, experts, moe_tp, moe_ep and the routing `distribution` ("balanced", or power-law skew).
  Several kernels are measured per shape (CUTLASS, TRT-LLM-gen min-latency, DeepGEMM); the fastest one
  is kept, which is what the engine's autotuner picks.
* `mla/<backend>/<v>/generation_mla_perf.parquet`: one layer's MLA decode attention kernel over the
  latent cache (absorbed weights; projections excluded), by kv_cache_dtype, heads per rank, batch and
  cached tokens (`step`).
* `attention/<backend>/<v>/generation_attention_perf.parquet`: one layer's decode attention (XQA /
  FlashInfer) by query heads and KV heads per rank, head_dim, window, KV dtype, batch and cached tokens.

Between measured sizes the latency is interpolated on its logarithm, linearly in log(size) (for attention
first in context at each measured batch, then in batch); below the smallest size the smallest size's
latency holds (launch-bound); above the largest it follows the line through the last two measured points
(large batches were measured only at short contexts: see `_interp_2d`). Shapes whose
other keys were not measured give None: no extrapolation across models. Nothing is copied from the
package: the numbers are read where it is installed.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from tenfold.perf.measured.tables import COMM_SYSTEMS, data_root
from tenfold.perf.specs.models import ModelSpec

MOE_DTYPES = {"bf16": "bfloat16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4"}
KV_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}


def _version(path: Path) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", path.parent.name))


@lru_cache(maxsize=8)
def _files(system: str, family: str, backend: str, name: str) -> tuple[Path, ...]:
    """The table's files, newest version first (a newer version may re-measure only some shapes)."""
    root = data_root()
    if root is None:
        return ()
    return tuple(sorted((root / system / family / backend).glob(f"*/{name}"), key=_version, reverse=True))


@lru_cache(maxsize=32)
def _columns(path: Path) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    return {k: np.asarray(v) for k, v in pq.read_table(path).to_pydict().items()}


def _select(cols: dict[str, np.ndarray], **keys: object) -> np.ndarray:
    mask = np.ones(len(cols["latency"]), dtype=bool)
    for k, v in keys.items():
        mask &= cols[k] == v
    return mask


@lru_cache(maxsize=4096)
def _curves(
    system: str | None, family: str, backend: str, name: str, x: str, y: str | None, keys: tuple
) -> tuple | None:
    """Per distinct `y` value (or once if None): the measured `x` sizes and the fastest latency (ms) at
    each, for the rows matching `keys` ((column, value) pairs) in the newest version that measured
    them (cached: fits and sweeps ask for the same shapes again and again)."""
    for path in _files(system, family, backend, name) if system else ():
        cols = _columns(path)
        mask = _select(cols, **dict(keys))
        if not mask.any():
            continue
        xs, lat = cols[x][mask].astype(float), cols["latency"][mask].astype(float)
        if y is None:
            return ((None, *_best(xs, lat)),)
        ys = cols[y][mask].astype(float)
        return tuple((v, *_best(xs[ys == v], lat[ys == v])) for v in np.unique(ys))
    return None


def _interp_1d(x: np.ndarray, y: np.ndarray, at: float) -> float:
    """log-log interpolation over measured (x, y); flat below the range; above it the straight line
    through the last two points (a fixed cost plus bytes or FLOPs in proportion to the size)."""
    order = np.argsort(x)
    x, y = x[order], y[order]
    if at <= x[0]:
        return float(y[0])
    if at >= x[-1]:
        if len(x) == 1:
            return float(y[-1] * at / x[-1])
        slope = max((y[-1] - y[-2]) / (x[-1] - x[-2]), 0.0)
        return float(y[-1] + slope * (at - x[-1]))
    return float(np.exp(np.interp(math.log(at), np.log(x), np.log(y))))


def _best(keys: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fastest latency per distinct key (the kernel the autotuner would pick)."""
    uniq = np.unique(keys)
    return uniq, np.array([lat[keys == u].min() for u in uniq])


def moe_seconds(
    gpu: str,
    precision: str,
    *,
    tokens: float,
    hidden: int,
    inter: int,
    topk: int,
    experts: int,
    moe_tp: int,
    moe_ep: int,
    distribution: str = "balanced",
    backend: str = "trtllm",
) -> float | None:
    """Measured seconds of one MoE layer's expert computation on one GPU (module docstring) for `tokens`
    tokens entering the layer on the rank; None where that shape was not measured."""
    keys = dict(
        moe_dtype=MOE_DTYPES.get(precision),
        hidden_size=hidden,
        inter_size=inter,
        topk=topk,
        num_experts=experts,
        moe_tp_size=moe_tp,
        moe_ep_size=moe_ep,
        distribution=distribution,
    )
    system = COMM_SYSTEMS.get(gpu)
    curves = _curves(system, "moe", backend, "moe_perf.parquet", "num_tokens", None, tuple(keys.items()))
    if curves is None:
        return None
    _, x, y = curves[0]
    return _interp_1d(x, y, tokens) * 1e-3


def _interp_2d(curves: tuple, b: float, c: float) -> float:
    """`_interp_1d` in context at each measured batch whose contexts reach `c`, then in batch. Large
    batches were measured only at short contexts (the cache must fit), so beyond the largest batch that
    reaches `c` the latency follows the line in batch at that context (bandwidth-bound: bytes grow with
    the batch); if no batch reaches `c`, each batch's own line in context is used."""
    reach = [cv for cv in curves if cv[1][-1] >= c] or list(curves)
    xb = np.array([cv[0] for cv in reach], dtype=float)
    yb = np.array([_interp_1d(cs, ls, c) for _, cs, ls in reach])
    return _interp_1d(xb, yb, b)


def mla_decode_seconds(
    gpu: str, kv_precision: str, *, batch: float, ctx: float, heads_per_rank: int, backend: str = "trtllm"
) -> float | None:
    """Measured seconds of one layer's MLA decode attention for `batch` sequences of `ctx` cached tokens
    with `heads_per_rank` query heads on the GPU; None where not measured."""
    keys = (("kv_cache_dtype", KV_DTYPES.get(kv_precision)), ("num_heads", heads_per_rank))
    name = "generation_mla_perf.parquet"
    curves = _curves(COMM_SYSTEMS.get(gpu), "mla", backend, name, "step", "batch_size", keys)
    return None if curves is None else _interp_2d(curves, batch, ctx) * 1e-3


def attention_decode_seconds(
    gpu: str,
    kv_precision: str,
    *,
    batch: float,
    ctx: float,
    heads_per_rank: int,
    kv_heads_per_rank: int,
    head_dim: int,
    window: int = 0,
    backend: str = "trtllm",
) -> float | None:
    """Measured seconds of one layer's GQA/MHA decode attention on one GPU; None where not measured."""
    keys = dict(
        kv_cache_dtype=KV_DTYPES.get(kv_precision),
        num_heads=heads_per_rank,
        num_key_value_heads=kv_heads_per_rank,
        head_dim=head_dim,
        window_size=window,
    )
    name = "generation_attention_perf.parquet"
    system = COMM_SYSTEMS.get(gpu)
    curves = _curves(system, "attention", backend, name, "step", "batch_size", tuple(keys.items()))
    return None if curves is None else _interp_2d(curves, batch, ctx) * 1e-3


def layer_decode_attention_seconds(
    gpu: str, kv_precision: str, model: ModelSpec, *, tp: int, batch: float, ctx: float
) -> float | None:
    """Measured decode-attention seconds of an average layer of `model` under attention TP `tp`: the MLA
    kernel for MLA models, else the GQA/MHA kernel, with sliding-window layers (the model's
    `window_layer_fraction` of them, window `sliding_window`) read at their window; None where any
    needed shape was not measured."""
    if batch <= 0:
        return 0.0
    heads = model.heads // tp
    if model.is_mla:
        return mla_decode_seconds(gpu, kv_precision, batch=batch, ctx=ctx, heads_per_rank=heads)
    shape = dict(batch=batch, ctx=ctx, heads_per_rank=heads, kv_heads_per_rank=max(model.kv_heads // tp, 1))
    full = attention_decode_seconds(gpu, kv_precision, head_dim=model.head_dim, **shape)
    frac = model.window_layer_fraction if model.sliding_window else 0.0
    if frac <= 0 or full is None:
        return full
    local = attention_decode_seconds(
        gpu, kv_precision, head_dim=model.head_dim, window=model.sliding_window, **shape
    )
    return None if local is None else frac * local + (1.0 - frac) * full
