"""Locate and load the silicon-measured kernel tables of NVIDIA's aiconfigurator-core (optional dependency).

aiconfigurator-core (https://pypi.org/project/aiconfigurator-core/, Apache-2.0; source
https://github.com/ai-dynamo/aiconfigurator) ships, per system, GEMM latencies measured on the GPU by
(m, n, k) and operand type, and NCCL collective latencies by message size. tenfold reads its parquet
files where the package is installed (`pip install tenfold[measured]`) and never copies their numbers.

Files: `<package>/systems/data/<system>/gemm/<framework>/<version>/gemm_perf.parquet` (latency in ms of
Y[m, n] = X[m, k] W[k, n]) and `<package>/systems/data/<system>/comm/nccl/<version>/nccl_perf.parquet`
(latency in ms by op, GPU count and message size in elements of `nccl_dtype`).

Which GEMM table: every framework's file of the system (TensorRT-LLM, SGLang, vLLM) is read, and each
shape keeps the fastest kernel measured for that operand type. For 16-bit operands every framework calls
cuBLAS through torch (`torch_flow`, `torch.nn.functional.linear`), which is what Transformer Engine's
BF16 linear layers also run; for FP8 the candidates are cuBLASLt scaled-mm and CUTLASS kernels (TE runs
cuBLASLt) and for block-scaled FP8 DeepGEMM and CUTLASS. The fastest one per shape is the closest
stand-in for a tuned training kernel; it is slightly optimistic where measurements are noisy.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

PACKAGE = "aiconfigurator_core"

# tenfold hardware name -> aiconfigurator system. The H800 is the H100 SXM5's die, SM count and clocks
# with NVLink cut to 400 GB/s (8 links): its GEMMs are the H100's, its collectives are not.
GEMM_SYSTEMS = {
    "a100-80gb": "a100_sxm",
    "h100-sxm": "h100_sxm",
    "h800": "h100_sxm",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "gb200": "gb200",
    "b300": "b300_sxm",
    "gb300": "gb300",
}
COMM_SYSTEMS = {name: system for name, system in GEMM_SYSTEMS.items() if name != "h800"}
BLACKWELL_SYSTEMS = frozenset({"b200_sxm", "gb200", "b300_sxm", "gb300"})

# tenfold precision -> aiconfigurator gemm_dtype. FP16 runs at the BF16 rate on the same tensor cores,
# so it reads the bfloat16 table. FP8 with per-tensor scaling is "fp8". MXFP8 (1x32 E8M0 block scales)
# has no table of its own: on Blackwell, DeepSeek-style block-scaled FP8 ("fp8_block", 1x128 / 128x128
# scales, DeepGEMM) runs on the same MXFP8 tensor-core instructions (DeepGEMM converts its scales to
# UE8M0 on SM100), so mxfp8 maps to fp8_block there; Hopper has no MXFP8 tensor cores (no table).
# NVFP4 maps to "nvfp4" (Blackwell only). MXFP4 has no table.
DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "mxfp8": "fp8_block", "nvfp4": "nvfp4"}
BLACKWELL_ONLY = frozenset({"mxfp8", "nvfp4"})


def available() -> bool:
    """True when aiconfigurator-core and pyarrow are installed (the `measured` extra)."""
    return importlib.util.find_spec(PACKAGE) is not None and importlib.util.find_spec("pyarrow") is not None


def data_root() -> Path | None:
    """The package's `systems/data` folder, found through importlib (None when not installed)."""
    if not available():
        return None
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for loc in locations:
        root = Path(loc) / "systems" / "data"
        if root.is_dir():
            return root
    return None


def gemm_system(gpu: str) -> str | None:
    """The aiconfigurator system whose GEMM tables stand for tenfold hardware `gpu` (None: no table)."""
    return GEMM_SYSTEMS.get(gpu)


def comm_system(gpu: str) -> str | None:
    """The aiconfigurator system whose NCCL tables stand for tenfold hardware `gpu` (None: no table)."""
    return COMM_SYSTEMS.get(gpu)


