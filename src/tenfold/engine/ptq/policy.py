"""Mixed-precision PTQ: choose a scheme per linear layer under a bit budget, from measured sensitivity.

The problem is a multiple-choice knapsack: each layer takes exactly one candidate scheme, each choice
costs storage (weight elements x bits per element, scales counted) and does damage (its measured output
error when that layer alone is quantized, `tenfold.engine.ptq.sensitivity`); minimise the summed damage
with the mean bits per weight at most the budget. Summing single-layer damages is the first-order,
additive model that mixed-precision PTQ methods use (e.g. HAWQ-V3, Yao et al., ICML 2021,
https://arxiv.org/abs/2011.10680, solve the same integer program with Hessian-based sensitivities).
`choose_policy` solves it exactly by dynamic programming over storage (in whole units of the costs'
common divisor, or with each cost rounded up to a fine grid when that is too many units), so the chosen
policy never exceeds the budget. A quality floor is
the dual: `cheapest_policy` finds the smallest budget whose policy's predicted damage is within it.

A policy is written as TOML (`[layers]` name = "scheme", `[meta]`), readable by `read_policy`.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tenfold.engine.autoprecision.policy import toml_value
from tenfold.formats import quantize, scheme

CANDIDATES: tuple[str, ...] = ("nvfp4", "mxfp4", "mxfp8_e4m3", "fp8_e4m3_row")


def bits_per_weight(name: str, out_features: int, in_features: int) -> float:
    """Storage bits per weight element of a (out, in) weight in scheme `name`, scales included, measured
    by quantizing a zero weight of that shape (so it is the storage `quantize_for_inference` writes)."""
    q = quantize(torch.zeros(out_features, in_features), scheme(name))
    return 8 * q.nbytes / (out_features * in_features)


@dataclass(frozen=True, kw_only=True)
class LayerCost:
    """One linear layer as the knapsack sees it.

    Fields: name; numel: weight elements; bits: scheme -> bits per element; damage: scheme -> measured
    output error with this layer alone in that scheme."""

    name: str
    numel: int
    bits: dict[str, float]
    damage: dict[str, float]


@dataclass(frozen=True, kw_only=True)
class InferencePolicy:
    """A scheme per layer for `quantize_for_inference(..., layer_schemes=policy.layers)`."""

    layers: dict[str, str]
    activations: bool
    mean_bits: float
    predicted_damage: float
    meta: dict[str, Any] = field(default_factory=dict)

    def to_toml(self) -> str:
        lines = ["# tenfold mixed-precision PTQ policy (tenfold ptq --policy auto)", "[meta]"]
        meta = {
            "activations": self.activations,
            "mean_bits": round(self.mean_bits, 6),
            "predicted_damage": self.predicted_damage,
            **self.meta,
        }
        for k, v in meta.items():
            lines.append(f"{k} = {toml_value(v)}")
        lines.append("[layers]")
        lines += [f'"{k}" = "{v}"' for k, v in self.layers.items()]
        return "\n".join(lines) + "\n"


def read_policy(path: str | Path) -> InferencePolicy:
    """An `InferencePolicy` from its TOML file (ValueError when it is not one)."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        meta = dict(data["meta"])
        layers = {str(k): str(v) for k, v in data["layers"].items()}
        return InferencePolicy(
            layers=layers,
            activations=bool(meta.pop("activations")),
            mean_bits=float(meta.pop("mean_bits")),
            predicted_damage=float(meta.pop("predicted_damage")),
            meta=meta,
        )
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: not a tenfold PTQ policy ({err})") from err


def mean_bits(layers: list[LayerCost], choice: Mapping[str, str]) -> float:
    """Mean storage bits per weight of `choice` over `layers`, weighted by weight elements."""
    n = sum(c.numel for c in layers)
    return sum(c.numel * c.bits[choice[c.name]] for c in layers) / n


