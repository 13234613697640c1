"""Cost of a GPU-hour, rented or owned, with its breakdown.

Own (per GPU, per year; docs/cost.md's worked H100 example is this formula at u = 1, ops = 0):

    capital     = capex x a(r, n),   a(r, n) = r / (1 - (1 + r)^-n)   (annuity: equal yearly payments that
                                                                       repay capex and interest over n years)
    operations  = ops_share x capex
    colocation  = P_it x colo $/kW-month x 12                  (space and power are contracted per kW of IT)
    electricity = P_avg x PUE x 8760 h x $/kWh,   P_avg = P_idle + u x (P_it - P_idle),  P_idle = idle x P_it
    $/GPU-hour (owned)  = total / 8760;   $/busy GPU-hour = total / (8760 u)

P_it is the IT power of a working GPU server share (host, network, storage); u the share of owned hours that
do paid work. A job that needs G GPU-hours costs G x $/busy GPU-hour to an owner and G x the rental price
to a renter. Energy of the job itself is in energy.py.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from tenfold.cost.defaults import CostDefaults, GpuFacts, gpu_facts, load_cost_defaults
from tenfold.perf.specs.hardware import Hardware

HOURS_PER_YEAR = 8760.0
RENT_BASES = ("reserved", "ondemand")


def annuity_factor(rate: float, years: float) -> float:
    """Yearly payment per dollar borrowed at `rate` over `years` (rate 0: straight-line 1/years)."""
    if years <= 0:
        raise ValueError(f"years must be > 0, got {years}")
    if rate < 0:
        raise ValueError(f"rate must be >= 0, got {rate}")
    if rate == 0:
        return 1.0 / years
    return rate / (1.0 - (1.0 + rate) ** -years)


OWN_RANGES: dict[str, tuple[float, float, bool]] = {
    "capex_usd": (0.0, math.inf, True),
    "it_kW": (0.0, math.inf, True),
    "life_years": (0.0, math.inf, False),
    "cost_of_capital": (0.0, 1.0, True),
    "colo_usd_per_kW_month": (0.0, math.inf, True),
    "electricity_usd_per_kWh": (0.0, math.inf, True),
    "pue": (1.0, math.inf, True),
    "ops_share_of_capex": (0.0, 1.0, True),
    "utilisation": (0.0, 1.0, False),
    "idle_fraction": (0.0, 1.0, True),
}
"""Allowed range of each owner input: (low, high, low included); the high end is always included."""


def check_own_input(name: str, value: float) -> None:
    """ValueError naming `name` and its range unless `value` is a finite number in OWN_RANGES[name]
    (e.g. pue >= 1, utilisation in (0, 1], life_years > 0, cost_of_capital in [0, 1] with 0.11 = 11 %)."""
    if name not in OWN_RANGES:
        raise ValueError(f"unknown owner input {name!r}; known: {', '.join(OWN_RANGES)}")
    lo, hi, lo_in = OWN_RANGES[name]
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not (lo <= value if lo_in else lo < value) or value > hi:
        if hi == math.inf:
            allowed = f"{'>=' if lo_in else '>'} {lo:g}"
        else:
            allowed = f"in {'[' if lo_in else '('}{lo:g}, {hi:g}]"
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class OwnInputs:
    """Inputs of the owner's cost of one GPU. Fields:
    capex_usd: all-in capex per GPU (GPU, server, network, storage share).
    it_kW: IT power per working GPU (server share incl. host and network), kW.
    life_years: depreciation life; cost_of_capital: yearly rate of the annuity (0.11 = 11 %).
    colo_usd_per_kW_month: colocation price per kW of IT power per month.
    electricity_usd_per_kWh: price of energy at the facility meter.
    pue: power usage effectiveness (facility energy / IT energy), >= 1.
    ops_share_of_capex: operations, support and lost goodput per year, as a share of capex.
    utilisation: share of owned hours doing paid work, in (0, 1].
    idle_fraction: IT power of an idle GPU as a share of it_kW, in [0, 1].
    """

    capex_usd: float
    it_kW: float
    life_years: float
    cost_of_capital: float
    colo_usd_per_kW_month: float
    electricity_usd_per_kWh: float
    pue: float
    ops_share_of_capex: float
    utilisation: float
    idle_fraction: float

    def __post_init__(self) -> None:
        for f in fields(self):
            check_own_input(f.name, getattr(self, f.name))


@dataclass(frozen=True, kw_only=True)
class OwnCost:
    """An owned GPU's yearly cost by part ($/year), and per hour.

    usd_per_gpu_hour spreads the year over all 8760 hours; usd_per_busy_gpu_hour over the busy ones (what a
    job must be charged); avg_it_kW is the mean IT power over the year.
    """

    inputs: OwnInputs
    capital_usd_per_year: float
    ops_usd_per_year: float
    colo_usd_per_year: float
    electricity_usd_per_year: float
    total_usd_per_year: float
    avg_it_kW: float
    usd_per_gpu_hour: float
    usd_per_busy_gpu_hour: float

    def breakdown_per_busy_hour(self) -> dict[str, float]:
        """$ per busy GPU-hour by part (sums to usd_per_busy_gpu_hour)."""
        busy = HOURS_PER_YEAR * self.inputs.utilisation
        return {
            "capital": self.capital_usd_per_year / busy,
            "operations": self.ops_usd_per_year / busy,
            "colocation": self.colo_usd_per_year / busy,
            "electricity": self.electricity_usd_per_year / busy,
        }

    def to_dict(self) -> dict:
        d = asdict(self)
        d["breakdown_usd_per_busy_gpu_hour"] = self.breakdown_per_busy_hour()
        return d


def own_cost(inputs: OwnInputs) -> OwnCost:
    """The owner's cost of one GPU (module docstring formula)."""
    x = inputs
    capital = x.capex_usd * annuity_factor(x.cost_of_capital, x.life_years)
    ops = x.ops_share_of_capex * x.capex_usd
    colo = x.it_kW * x.colo_usd_per_kW_month * 12.0
    idle_kW = x.idle_fraction * x.it_kW
    avg_kW = idle_kW + x.utilisation * (x.it_kW - idle_kW)
    energy = avg_kW * x.pue * HOURS_PER_YEAR * x.electricity_usd_per_kWh
    total = capital + ops + colo + energy
    return OwnCost(
        inputs=x,
        capital_usd_per_year=capital,
        ops_usd_per_year=ops,
        colo_usd_per_year=colo,
        electricity_usd_per_year=energy,
        total_usd_per_year=total,
        avg_it_kW=avg_kW,
        usd_per_gpu_hour=total / HOURS_PER_YEAR,
        usd_per_busy_gpu_hour=total / (HOURS_PER_YEAR * x.utilisation),
    )


