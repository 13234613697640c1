"""Automatic precision policy: which layers may run in NVFP4, which need MXFP8, which stay BF16.

Input: a per-layer sensitivity measurement (the loss increase on held-out batches when that one layer
alone runs in a format; `tenfold.engine.autoprecision.sensitivity` measures it) and each layer's GEMM FLOPs.
Output: a
`PrecisionPolicy` (layer name → recipe name) that minimises estimated GEMM time under one budget:

- ``max_loss_increase``: the per-layer increases are summed (a first-order, additive estimate) and
  must stay within the budget; greedy by time saved per unit of loss increase, a standard heuristic for
  this multiple-choice knapsack, which is exact when increases are small and independent.
- ``fp4_flop_fraction``: the share of GEMM FLOPs that must run in NVFP4, given to the set of layers
  that covers it at the smallest summed loss increase (an exact covering knapsack, so that a large
  last layer does not overshoot the target as a greedy choice would); the rest run in MXFP8 (or BF16
  where MXFP8 itself costs more than ``mxfp8_tolerance``).

GEMM time per format: FLOPs / dense peak of that precision on a chosen GPU from the tenfold.perf catalog
(nvfp4 → fp4, mxfp8 → fp8, bf16); without a GPU, a FLOP × bits proxy (16, 8.25 and 4.5 bits per element:
the scales counted), documented as such in the policy file. The policy is a TOML file that `convert()`
accepts in place of a recipe name.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMATS = ("nvfp4", "mxfp8", "bf16")
PEAK_KEY = {"nvfp4": "fp4", "mxfp8": "fp8", "bf16": "bf16"}
PROXY_BITS = {"nvfp4": 4.5, "mxfp8": 8.25, "bf16": 16.0}


@dataclass(frozen=True, kw_only=True)
class PrecisionPolicy:
    """A recipe per layer (qualified module name → one of FORMATS); unlisted layers are left alone."""

    layers: dict[str, str]
    flops: dict[str, float] = field(default_factory=dict)  # GEMM FLOPs per step of each listed layer
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = {k: v for k, v in self.layers.items() if v not in FORMATS}
        if bad:
            raise ValueError(f"policy formats must be one of {FORMATS}, got {bad}")
        if self.flops and set(self.flops) != set(self.layers):
            raise ValueError("policy flops must name exactly the policy's layers")

    def expected_speedup(self, gpu: str | None = None) -> float:
        """Estimated GEMM speedup of this policy over all-bf16 for the listed layers (needs `flops`)."""
        if not self.flops:
            raise ValueError("this policy has no per-layer FLOPs: cannot estimate a speedup")
        t16 = sum(gemm_seconds(self.flops[n], "bf16", gpu) for n in self.layers)
        return t16 / sum(gemm_seconds(self.flops[n], f, gpu) for n, f in self.layers.items())

    def fp4_flop_fraction(self, flops: dict[str, float]) -> float:
        """Share of the listed layers' GEMM FLOPs that run in NVFP4."""
        total = sum(flops[n] for n in self.layers)
        return sum(flops[n] for n, f in self.layers.items() if f == "nvfp4") / total if total else 0.0

    def to_toml(self) -> str:
        """The policy file: a [meta] table of plain values, then [layers] name = "format"."""
        lines = ["# tenfold precision policy: tenfold.engine.convert(model, 'this.toml')", "[meta]"]
        for k, v in self.meta.items():
            lines.append(f"{k} = {toml_value(v)}")
        lines.append("\n[layers]")
        lines += [f'"{n}" = "{f}"' for n, f in self.layers.items()]
        if self.flops:
            lines.append("\n[flops]")
            lines += [f'"{n}" = {float(v)!r}' for n, v in self.flops.items()]
        return "\n".join(lines) + "\n"

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(self.to_toml())
        return p

    @classmethod
    def load(cls, path: str | Path) -> PrecisionPolicy:
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"policy file {str(p)!r} not found")
        try:
            data = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"{p}: not TOML ({err})") from None
        if not isinstance(data.get("layers"), dict):
            raise ValueError(f"{p}: no [layers] table")
        flops = {k: float(v) for k, v in data.get("flops", {}).items()}
        return cls(layers=dict(data["layers"]), flops=flops, meta=dict(data.get("meta", {})))


