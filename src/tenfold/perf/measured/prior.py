"""A calibration whose GEMM efficiencies come from measured tables: the prior a fit can start from and
shrink toward.

Each "<arch>/<bits>" GEMM efficiency is `layer_gemm_efficiency` of one representative large training layer
on the architecture's representative GPU: a Llama-3-70B layer (hidden 8192, FFN 28672, 64 query and
8 KV heads) at TP 4 with 8192 tokens per micro-batch, forward, dgrad and wgrad. The precision that stands
for a bits class is the one the published runs of that generation use most: BF16 for 16 bits, FP8 with
per-tensor scaling on Hopper, MXFP8 (read from the block-scaled FP8 table, see tables.py) on Blackwell,
NVFP4 for 4 bits. Values are clipped into the fit's GEMM range (`Calibration.GEMM_BOUNDS`). Keys without a
table, and every other parameter, keep the committed calibration's values.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from types import MappingProxyType

from tenfold.perf.calibration import Calibration, load_calibration
from tenfold.perf.measured.gemm import REFERENCE_MODEL, REFERENCE_TOKENS, REFERENCE_TP, layer_gemm_efficiency
from tenfold.perf.measured.tables import data_root
from tenfold.perf.specs.models import load_model

# architecture -> (tenfold GPU whose table stands for it, bits class -> precision)
REPRESENTATIVE = {
    "ampere": ("a100-80gb", {"16": "bf16"}),
    "hopper": ("h100-sxm", {"16": "bf16", "8": "fp8"}),
    "blackwell": ("b200", {"16": "bf16", "8": "mxfp8", "4": "nvfp4"}),
    "blackwell-ultra": ("b300", {"16": "bf16", "8": "mxfp8", "4": "nvfp4"}),
}


def measured_gemm_prior(arch: str, bits_class: str) -> float | None:
    """Measured efficiency of the reference layer for one calibration key (None: no table)."""
    gpu, by_bits = REPRESENTATIVE.get(arch, ("", {}))
    precision = by_bits.get(bits_class)
    if precision is None:
        return None
    model = load_model(REFERENCE_MODEL)
    return layer_gemm_efficiency(gpu, precision, model, tp=REFERENCE_TP, tokens=REFERENCE_TOKENS)


def measured_gemm_efficiencies(keys: Iterable[str]) -> dict[str, float]:
    """ "<arch>/<bits>" key -> `measured_gemm_prior`, for the keys that have a table (empty without the
    tables installed)."""
    if data_root() is None:
        return {}
    out = {}
    for key in sorted(keys):
        value = measured_gemm_prior(*key.split("/"))
        if value is not None:
            out[key] = value
    return out


def prior_calibration(base: Calibration | None = None) -> Calibration | None:
    """`base` (default: the committed calibration) with each GEMM efficiency replaced by its measured
    prior where a table exists; None when the measured tables are not installed."""
    if data_root() is None:
        return None
    base = base if base is not None else load_calibration()
    lo, hi = base.GEMM_BOUNDS
    measured = measured_gemm_efficiencies(base.gemm_efficiency)
    gemm = dict(base.gemm_efficiency) | {k: min(max(v, lo), hi) for k, v in measured.items()}
    fit = {k: v for k, v in base.fit.items() if k == "fixed_parameters"}
    fit["prior"] = "aiconfigurator-core measured GEMM tables: " + ", ".join(measured)
    return replace(base, gemm_efficiency=MappingProxyType(gemm), fit=MappingProxyType(fit))