def _cost_units(
    layers: list[LayerCost], cap_bits: float, resolution: int
) -> tuple[list[dict[str, int]], int]:
    """Integer knapsack costs per layer and scheme, and the integer capacity.

    Storage in bits is an integer for every real scheme (codes and scales are whole bytes), so the costs are
    exact in units of their greatest common divisor when that gives at most `resolution` units of budget;
    otherwise each cost is rounded up to 1/`resolution` of the budget (never over the budget)."""
    exact = [{k: round(c.numel * b) for k, b in c.bits.items()} for c in layers]
    integral = all(
        abs(v - c.numel * c.bits[k]) < 1e-6 for c, e in zip(layers, exact, strict=True) for k, v in e.items()
    )
    if integral:
        g = math.gcd(*[v for e in exact for v in e.values()])
        if g and cap_bits / g <= resolution:
            return [{k: v // g for k, v in e.items()} for e in exact], int(cap_bits // g)
    unit = cap_bits / resolution
    return [{k: math.ceil(c.numel * b / unit - 1e-9) for k, b in c.bits.items()} for c in layers], resolution


def choose_policy(
    layers: list[LayerCost], budget_bits: float, *, activations: bool, resolution: int = 20000
) -> InferencePolicy:
    """The choice per layer with the least summed damage whose mean bits per weight is <= `budget_bits`.

    ValueError when even the cheapest choice everywhere exceeds the budget."""
    if not layers:
        raise ValueError("no layers to choose for")
    total = sum(c.numel for c in layers)
    cap = budget_bits * total
    cheapest = sum(c.numel * min(c.bits.values()) for c in layers)
    if cheapest > cap * (1 + 1e-12):
        raise ValueError(
            f"budget {budget_bits:g} bits/weight is below the cheapest choice ({cheapest / total:.3f})"
        )
    costs, capacity = _cost_units(layers, cap, resolution)
    inf = math.inf
    best = [inf] * (capacity + 1)  # best[j]: least damage with cost exactly j units
    best[0] = 0.0
    picks: list[list[str | None]] = []
    for c, cost in zip(layers, costs, strict=True):
        options = [(k, cost[k], c.damage[k]) for k in sorted(c.bits)]
        nxt = [inf] * (capacity + 1)
        pick: list[str | None] = [None] * (capacity + 1)
        for used, dmg in enumerate(best):
            if dmg == inf:
                continue
            for k, units, d in options:
                j = used + units
                if j <= capacity and dmg + d < nxt[j]:
                    nxt[j], pick[j] = dmg + d, k
        best = nxt
        picks.append(pick)
    end = min(range(capacity + 1), key=lambda j: (best[j], j))
    if best[end] == inf:  # rounding the costs up made every choice infeasible: take the cheapest
        choice = {c.name: min(c.bits, key=lambda k, c=c: (c.bits[k], c.damage[k])) for c in layers}
    else:
        choice = {}
        j = end
        for c, cost, pick in zip(reversed(layers), reversed(costs), reversed(picks), strict=True):
            k = pick[j]
            assert k is not None
            choice[c.name] = k
            j -= cost[k]
        choice = {c.name: choice[c.name] for c in layers}
    return InferencePolicy(
        layers=choice,
        activations=activations,
        mean_bits=mean_bits(layers, choice),
        predicted_damage=sum(c.damage[choice[c.name]] for c in layers),
        meta={"budget_bits": budget_bits},
    )


def cheapest_policy(
    layers: list[LayerCost], max_damage: float, *, activations: bool, steps: int = 40
) -> InferencePolicy:
    """The policy of least mean bits whose predicted (summed) damage is <= `max_damage`, by bisection on
    the budget; ValueError when even the most precise choice everywhere exceeds it."""
    lo = mean_bits(layers, {c.name: min(c.bits, key=c.bits.get) for c in layers})
    hi = mean_bits(layers, {c.name: max(c.bits, key=c.bits.get) for c in layers})
    top = choose_policy(layers, hi, activations=activations)
    if top.predicted_damage > max_damage:
        raise ValueError(f"no policy reaches damage <= {max_damage:g} (best {top.predicted_damage:.3g})")
    best = top
    for _ in range(steps):
        mid = (lo + hi) / 2
        p = choose_policy(layers, mid, activations=activations)
        if p.predicted_damage <= max_damage:
            best, hi = p, mid
        else:
            lo = mid
    return InferencePolicy(
        layers=best.layers,
        activations=activations,
        mean_bits=best.mean_bits,
        predicted_damage=best.predicted_damage,
        meta={"max_damage": max_damage},
    )