def toml_value(v: Any) -> str:
    """A TOML literal for a bool, number or string (strings quoted and escaped)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(float(v)) if isinstance(v, float) else str(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def gemm_seconds(flops: float, fmt: str, gpu: str | None = None) -> float:
    """Estimated time of `flops` GEMM FLOPs in `fmt`: FLOPs / dense peak on `gpu`, or the bits proxy."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    if gpu is None:
        return flops * PROXY_BITS[fmt] / 16.0 / 1e15  # proxy: a notional 1 PFLOP/s BF16 machine
    from tenfold.perf import load_hardware

    return flops / load_hardware(gpu).peak(PEAK_KEY[fmt])


def auto_policy(
    deltas: dict[str, dict[str, float]],
    flops: dict[str, float],
    *,
    max_loss_increase: float | None = None,
    fp4_flop_fraction: float | None = None,
    gpu: str | None = None,
    mxfp8_tolerance: float = 0.01,
) -> PrecisionPolicy:
    """Choose a format per layer. `deltas[layer][fmt]`: loss increase with that layer alone in `fmt`
    (bf16 = 0); `flops[layer]`: its GEMM FLOPs per step. Exactly one budget must be given."""
    if (max_loss_increase is None) == (fp4_flop_fraction is None):
        raise ValueError("give exactly one budget: max_loss_increase or fp4_flop_fraction")
    if set(deltas) != set(flops):
        raise ValueError(f"deltas and flops name different layers: {sorted(set(deltas) ^ set(flops))}")
    if not deltas:
        raise ValueError("no layers to choose formats for")
    for n, d in deltas.items():
        if "nvfp4" not in d or "mxfp8" not in d:
            raise ValueError(f"layer {n!r} needs nvfp4 and mxfp8 loss increases, got {sorted(d)}")
    cost = {n: {f: gemm_seconds(flops[n], f, gpu) for f in FORMATS} for n in flops}
    if fp4_flop_fraction is not None:
        if not 0.0 <= fp4_flop_fraction <= 1.0:
            raise ValueError(f"fp4_flop_fraction must be in [0, 1], got {fp4_flop_fraction}")
        layers = _by_fraction(deltas, flops, fp4_flop_fraction, mxfp8_tolerance)
        budget = {"fp4_flop_fraction": fp4_flop_fraction}
    else:
        assert max_loss_increase is not None
        if max_loss_increase < 0:
            raise ValueError(f"max_loss_increase must be >= 0, got {max_loss_increase}")
        layers = _by_loss(deltas, cost, max_loss_increase)
        budget = {"max_loss_increase": max_loss_increase}
    t_bf16 = sum(c["bf16"] for c in cost.values())
    t = sum(cost[n][f] for n, f in layers.items())
    pol = PrecisionPolicy(layers=layers, flops=dict(flops))
    meta = {
        **budget,
        "cost_model": f"dense peak per precision on {gpu}" if gpu else "FLOP x bits proxy (16 / 8.25 / 4.5)",
        "expected_gemm_speedup_vs_bf16": round(t_bf16 / t, 4),
        "estimated_loss_increase": round(sum(max(deltas[n].get(f, 0.0), 0.0) for n, f in layers.items()), 6),
        "fp4_flop_fraction_reached": round(pol.fp4_flop_fraction(flops), 6),
    }
    return PrecisionPolicy(layers=layers, flops=dict(flops), meta=meta)


def linear_flops(model: Any, tokens: int = 1) -> dict[str, float]:
    """GEMM FLOPs per step of every `nn.Linear` (or HF Conv1D) in `model`: 3 GEMMs x 2 x in x out x tokens."""
    out = {}
    for name, m in model.named_modules():
        w = getattr(m, "weight", None)
        linear = type(m).__name__ in ("Linear", "QuantLinear", "Conv1D", "QuantConv1D")
        if name and linear and w is not None and w.dim() == 2:
            out[name] = 6.0 * w.shape[0] * w.shape[1] * tokens
    return out