OWN_KEYS = (
    "life_years",
    "cost_of_capital",
    "colo_usd_per_kW_month",
    "electricity_usd_per_kWh",
    "pue",
    "ops_share_of_capex",
    "utilisation",
    "idle_fraction",
)


def own_inputs(
    hardware: Hardware | GpuFacts, defaults: CostDefaults | None = None, **overrides: float
) -> OwnInputs:
    """OwnInputs for a GPU from its cost facts and the defaults file; any field can be overridden.

    Raises ValueError when capex or IT power is unknown and not given, or an override is not a field."""
    dfl = defaults or load_cost_defaults()
    facts = hardware if isinstance(hardware, GpuFacts) else gpu_facts(hardware, dfl)
    known = {f.name for f in fields(OwnInputs)}
    bad = sorted(set(overrides) - known)
    if bad:
        raise ValueError(f"unknown cost input(s) {', '.join(bad)}; known: {', '.join(sorted(known))}")
    values: dict[str, float | None] = {k: dfl.own[k].value for k in OWN_KEYS}
    values["capex_usd"] = facts.capex_usd
    values["it_kW"] = facts.it_kW
    values.update({k: v for k, v in overrides.items() if v is not None})
    for key in ("capex_usd", "it_kW"):
        if values[key] is None:
            raise ValueError(f"{facts.name}: no {key} in the catalog or the cost defaults; pass {key}=...")
    return OwnInputs(**values)


@dataclass(frozen=True, kw_only=True)
class RentPrices:
    """Rental $/GPU-hour (None where unknown) and which one a comparison charges (`basis`)."""

    ondemand_usd_h: float | None
    reserved_usd_h: float | None
    basis: str = "reserved"

    def __post_init__(self) -> None:
        if self.basis not in RENT_BASES:
            raise ValueError(f"rent basis {self.basis!r} not in {RENT_BASES}")
        for key in ("ondemand_usd_h", "reserved_usd_h"):
            v = getattr(self, key)
            if v is not None and not v >= 0:
                raise ValueError(f"{key} must be >= 0, got {v}")

    @property
    def usd_h(self) -> float:
        """The price charged (NaN when the chosen basis has no price)."""
        v = self.reserved_usd_h if self.basis == "reserved" else self.ondemand_usd_h
        return math.nan if v is None else v


def rent_prices(
    hardware: Hardware | GpuFacts,
    *,
    basis: str = "reserved",
    ondemand_usd_h: float | None = None,
    reserved_usd_h: float | None = None,
    defaults: CostDefaults | None = None,
) -> RentPrices:
    """Rental prices from the catalog (or the defaults' derived fill-ins), overridable."""
    facts = hardware if isinstance(hardware, GpuFacts) else gpu_facts(hardware, defaults)
    return RentPrices(
        ondemand_usd_h=facts.ondemand_usd_h if ondemand_usd_h is None else ondemand_usd_h,
        reserved_usd_h=facts.reserved_usd_h if reserved_usd_h is None else reserved_usd_h,
        basis=basis,
    )
