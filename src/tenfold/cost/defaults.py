"""The cost model's defaults as data: TCO inputs with ranges, grid carbon presets, and the per-GPU price and
power figures that the hardware catalog lacks, each with its source (`tenfold/data/cost/defaults.toml`).

`gpu_facts(hw)` joins the hardware catalog with those fill-ins: rental prices, all-in capex and IT power per
GPU, and where each came from. Catalog numbers win; a fill-in is used only where the catalog has none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType

from tenfold.perf.specs.catalog import data_dir, read_toml
from tenfold.perf.specs.hardware import Hardware


@dataclass(frozen=True, kw_only=True)
class Default:
    """One default: `value`, the `low`/`high` range the tornado sweeps (NaN if none), and provenance."""

    value: float
    low: float = math.nan
    high: float = math.nan
    source: str = ""
    confidence: str = ""
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class CostDefaults:
    """Fields:
    own: TCO inputs by name (life_years, cost_of_capital, colo_usd_per_kW_month, electricity_usd_per_kWh,
        pue, ops_share_of_capex, utilisation, idle_fraction, allin_overhead, capex_range, mfu_range).
    grid: carbon intensity presets in g CO2/kWh by region name (us, world, france, ...).
    fill: per-GPU figures the hardware catalog lacks, {gpu: {key: Default}}.
    rules: derivation constants (reserved_ratio).
    """

    own: MappingProxyType
    grid: MappingProxyType
    fill: MappingProxyType
    rules: MappingProxyType


def _default(entry: dict, where: str) -> Default:
    if not isinstance(entry, dict) or "value" not in entry:
        raise ValueError(f"{where}: expected a table with a 'value', got {entry!r}")
    return Default(
        value=float(entry["value"]),
        low=float(entry.get("low", math.nan)),
        high=float(entry.get("high", math.nan)),
        source=str(entry.get("source", "")),
        confidence=str(entry.get("confidence", "")),
        note=str(entry.get("note", "")),
    )


def load_cost_defaults() -> CostDefaults:
    """Read the shipped defaults file (no caching: it is small)."""
    d = read_toml(data_dir("cost") / "defaults.toml")

    def section(name: str) -> MappingProxyType:
        return MappingProxyType({k: _default(v, f"defaults.toml [{name}] {k}") for k, v in d[name].items()})

    fill = {
        gpu: MappingProxyType({k: _default(v, f"defaults.toml [fill.{gpu}] {k}") for k, v in keys.items()})
        for gpu, keys in d.get("fill", {}).items()
    }
    return CostDefaults(
        own=section("own"), grid=section("grid"), fill=MappingProxyType(fill), rules=section("rules")
    )


@dataclass(frozen=True, kw_only=True)
class GpuFacts:
    """Per-GPU cost facts (None where neither the catalog nor a fill-in has a figure).

    ondemand_usd_h, reserved_usd_h: rental $/GPU-hour; capex_usd: all-in capex per GPU (server, network,
    storage share); allin_kW: provisioned all-in power per GPU incl. facility; it_kW: IT power per working
    GPU = allin_kW / allin_overhead; sources: where each came from ("catalog: <url>" or "derived: ...").
    """

    name: str
    ondemand_usd_h: float | None
    reserved_usd_h: float | None
    capex_usd: float | None
    allin_kW: float | None
    it_kW: float | None
    sources: MappingProxyType


def gpu_facts(hw: Hardware, defaults: CostDefaults | None = None) -> GpuFacts:
    """Cost facts for one GPU: the catalog's figures, else the defaults file's derived fill-ins."""
    dfl = defaults or load_cost_defaults()
    fill = dfl.fill.get(hw.name, {})
    srcs: dict[str, str] = {}

    def pick(label: str, catalog_value: float | None, catalog_key: str, fill_key: str) -> float | None:
        if catalog_value is not None:
            src = hw.sources.get(catalog_key)
            srcs[label] = f"catalog: {src.source if src else hw.name}"
            return float(catalog_value)
        if fill_key in fill:
            f = fill[fill_key]
            srcs[label] = f"{f.source} ({f.note})" if f.note else f.source
            return f.value
        srcs[label] = "none in the catalog or the cost defaults"
        return None

    ondemand = pick("ondemand_usd_h", hw.ondemand_usd_h, "ondemand_usd_h", "ondemand_usd_per_gpu_hour")
    reserved = pick("reserved_usd_h", hw.reserved_usd_h, "reserved_usd_h", "reserved_usd_per_gpu_hour")
    capex = pick("capex_usd", hw.capex_usd, "capex_usd", "capex_usd_per_gpu")
    allin_W = hw.allin_W / 1e3 if hw.allin_W is not None else None
    allin = pick("allin_kW", allin_W, "allin_W", "allin_kW")
    overhead = dfl.own["allin_overhead"].value
    return GpuFacts(
        name=hw.name,
        ondemand_usd_h=ondemand,
        reserved_usd_h=reserved,
        capex_usd=capex,
        allin_kW=allin,
        it_kW=None if allin is None else allin / overhead,
        sources=MappingProxyType(srcs),
    )


def grid_intensity(grid: str | float, defaults: CostDefaults | None = None) -> float:
    """g CO2/kWh from a preset name (us, world, france, ...) or a number (kept as given, must be >= 0).
    A string that parses as a number ("250") counts as a number, so CLI input needs no special case."""
    if isinstance(grid, str):
        key = grid.strip().lower()
        try:
            grid = float(key)
        except ValueError:
            dfl = defaults or load_cost_defaults()
            if key not in dfl.grid:
                known = ", ".join(dfl.grid)
                msg = f"unknown grid preset {grid!r}; known: {known} (or a number in g/kWh)"
                raise ValueError(msg) from None
            return dfl.grid[key].value
    bad = isinstance(grid, bool) or not isinstance(grid, int | float)
    if bad or not math.isfinite(grid) or grid < 0:
        raise ValueError(f"grid intensity must be a finite number >= 0 g/kWh, got {grid!r}")
    return float(grid)
