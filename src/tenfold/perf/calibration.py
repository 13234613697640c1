"""Calibration: the few physical efficiencies the analytic model cannot derive, fitted on published runs.

Parameters (all dimensionless fractions unless named otherwise):
* `gemm_efficiency["<arch>/<bits>"]`: fraction of the dense peak a large GEMM sustains on that architecture
  at that operand width (16, 8 or 4 bits), e.g. "hopper/8". Clock throttling under power limits,
  scheduling and epilogues all land here.
* `attention_efficiency`: flash attention's tensor-core rate relative to a 16-bit GEMM on the same GPU
  (the serving model applies it to the MMAs and the softmax exponentials charged one after the other).
* `hbm_efficiency`: achieved fraction of HBM bandwidth in memory-bound kernels (norms, activations,
  quantization, optimizer).
* `scaleup_efficiency`, `scaleout_efficiency`: achieved fraction of the per-direction link bandwidth for
  ring collectives inside a scale-up domain and across the network (NCCL bus bandwidth / line rate).
* `alltoall_efficiency`: all-to-all bandwidth relative to ring collectives (small messages, fan-out).
* `kernel_overhead_us`: fixed cost per kernel (launch, fill and drain of a GEMM's pipeline), microseconds.
* `torch_kernel_efficiency` (training only): the tensor-core rate of a PyTorch-native kernel stack
  (`Stack.kernels == "torch"`: torchtitan's torch.compile, torchao float8 and FSDP2) relative to the
  Transformer Engine stacks the GEMM efficiencies are fitted on, same GPU. Without it one Hopper GEMM
  efficiency had to serve both stacks: fitted on all rows it came out at 0.55, without the torchtitan
  2025 rows at 0.71. Every torchtitan row but one ran on Meta's 500 W Grand Teton hosts, so
  the value also carries their power cap; the data cannot separate the two.
* `moe_layer_overhead_us`: fixed cost per MoE layer per pass: the dropless token dispatcher's
  device-to-host synchronisation on the per-expert token counts, and the router / top-k / permutation
  kernel chain around it (Megatron-Core's all-to-all dispatcher), microseconds. Not charged when the
  whole step is one CUDA graph (`Stack.full_iteration_graph`), which needs sync-free MoE.

`uncertainty` (optional `[uncertainty]` section): the spread of the model's cross-validated error, from
which every estimate's 80 % interval comes (`tenfold.perf.uncertainty`).

Fixed, not fitted: per-step latencies of the links, the GEMM efficiency used for an architecture
the validation set does not cover, and `gemm_shapes`: "flat" (one efficiency per architecture and width
for every GEMM shape, tiles padded to 128 rows) or "measured" (that efficiency is the reference layer's,
and each GEMM is scaled by its shape's measured rate relative to it, from NVIDIA's kernel tables where
the GPU has them: `tenfold.perf.measured.gemm.ShapeEfficiency`) or "measured-experts" (only the routed
experts' GEMMs are scaled so; docs/perf.md says which the committed file uses and why). No parameter is
per row or per model.

`InferenceCalibration` (file `data/calibration/inference.toml`, fitted on `inference_runs.csv`) is the same
kind of object for the serving model, with its own GEMM efficiencies (inference kernels differ from
training's) and two more parameters:
* `moe_efficiency`: grouped expert GEMMs reach this fraction of the dense-GEMM roofline beyond what their
  tiling explains (serving/grouped_gemm.py charges token-tile padding and a per-tile fixed cost, which
  make small experts slower per FLOP than large ones): routing imbalance across experts and ranks, the
  autotuner's tile choices.
* `step_overhead_us`: fixed cost per engine step (scheduler, sampling, host-device synchronisation).
No parameter charges a fixed cost per touched expert: a grouped GEMM runs all touched experts' tiles
concurrently across the SMs, so the serving model charges their weight bytes instead (serving/step.py).
Parameters listed in its `[fit] fixed_parameters` keep their committed values during a fit.

This module holds the data only (the class, load and save); `tenfold.perf.validation.fit` fits it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from tenfold.perf.comm import Links
from tenfold.perf.specs.catalog import data_dir, read_toml
from tenfold.perf.specs.hardware import Hardware
from tenfold.perf.uncertainty import Uncertainty, uncertainty_from_dict, uncertainty_to_toml

# An architecture without its own fitted value borrows its predecessor's (Blackwell Ultra -> Blackwell).
ARCH_FALLBACK = {"blackwell-ultra": "blackwell", "cdna4": "cdna3"}
FRACTIONS = (
    "attention_efficiency",
    "hbm_efficiency",
    "scaleup_efficiency",
    "scaleout_efficiency",
    "alltoall_efficiency",
)
GEMM_SHAPES = ("flat", "measured", "measured-experts")
# Physical ranges the fit may move each parameter in (documented in docs/perf.md):
# GEMMs reach 30-95 % of the dense peak; FlashAttention-3 reaches about a GEMM's efficiency in the forward
# and less in the backward; streaming kernels reach at most ~92 % of HBM bandwidth; NCCL bus bandwidth
# reaches ~85 % of NVLink and ~95 % of InfiniBand line rate; a kernel costs 1-10 us beyond its work;
# an MoE layer's dispatch synchronisation costs at most a few milliseconds.
BOUNDS = {
    "gemm": (0.30, 0.95),
    "attention_efficiency": (0.40, 1.10),
    "hbm_efficiency": (0.50, 0.92),
    "scaleup_efficiency": (0.50, 0.85),
    "scaleout_efficiency": (0.50, 0.95),
    "alltoall_efficiency": (0.30, 1.00),
    "kernel_overhead_us": (1.0, 10.0),
    "moe_layer_overhead_us": (0.0, 3000.0),
    "torch_kernel_efficiency": (0.50, 1.10),
    "moe_efficiency": (0.20, 1.00),
    "step_overhead_us": (0.0, 5000.0),
}


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """Fitted efficiencies (see the module docstring). Load with `load_calibration()`."""

    FRACTION_FIELDS: ClassVar[tuple[str, ...]] = (*FRACTIONS, "torch_kernel_efficiency")
    OVERHEAD_FIELDS: ClassVar[tuple[str, ...]] = ("kernel_overhead_us", "moe_layer_overhead_us")
    GEMM_BOUNDS: ClassVar[tuple[float, float]] = BOUNDS["gemm"]
    PARAM_BOUNDS: ClassVar[MappingProxyType] = MappingProxyType(BOUNDS)
    FILE: ClassVar[str] = "training.toml"

    gemm_efficiency: MappingProxyType
    attention_efficiency: float
    hbm_efficiency: float
    scaleup_efficiency: float
    scaleout_efficiency: float
    alltoall_efficiency: float
    kernel_overhead_us: float
    moe_layer_overhead_us: float = 0.0
    torch_kernel_efficiency: float = 1.0
    scaleup_latency_us: float = 3.0
    scaleout_latency_us: float = 8.0
    fallback_gemm_efficiency: float = 0.65
    gemm_shapes: str = "flat"
    uncertainty: Uncertainty | None = field(default=None, compare=False)
    fit: MappingProxyType = field(default_factory=lambda: MappingProxyType({}), compare=False)

    def __post_init__(self) -> None:
        if self.gemm_shapes not in GEMM_SHAPES:
            raise ValueError(f"gemm_shapes must be one of {', '.join(GEMM_SHAPES)}, got {self.gemm_shapes!r}")
        for key in self.FRACTION_FIELDS:
            v = getattr(self, key)
            if not 0.0 < v <= 1.5:
                raise ValueError(f"{key} must be in (0, 1.5], got {v}")
        for key, v in self.gemm_efficiency.items():
            if not 0.0 < v <= 1.0:
                raise ValueError(f"gemm_efficiency[{key!r}] must be in (0, 1], got {v}")
        for key in self.OVERHEAD_FIELDS:
            if getattr(self, key) < 0:
                raise ValueError(f"{key} must be >= 0, got {getattr(self, key)}")

    def _key(self, arch: str, bits_class: str) -> str | None:
        while arch:
            if f"{arch}/{bits_class}" in self.gemm_efficiency:
                return f"{arch}/{bits_class}"
            arch = ARCH_FALLBACK.get(arch, "")
        return None

    def gemm(self, arch: str, bits_class: str) -> float:
        """GEMM efficiency for an architecture and operand width (borrowing the predecessor
        architecture's value via ARCH_FALLBACK), else the conservative fallback: the lowest value fitted
        for that operand width on any architecture (capped by `fallback_gemm_efficiency`), so hardware
        nobody calibrated never looks better than hardware that was."""
        key = self._key(arch, bits_class)
        if key:
            return self.gemm_efficiency[key]
        same_width = [v for k, v in self.gemm_efficiency.items() if k.endswith(f"/{bits_class}")]
        return min([self.fallback_gemm_efficiency, *same_width])

    def gemm_source(self, arch: str, bits_class: str) -> str:
        """Where `gemm(arch, bits_class)` comes from: a measured kernel table scaled by the fit, a value
        fitted on published runs, or the conservative fallback."""
        key = self._key(arch, bits_class)
        if key is None:
            return "fallback: no published run or kernel table for this GPU and width"
        if key in self.fit.get("gemm_tied", ()):
            tables = str(self.fit.get("gemm_reference", "aiconfigurator-core")).split(":")[0]
            scale = self.fit.get("gemm_tied_scale", "?")
            source = f"measured kernel table ({tables}, {key}) x fitted {scale}"
        else:
            source = f"fitted on published runs ({key})"
        if self.gemm_shapes != "flat":
            which = "expert GEMM" if self.gemm_shapes == "measured-experts" else "GEMM"
            source += f", scaled per {which} shape by measured kernel tables where the GPU has them"
        return source

    def kernel_efficiency(self, kernels: str) -> float:
        """Compute-rate factor of a software stack's kernel family (`Stack.kernels`): 1 for Transformer
        Engine ("te"), `torch_kernel_efficiency` for PyTorch-native kernels ("torch")."""
        return self.torch_kernel_efficiency if kernels == "torch" else 1.0

    def is_calibrated(self, arch: str, bits_class: str) -> bool:
        return self._key(arch, bits_class) is not None

    def links(self, hw: Hardware) -> Links:
        out = hw.scaleout_Bps if hw.scaleout_Bps > 0 else hw.scaleup_Bps / 10.0
        return Links(
            domain=hw.placement_domain,
            up_Bps=hw.scaleup_Bps * self.scaleup_efficiency,
            out_Bps=out * self.scaleout_efficiency,
            up_latency_s=self.scaleup_latency_us * 1e-6,
            out_latency_s=self.scaleout_latency_us * 1e-6,
            a2a_efficiency=self.alltoall_efficiency,
        )

    # ---- the parameter vector the fit moves ----------------------------------------------------
    def free_names(self) -> list[str]:
        names = (
            [f"gemm:{k}" for k in sorted(self.gemm_efficiency)]
            + list(self.FRACTION_FIELDS)
            + list(self.OVERHEAD_FIELDS)
        )
        fixed = set(self.fit.get("fixed_parameters", ()))
        return [n for n in names if n not in fixed]

    def bounds(self, name: str) -> tuple[float, float]:
        """The physical range a free parameter may take (GEMM efficiencies share one range)."""
        return self.GEMM_BOUNDS if name.startswith("gemm:") else self.PARAM_BOUNDS[name]

    def to_vector(self) -> np.ndarray:
        """Free parameters mapped to the real line: x = logit((v - lo) / (hi - lo)) within BOUNDS."""
        vals = []
        for name in self.free_names():
            v = self.gemm_efficiency[name[5:]] if name.startswith("gemm:") else getattr(self, name)
            lo, hi = self.bounds(name)
            vals.append(_logit((v - lo) / (hi - lo)))
        return np.array(vals)

    def from_vector(self, x: np.ndarray) -> Calibration:
        gemm = dict(self.gemm_efficiency)
        kw: dict[str, float] = {}
        for name, v in zip(self.free_names(), x, strict=True):
            lo, hi = self.bounds(name)
            value = lo + (hi - lo) * _sigmoid(v)
            if name.startswith("gemm:"):
                gemm[name[5:]] = value
            else:
                kw[name] = value
        return replace(self, gemm_efficiency=MappingProxyType(gemm), **kw)


@dataclass(frozen=True, kw_only=True)
class InferenceCalibration(Calibration):
    """The serving model's fitted efficiencies (module docstring). Load with
    `load_calibration(kind="inference")`. Inference GEMM efficiencies may fall lower than training's
    (small decode GEMMs, and FP4 kernels that realise a smaller share of their doubled peak: compare the
    TensorRT-LLM throughput tables, https://github.com/NVIDIA/TensorRT-LLM/blob/main/docs/source/performance/perf-overview.md,
    with each GPU's dense peak)."""

    FRACTION_FIELDS: ClassVar[tuple[str, ...]] = (*FRACTIONS, "moe_efficiency")
    OVERHEAD_FIELDS: ClassVar[tuple[str, ...]] = (
        "kernel_overhead_us",
        "moe_layer_overhead_us",
        "step_overhead_us",
    )
    GEMM_BOUNDS: ClassVar[tuple[float, float]] = (0.15, 0.95)
    # The serving model charges attention's exponentials after its MMAs (serving/step.py), so an
    # efficiency above 1 means the kernel overlaps them. The bound, 1.5, reproduces the best published
    # kernel (FlashAttention-3 on H100: 0.75 of the BF16 peak, about 1.2 PFLOP/s in FP8) with the
    # fitted Hopper GEMM efficiencies; a fit may not make attention faster than that.
    PARAM_BOUNDS: ClassVar[MappingProxyType] = MappingProxyType(
        {**BOUNDS, "attention_efficiency": (0.40, 1.5)}
    )
    FILE: ClassVar[str] = "inference.toml"

    moe_efficiency: float = 1.0
    step_overhead_us: float = 0.0


RETIRED = frozenset({"expert_overhead_us"})
KINDS = {"training": Calibration, "inference": InferenceCalibration}


def _logit(p: float) -> float:
    p = min(max(p, 1e-3), 1 - 1e-3)
    return math.log(p / (1 - p))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def calibration_from_dict(d: dict, *, kind: str = "training") -> Calibration:
    p, fixed = d.get("parameters", {}), d.get("fixed", {})
    # Retired: the serving model no longer charges a fixed cost per touched expert (serving/step.py),
    # so older inference files load with the value dropped.
    p = {k: v for k, v in p.items() if k not in RETIRED}
    return calibration_kind(kind)(
        gemm_efficiency=MappingProxyType({str(k): float(v) for k, v in d["gemm_efficiency"].items()}),
        fit=MappingProxyType(dict(d.get("fit", {}))),
        uncertainty=uncertainty_from_dict(d["uncertainty"]) if "uncertainty" in d else None,
        **{k: float(v) for k, v in p.items()},
        **{k: v if k == "gemm_shapes" else float(v) for k, v in fixed.items()},
    )


def calibration_kind(kind: str) -> type[Calibration]:
    """The calibration class for 'training' or 'inference' (ValueError naming the choices otherwise)."""
    if kind not in KINDS:
        raise ValueError(f"unknown calibration kind {kind!r}; known: {', '.join(KINDS)}")
    return KINDS[kind]


def load_calibration(path: str | Path | None = None, *, kind: str = "training") -> Calibration:
    """The committed fit (`tenfold/data/calibration/training.toml`, or `inference.toml` for
    kind="inference") or a file of the same layout."""
    src = Path(path) if path is not None else data_dir("calibration") / calibration_kind(kind).FILE
    return calibration_from_dict(read_toml(src), kind=kind)


def calibration_to_toml(cal: Calibration, *, header: str = "") -> str:
    lines = [f"# {line}" for line in header.splitlines()] + ["", "[gemm_efficiency]"]
    lines += [f'"{k}" = {v:.4f}' for k, v in sorted(cal.gemm_efficiency.items())]
    lines += ["", "[parameters]"]
    lines += [f"{k} = {getattr(cal, k):.4f}" for k in (*cal.FRACTION_FIELDS, *cal.OVERHEAD_FIELDS)]
    lines += ["", "[fixed]"]
    lines += [
        f"{k} = {getattr(cal, k)}"
        for k in ("scaleup_latency_us", "scaleout_latency_us", "fallback_gemm_efficiency")
    ]
    if cal.gemm_shapes != "flat":
        lines.append(f'gemm_shapes = "{cal.gemm_shapes}"')
    if cal.uncertainty is not None:
        lines += ["", *uncertainty_to_toml(cal.uncertainty)]
    if cal.fit:
        lines += ["", "[fit]"]
        for k, v in cal.fit.items():
            if isinstance(v, str):
                lines.append(f'{k} = "{v}"')
            elif isinstance(v, list | tuple):
                lines.append(f"{k} = [{', '.join(repr(str(x)).replace(chr(39), chr(34)) for x in v)}]")
            else:
                lines.append(f"{k} = {v!r}")
    return "\n".join(lines) + "\n"
