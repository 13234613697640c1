"""Calibration: the few physical efficiencies the analytic model cannot derive, fitted on published runs.

Parameters (all dimensionless fractions unless named otherwise):
* `gemm_efficiency["<arch>/<bits>"]`: fraction of the dense peak a large GEMM sustains on that architecture
  at that operand width (16, 8 or 4 bits), e.g. "hopper/8". Clock throttling under power limits,
  scheduling and epilogues all land here.
* `attention_efficiency`: flash attention's tensor-core rate relative to a 16-bit GEMM on the same GPU.
* `hbm_efficiency`: achieved fraction of HBM bandwidth in memory-bound kernels (norms, activations,
  quantization, optimizer).
* `scaleup_efficiency`, `scaleout_efficiency`: achieved fraction of the per-direction link bandwidth for
  ring collectives inside a scale-up domain and across the network (NCCL bus bandwidth / line rate).
* `alltoall_efficiency`: all-to-all bandwidth relative to ring collectives (small messages, fan-out).
* `kernel_overhead_us`: fixed cost per kernel (launch, fill and drain of a GEMM's pipeline), microseconds.
* `moe_layer_overhead_us`: fixed cost per MoE layer per pass: the dropless token dispatcher's
  device-to-host synchronisation on the per-expert token counts, and the router / top-k / permutation
  kernel chain around it (Megatron-Core's all-to-all dispatcher), microseconds.

Fixed, not fitted: per-step latencies of the links, and the GEMM efficiency used for an architecture
the validation set does not cover. No parameter is per row or per model.

`InferenceCalibration` (file `data/calibration/inference.toml`, fitted on `inference_runs.csv`) is the same
kind of object for the serving model, with its own GEMM efficiencies (inference kernels differ from
training's) and two more parameters:
* `moe_efficiency`: grouped expert GEMMs reach this fraction of the dense-GEMM roofline (routing imbalance
  across experts and ranks, per-expert tiles, token permutation).
* `step_overhead_us`: fixed cost per engine step (scheduler, sampling, host-device synchronisation).
* `expert_overhead_us`: fixed cost per expert a step touches per MoE layer (each expert is a separate
  problem in the grouped GEMMs: tile setup, partial waves, the permutation around it).
Parameters listed in its `[fit] fixed_parameters` keep their committed values during a fit.

`fit_calibration()` minimises the reliability-weighted mean absolute percentage error over the shipped
validation rows with a Nelder-Mead search on transformed parameters (logit for fractions, log for the
overhead); `leave_one_out()` refits without each row in turn to measure how well the model generalises.
Run `python -m tenfold.perf.calibration --write` to refit and rewrite `data/calibration/training.toml`.
"""

from __future__ import annotations

import argparse
import datetime
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from tenfold.perf.catalog import data_dir, read_toml
from tenfold.perf.comm import Links
from tenfold.perf.hardware import Hardware