def gemm_dtype(system: str, precision: str) -> str | None:
    """The aiconfigurator gemm_dtype for a tenfold precision on `system` (see DTYPES; None: no mapping)."""
    name = precision.lower()
    if name in BLACKWELL_ONLY and system not in BLACKWELL_SYSTEMS:
        return None
    return DTYPES.get(name)


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", path.parent.name))


@dataclass(frozen=True, kw_only=True)
class GemmTable:
    """Fastest measured latency per shape on a full (m, n, k) grid of one system and operand type.

    log_m, log_n, log_k: natural logs of the measured sizes (ascending); log_flops[i, j, l]: log of the
    achieved FLOP/s 2mnk/latency at (m_i, n_j, k_l), NaN where no shape was measured; sources: the files
    read (framework/version).
    """

    system: str
    dtype: str
    log_m: np.ndarray
    log_n: np.ndarray
    log_k: np.ndarray
    log_flops: np.ndarray
    sources: tuple[str, ...]


@lru_cache(maxsize=64)
def gemm_table(system: str, dtype: str) -> GemmTable | None:
    """The GEMM table of `system` for `dtype` (cached; None when not installed or not measured)."""
    root = data_root()
    if root is None:
        return None
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    parts, sources = [], []
    for path in sorted((root / system / "gemm").glob("*/*/gemm_perf.parquet")):
        t = pq.read_table(path, columns=["gemm_dtype", "m", "n", "k", "latency"])
        t = t.filter(pc.equal(t["gemm_dtype"], dtype))
        if t.num_rows:
            parts.append([t[c].to_numpy().astype(float) for c in ("m", "n", "k", "latency")])
            sources.append(f"{path.parent.parent.name}/{path.parent.name}")
    if not parts:
        return None
    m, n, k, lat_ms = (np.concatenate(col) for col in zip(*parts, strict=True))
    ok = (lat_ms > 0) & (m > 0) & (n > 0) & (k > 0)
    m, n, k, lat_ms = m[ok], n[ok], k[ok], lat_ms[ok]
    axes = [np.unique(x) for x in (m, n, k)]
    idx = tuple(np.searchsorted(ax, x) for ax, x in zip(axes, (m, n, k), strict=True))
    best = np.full(tuple(len(ax) for ax in axes), np.nan)
    np.fmin.at(best, idx, lat_ms * 1e-3)
    mm, nn, kk = np.meshgrid(*axes, indexing="ij")
    log_flops = np.log(2.0 * mm * nn * kk) - np.log(best)
    return GemmTable(
        system=system,
        dtype=dtype,
        log_m=np.log(axes[0]),
        log_n=np.log(axes[1]),
        log_k=np.log(axes[2]),
        log_flops=log_flops,
        sources=tuple(sources),
    )


@dataclass(frozen=True, kw_only=True)
class NcclTable:
    """Median measured latency (s) of one collective by GPU count and message size (bytes, ascending)."""

    system: str
    op: str
    version: str
    curves: dict  # num_gpus -> (message_bytes array, latency_s array)


@lru_cache(maxsize=64)
def nccl_table(system: str, op: str) -> NcclTable | None:
    """The newest NCCL version's table of `op` on `system`, 16-bit elements (cached; None if absent)."""
    root = data_root()
    if root is None:
        return None
    import pyarrow.parquet as pq

    files = sorted((root / system / "comm" / "nccl").glob("*/nccl_perf.parquet"), key=_version_key)
    for path in reversed(files):
        d = pq.read_table(path, columns=["op_name", "nccl_dtype", "num_gpus", "message_size", "latency"])
        d = d.to_pydict()
        rows: dict[tuple[int, int], list[float]] = {}
        for o, dt, g, size, lat in zip(*d.values(), strict=True):
            if o == op and dt == "half" and lat > 0:
                rows.setdefault((g, size), []).append(lat * 1e-3)
        if not rows:
            continue  # an older release may lack this op (h100_sxm 2.23 has no all_reduce)
        curves = {}
        for g in sorted({g for g, _ in rows}):
            sizes = sorted(s for gg, s in rows if gg == g)
            curves[g] = (
                np.array(sizes, dtype=float) * 2.0,  # half: 2 bytes per element
                np.array([float(np.median(rows[(g, s)])) for s in sizes]),
            )
        return NcclTable(system=system, op=op, version=path.parent.name, curves=curves)
    return None
