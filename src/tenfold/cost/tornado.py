"""Sensitivity of a job's total cost: a tornado, one bar per input swept over its range with the others
held at their base values (ranges from tenfold/data/cost/defaults.toml, each with its source).

Owned basis, job cost = GPU-hours / m x own $/busy GPU-hour(inputs), where m scales the modelled
throughput (MFU) and the inputs are capex (price), utilisation, lifetime, cost of capital, PUE,
electricity and colocation. Rented basis: price (reserved to on-demand) and MFU. Returned as data; the
report draws it (bars sorted by swing, widest first).

The MFU bar spans the training model's measured uncertainty when the caller gives it (`mfu_halfwidth`:
`Uncertainty.relative_halfwidth` of the estimate's group, the 80 % range of the leave-one-source-out
cross-validated error, tenfold.perf.uncertainty); without one it falls back to the assumed
`mfu_range` of defaults.toml and its label says so.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from tenfold.cost.defaults import CostDefaults, load_cost_defaults
from tenfold.cost.tco import OwnInputs, RentPrices, own_cost

# (bar name, OwnInputs field or pseudo-input, label, unit); "capex" and "mfu" are multipliers
OWN_BARS = (
    ("capex", "capex_range", "GPU price (all-in capex)", "x catalog"),
    ("utilisation", "utilisation", "utilisation of owned GPU-hours", "share"),
    ("life_years", "life_years", "depreciation life", "years"),
    ("cost_of_capital", "cost_of_capital", "cost of capital", "per year"),
    ("pue", "pue", "PUE", ""),
    ("electricity_usd_per_kWh", "electricity_usd_per_kWh", "electricity", "$/kWh"),
    ("colo_usd_per_kW_month", "colo_usd_per_kW_month", "colocation", "$/kW-month"),
    ("mfu", "mfu_range", "MFU (modelled throughput)", "x model"),
)


@dataclass(frozen=True, kw_only=True)
class TornadoBar:
    """One input swept: its low and high values and the total cost ($) at each."""

    name: str
    label: str
    unit: str
    base_value: float
    low_value: float
    high_value: float
    cost_at_low_usd: float
    cost_at_high_usd: float

    @property
    def swing_usd(self) -> float:
        return abs(self.cost_at_high_usd - self.cost_at_low_usd)


@dataclass(frozen=True, kw_only=True)
class Tornado:
    """Bars sorted by swing (widest first) around `base_cost_usd` on the given basis (own or rent)."""

    basis: str
    base_cost_usd: float
    bars: tuple[TornadoBar, ...]

    def to_dict(self) -> dict:
        return {
            "basis": self.basis,
            "base_cost_usd": self.base_cost_usd,
            "bars": [asdict(b) | {"swing_usd": b.swing_usd} for b in self.bars],
        }


def mfu_bar(defaults: CostDefaults, mfu_halfwidth: float | None) -> tuple[float, float, str]:
    """(low, high, label) of the MFU multiplier: 1 -/+ the measured half-width when given (the low end
    kept above 0.1 so the cost stays finite), else the assumed range of defaults.toml."""
    if mfu_halfwidth is not None and math.isfinite(mfu_halfwidth) and mfu_halfwidth > 0:
        h = mfu_halfwidth
        return max(1.0 - h, 0.1), 1.0 + h, f"MFU (modelled throughput, measured 80 % range +-{h:.0%})"
    m = defaults.own["mfu_range"]
    half = (m.high - m.low) / 2.0
    return m.low, m.high, f"MFU (modelled throughput, assumed +-{half:.0%}: no measured uncertainty)"


def owned_job_cost(gpu_hours: float, inputs: OwnInputs, *, mfu: float = 1.0) -> float:
    """Total owned cost ($) of a job of `gpu_hours` GPU-hours when throughput is `mfu` x the model's."""
    if not mfu > 0:
        raise ValueError(f"mfu multiplier must be > 0, got {mfu}")
    return gpu_hours / mfu * own_cost(inputs).usd_per_busy_gpu_hour


def own_tornado(
    gpu_hours: float,
    inputs: OwnInputs,
    defaults: CostDefaults | None = None,
    *,
    mfu_halfwidth: float | None = None,
) -> Tornado:
    """Tornado of the owned job cost over the OWN_BARS inputs (the MFU bar: `mfu_bar`)."""
    dfl = defaults or load_cost_defaults()
    mfu_lo, mfu_hi, mfu_label = mfu_bar(dfl, mfu_halfwidth)
    base = owned_job_cost(gpu_hours, inputs)
    bars = []
    for name, key, label, unit in OWN_BARS:
        rng = dfl.own[key]
        lo, hi = rng.low, rng.high
        if name == "capex":
            base_v = 1.0

            def at(v: float) -> float:
                return owned_job_cost(gpu_hours, replace(inputs, capex_usd=inputs.capex_usd * v))
        elif name == "mfu":
            base_v = 1.0
            lo, hi, label = mfu_lo, mfu_hi, mfu_label

            def at(v: float) -> float:
                return owned_job_cost(gpu_hours, inputs, mfu=v)
        else:
            base_v = getattr(inputs, key)

            def at(v: float, key: str = key) -> float:
                return owned_job_cost(gpu_hours, replace(inputs, **{key: v}))

        lo, hi = min(lo, base_v), max(hi, base_v)
        bars.append(
            TornadoBar(
                name=name,
                label=label,
                unit=unit,
                base_value=base_v,
                low_value=lo,
                high_value=hi,
                cost_at_low_usd=at(lo),
                cost_at_high_usd=at(hi),
            )
        )
    bars.sort(key=lambda b: -b.swing_usd)
    return Tornado(basis="own", base_cost_usd=base, bars=tuple(bars))


def rent_tornado(
    gpu_hours: float,
    prices: RentPrices,
    defaults: CostDefaults | None = None,
    *,
    mfu_halfwidth: float | None = None,
) -> Tornado:
    """Tornado of the rented job cost: price between reserved and on-demand, and MFU (`mfu_bar`)."""
    dfl = defaults or load_cost_defaults()
    base_p = prices.usd_h
    base = gpu_hours * base_p
    bars = []
    known = [p for p in (prices.reserved_usd_h, prices.ondemand_usd_h) if p is not None]
    if known and math.isfinite(base_p):
        lo, hi = min(*known, base_p), max(*known, base_p)
        bars.append(
            TornadoBar(
                name="price",
                label="rental price (reserved to on-demand)",
                unit="$/GPU-hour",
                base_value=base_p,
                low_value=lo,
                high_value=hi,
                cost_at_low_usd=gpu_hours * lo,
                cost_at_high_usd=gpu_hours * hi,
            )
        )
    m_lo, m_hi, m_label = mfu_bar(dfl, mfu_halfwidth)
    bars.append(
        TornadoBar(
            name="mfu",
            label=m_label,
            unit="x model",
            base_value=1.0,
            low_value=m_lo,
            high_value=m_hi,
            cost_at_low_usd=base / m_lo,
            cost_at_high_usd=base / m_hi,
        )
    )
    bars.sort(key=lambda b: -b.swing_usd if math.isfinite(b.swing_usd) else 0.0)
    return Tornado(basis="rent", base_cost_usd=base, bars=tuple(bars))