def _by_fraction(deltas, flops, target, tol) -> dict[str, str]:
    """NVFP4 for a set of layers covering `target` of the FLOPs at the least added loss, the rest in
    MXFP8 (within `tol`) or bf16. A layer's weight is its NVFP4 increase minus that of its fallback."""
    total = sum(flops.values())
    need = target * total - 1e-9 * total
    rest = {n: ("mxfp8" if deltas[n]["mxfp8"] <= tol else "bf16") for n in flops}
    w = {
        n: max(deltas[n]["nvfp4"], 0.0) - (max(deltas[n]["mxfp8"], 0.0) if rest[n] == "mxfp8" else 0.0)
        for n in flops
    }
    chosen = _cover(w, flops, need)
    return {n: "nvfp4" if n in chosen else rest[n] for n in flops}


def _cover(w: dict[str, float], flops: dict[str, float], need: float) -> set[str]:
    """The set of layers with FLOPs >= need and the least total weight (a covering 0/1 knapsack).

    Exact by dynamic programming over FLOPs in units of their greatest common divisor (layer FLOPs are
    integers, and a model's linear shapes share large factors); among equally light sets the one with
    the fewest FLOPs, so that the target is not overshot for nothing. Falls back to greedy by weight
    per FLOP when the units are too many (> 2e6) for the table."""
    import numpy as np

    names = sorted(flops)
    units = _units([flops[n] for n in names])
    if units is None:
        return _greedy_cover(w, flops, need)
    u, unit = units
    total = int(sum(u))
    need_u = max(0, min(total, math.ceil(need / unit - 1e-9)))
    dp = np.full(total + 1, np.inf)
    dp[0] = 0.0
    take = np.zeros((len(names), total + 1), dtype=bool)
    for k, n in enumerate(names):
        shifted = np.full(total + 1, np.inf)
        shifted[u[k] :] = dp[: total + 1 - u[k]] + w[n]
        better = shifted < dp - 1e-15
        take[k] = better
        dp = np.where(better, shifted, dp)
    c = need_u + int(np.argmin(dp[need_u:]))  # argmin returns the first, i.e. the fewest FLOPs
    chosen = set()
    for k in range(len(names) - 1, -1, -1):
        if take[k, c]:
            chosen.add(names[k])
            c -= u[k]
    return chosen


def _units(values: list[float], limit: int = 2_000_000) -> tuple[list[int], float] | None:
    """Integer multiples of a common unit (the gcd of integral values); None if not integral or too fine."""
    if any(v < 0 or v != int(v) for v in values):
        return None
    g = 0
    for v in values:
        g = math.gcd(g, int(v))
    if g == 0:
        return None
    u = [int(v) // g for v in values]
    if sum(u) > limit or len(values) * sum(u) > 50 * limit:
        return None
    return u, float(g)


def _greedy_cover(w: dict[str, float], flops: dict[str, float], need: float) -> set[str]:
    chosen: set[str] = set()
    covered = 0.0
    for n in sorted(flops, key=lambda n: (w[n] / flops[n] if flops[n] else 0.0, n)):
        if covered >= need:
            break
        chosen.add(n)
        covered += flops[n]
    return chosen


def _by_loss(deltas, cost, budget) -> dict[str, str]:
    out = {n: "bf16" for n in cost}
    spent = 0.0
    while True:
        best = None
        for n, cur in out.items():
            for f in FORMATS:
                saved = cost[n][cur] - cost[n][f]
                extra = max(deltas[n].get(f, 0.0), 0.0) - max(deltas[n].get(cur, 0.0), 0.0)
                if saved <= 0 or spent + extra > budget + 1e-12:
                    continue
                score = saved / max(extra, 1e-12)
                if best is None or score > best[0]:
                    best = (score, n, f, extra)
        if best is None:
            return out
        _, n, f, extra = best
        out[n] = f
        spent += extra