# An architecture without its own fitted value borrows its predecessor's (Blackwell Ultra -> Blackwell).
ARCH_FALLBACK = {"blackwell-ultra": "blackwell", "cdna4": "cdna3"}
FRACTIONS = (
    "attention_efficiency",
    "hbm_efficiency",
    "scaleup_efficiency",
    "scaleout_efficiency",
    "alltoall_efficiency",
)
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
    "moe_efficiency": (0.20, 1.00),
    "step_overhead_us": (0.0, 5000.0),
    "expert_overhead_us": (0.0, 20.0),
}


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """Fitted efficiencies (see the module docstring). Load with `load_calibration()`."""

    FRACTION_FIELDS: ClassVar[tuple[str, ...]] = FRACTIONS
    OVERHEAD_FIELDS: ClassVar[tuple[str, ...]] = ("kernel_overhead_us", "moe_layer_overhead_us")
    GEMM_BOUNDS: ClassVar[tuple[float, float]] = BOUNDS["gemm"]
    FILE: ClassVar[str] = "training.toml"

    gemm_efficiency: MappingProxyType
    attention_efficiency: float
    hbm_efficiency: float
    scaleup_efficiency: float
    scaleout_efficiency: float
    alltoall_efficiency: float
    kernel_overhead_us: float
    moe_layer_overhead_us: float = 0.0
    scaleup_latency_us: float = 3.0
    scaleout_latency_us: float = 8.0
    fallback_gemm_efficiency: float = 0.65
    fit: MappingProxyType = field(default_factory=lambda: MappingProxyType({}), compare=False)

    def __post_init__(self) -> None:
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
        architecture's value via ARCH_FALLBACK), else the fixed fallback."""
        key = self._key(arch, bits_class)
        return self.gemm_efficiency[key] if key else self.fallback_gemm_efficiency

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
        return self.GEMM_BOUNDS if name.startswith("gemm:") else BOUNDS[name]

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
    (small decode GEMMs, FP4 kernels that realise a smaller share of their doubled peak: research A10)."""

    FRACTION_FIELDS: ClassVar[tuple[str, ...]] = (*FRACTIONS, "moe_efficiency")
    OVERHEAD_FIELDS: ClassVar[tuple[str, ...]] = (
        "kernel_overhead_us",
        "moe_layer_overhead_us",
        "step_overhead_us",
        "expert_overhead_us",
    )
    GEMM_BOUNDS: ClassVar[tuple[float, float]] = (0.15, 0.95)
    FILE: ClassVar[str] = "inference.toml"

    moe_efficiency: float = 1.0
    step_overhead_us: float = 0.0
    expert_overhead_us: float = 0.0


KINDS = {"training": Calibration, "inference": InferenceCalibration}


def _logit(p: float) -> float:
    p = min(max(p, 1e-3), 1 - 1e-3)
    return math.log(p / (1 - p))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def calibration_from_dict(d: dict, *, kind: str = "training") -> Calibration:
    p, fixed = d.get("parameters", {}), d.get("fixed", {})
    return _kind(kind)(
        gemm_efficiency=MappingProxyType({str(k): float(v) for k, v in d["gemm_efficiency"].items()}),
        fit=MappingProxyType(dict(d.get("fit", {}))),
        **{k: float(v) for k, v in p.items()},
        **{k: float(v) for k, v in fixed.items()},
    )


def _kind(kind: str) -> type[Calibration]:
    if kind not in KINDS:
        raise ValueError(f"unknown calibration kind {kind!r}; known: {', '.join(KINDS)}")
    return KINDS[kind]


def load_calibration(path: str | Path | None = None, *, kind: str = "training") -> Calibration:
    """The committed fit (`tenfold/data/calibration/training.toml`, or `inference.toml` for
    kind="inference") or a file of the same layout."""
    src = Path(path) if path is not None else data_dir("calibration") / _kind(kind).FILE
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


# ---- fitting -----------------------------------------------------------------------------------
RELIABILITY_WEIGHT = {"high": 1.0, "medium": 0.5, "low": 0.25}
ERROR_CAP = 0.5


def nelder_mead(f, x0: np.ndarray, *, step: float = 0.3, iters: int = 600, tol: float = 1e-6) -> np.ndarray:
    """Minimise f from x0 (Nelder & Mead 1965, standard coefficients). Plain and dependency-free."""
    n = len(x0)
    simplex = [x0.astype(float)] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        xr = centroid + (centroid - simplex[-1])
        fr = f(xr)
        if fr < values[0]:
            xe = centroid + 2.0 * (centroid - simplex[-1])
            fe = f(xe)
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(xc)
            if fc < values[-1]:
                simplex[-1], values[-1] = xc, fc
            else:
                best = simplex[0]
                simplex = [best] + [best + 0.5 * (x - best) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    return simplex[int(np.argmin(values))]


def _validator(kind: str):
    """The validation module whose `load_cases` / `predict_case` a fit of this kind uses."""
    _kind(kind)
    if kind == "inference":
        from tenfold.perf import validate_serving

        return validate_serving
    from tenfold.perf import validate

    return validate


def fit_calibration(
    cases=None,
    *,
    start: Calibration | None = None,
    iters: int = 600,
    restarts: int = 2,
    exclude: frozenset[str] = frozenset(),
    kind: str = "training",
) -> Calibration:
    """Fit the free parameters on validation cases (default: the shipped rows), leaving out `exclude` ids.

    Objective: reliability-weighted mean |predicted/measured - 1| over the rows that can be predicted,
    each row's error capped at `ERROR_CAP` so that one unexplained outlier cannot move every efficiency.
    `kind` picks the model: "training" (training_runs.csv) or "inference" (inference_runs.csv).
    """
    validate = _validator(kind)
    cases = validate.load_cases() if cases is None else cases
    cases = [c for c in cases if c.reason == "" and c.id not in exclude]
    start = start or load_calibration(kind=kind)
    weights = np.array([RELIABILITY_WEIGHT.get(c.reliability, 0.5) for c in cases])

    def objective(x: np.ndarray) -> float:
        cal = start.from_vector(x)
        errs = np.array([abs(validate.predict_case(c, cal).error) for c in cases])
        errs = np.minimum(np.where(np.isfinite(errs), errs, ERROR_CAP), ERROR_CAP)
        return float(np.sum(weights * errs) / np.sum(weights))

    x = start.to_vector()
    for _ in range(restarts):
        x = nelder_mead(objective, x, iters=iters)
    fitted = start.from_vector(x)
    info = dict(start.fit) | {
        "rows": len(cases),
        "objective_value": round(objective(x), 5),
        "date": datetime.date.today().isoformat(),
        "objective": "reliability-weighted MAPE, errors capped at 50%",
    }
    return replace(fitted, fit=MappingProxyType(info))


def leave_one_out(
    cases=None, *, start: Calibration | None = None, iters: int = 250, kind: str = "training"
) -> dict[str, float]:
    """Refit without each row and predict it: id -> held-out signed error (predicted/measured - 1)."""
    validate = _validator(kind)
    cases = validate.load_cases() if cases is None else cases
    start = start or load_calibration(kind=kind)
    out = {}
    for c in cases:
        if c.reason:
            continue
        cal = fit_calibration(
            cases, start=start, iters=iters, restarts=1, exclude=frozenset({c.id}), kind=kind
        )
        out[c.id] = validate.predict_case(c, cal).error
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Refit a calibration on the shipped validation rows.")
    ap.add_argument("--kind", choices=list(KINDS), default="training")
    ap.add_argument("--write", action="store_true", help="rewrite tenfold/data/calibration/<kind>.toml")
    ap.add_argument("--iters", type=int, default=600)
    ap.add_argument("--loo", action="store_true", help="also report leave-one-out errors")
    args = ap.parse_args(argv)
    cal = fit_calibration(iters=args.iters, kind=args.kind)
    runs = "training_runs.csv" if args.kind == "training" else "inference_runs.csv"
    header = (
        f"Fitted by `python -m tenfold.perf.calibration --kind {args.kind} --write`\n"
        f"(tenfold.perf.calibration.fit_calibration) on tenfold/data/validation/{runs};\n"
        "see the module docstring for what each value means and BOUNDS for each one's physical range."
    )
    text = calibration_to_toml(cal, header=header)
    print(text)
    if args.write:
        target = Path(str(data_dir("calibration") / _kind(args.kind).FILE))
        target.write_text(text)
        print(f"wrote {target}")
    if args.loo:
        errs = leave_one_out(start=cal, kind=args.kind)
        for k, v in errs.items():
            print(f"{k:45s} {v * 100:+7.1f} %")
        print(f"leave-one-out MAPE {np.mean(np.abs(list(errs.values()))) * 100:.2f} % over {len(errs)} rows")


if __name__ == "__main__":
    main()
