"""The comparison's frozen results: one row per GPU (training or serving), and the `Comparison` holding them.
Computed by compare.py / compare_serving.py; rendered by the CLI and tenfold.report."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from types import MappingProxyType
from typing import ClassVar

from tenfold.cost.energy import Footprint
from tenfold.cost.intervals import INTERVAL_KEYS, SERVING_INTERVAL_KEYS
from tenfold.cost.tco import OwnCost, RentPrices
from tenfold.cost.tornado import Tornado
from tenfold.cost.workloads import CostSettings, ServingWorkload, TrainingWorkload, format_count
from tenfold.perf.serving.search import ServingPoint
from tenfold.perf.training.estimate import TrainingEstimate

NAN = math.nan


@dataclass(frozen=True, kw_only=True)
class Money:
    """What a row's GPU-hours cost and what they burn.

    rent: the rental prices (rent_usd charges `rent.basis`); own: the owner's cost of one GPU (own_usd
    charges its $/busy GPU-hour); footprint: facility energy and carbon; tornado_own / tornado_rent: the
    sensitivity of each total."""

    gpu_hours: float
    rent: RentPrices
    rent_usd: float
    own: OwnCost | None
    own_usd: float
    footprint: Footprint | None
    tornado_own: Tornado | None
    tornado_rent: Tornado | None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "gpu_hours": self.gpu_hours,
            "rent": asdict(self.rent) | {"usd_per_gpu_hour": self.rent.usd_h},
            "rent_usd": self.rent_usd,
            "own": self.own.to_dict() if self.own else None,
            "own_usd": self.own_usd,
            "footprint": asdict(self.footprint) if self.footprint else None,
            "tornado_own": self.tornado_own.to_dict() if self.tornado_own else None,
            "tornado_rent": self.tornado_rent.to_dict() if self.tornado_rent else None,
            "notes": list(self.notes),
        }


@dataclass(frozen=True, kw_only=True)
class PrecisionOption:
    """One precision tried on one GPU: its best plan's GPUs, time and throughput (or why none)."""

    precision: str
    feasible: bool
    reason: str
    num_gpus: int
    days: float
    tokens_per_s_per_gpu: float
    plan: str


class Ranged:
    """What a comparison row with 80 % ranges shares: `intervals` (quantity -> (low, high)) over the
    row kind's `INTERVAL_KEYS`, read one at a time or as the JSON fields."""

    INTERVAL_KEYS: ClassVar[tuple[str, ...]] = ()
    intervals: Mapping[str, tuple[float, float]]

    def interval(self, key: str) -> tuple[float, float] | None:
        """The 80 % range of quantity `key` (one of INTERVAL_KEYS), or None when there is none."""
        return self.intervals.get(key)

    def interval_fields(self) -> dict[str, list[float] | None]:
        """{"<key>_interval": [low, high] or None} for every key of INTERVAL_KEYS (the JSON fields)."""
        return {f"{k}_interval": list(v) if (v := self.interval(k)) else None for k in self.INTERVAL_KEYS}


@dataclass(frozen=True, kw_only=True)
class TrainingRow(Ranged):
    """One GPU's answer for a training run. Ratios are against the comparison's baseline GPU:
    speedup = baseline GPU-hours / these GPU-hours (per-GPU throughput ratio); cost ratios = this cost /
    the baseline's. NaN where this GPU or the baseline has no plan.

    intervals: 80 % ranges (low, high) by quantity (`intervals.INTERVAL_KEYS`: tokens_per_s_per_gpu, days,
    gpu_hours, rent_usd, own_usd and the three ratios), from the calibration's measured uncertainty;
    empty when it has none, and no ratio ranges on the baseline row itself."""

    hardware: str
    display_name: str
    feasible: bool
    reason: str
    precision: str
    plan: str
    num_gpus: int
    days: float
    tokens_per_s_per_gpu: float
    mfu_bf16: float
    mfu_precision: float
    money: Money | None
    speedup: float = NAN
    rent_cost_ratio: float = NAN
    own_cost_ratio: float = NAN
    estimate: TrainingEstimate | None = None
    options: tuple[PrecisionOption, ...] = ()
    intervals: Mapping[str, tuple[float, float]] = field(default_factory=lambda: MappingProxyType({}))
    INTERVAL_KEYS: ClassVar[tuple[str, ...]] = INTERVAL_KEYS

    @property
    def gpu_hours(self) -> float:
        return self.money.gpu_hours if self.money else NAN

    @property
    def calibrated(self) -> bool:
        """False when this GPU's numbers rest on a conservative efficiency, not one fitted on its runs."""
        return self.estimate.calibrated if self.estimate is not None else True

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("hardware", "display_name", "feasible", "reason", "precision")}
        d["calibrated"] = self.calibrated
        d |= {k: getattr(self, k) for k in ("plan", "num_gpus", "days", "tokens_per_s_per_gpu")}
        d |= {k: getattr(self, k) for k in ("mfu_bf16", "mfu_precision", "speedup")}
        d |= {"rent_cost_ratio": self.rent_cost_ratio, "own_cost_ratio": self.own_cost_ratio}
        d["gpu_hours"] = self.gpu_hours
        d |= self.interval_fields()
        d["money"] = self.money.to_dict() if self.money else None
        d["estimate"] = self.estimate.to_dict() if self.estimate else None
        d["options"] = [asdict(o) for o in self.options]
        return d


@dataclass(frozen=True, kw_only=True)
class ServingOption:
    """One precision tried for a serving load: its best point (None if none meets the limits)."""

    precision: str
    feasible: bool
    reason: str
    point: ServingPoint | None


@dataclass(frozen=True, kw_only=True)
class ServingRow(Ranged):
    """One GPU's answer for a serving load: enough instances of the best deployment to carry the demand.
    speedup = output tok/s/GPU / the baseline's; cost ratios = $/M tokens / the baseline's.

    intervals: 80 % ranges by quantity (`intervals.SERVING_INTERVAL_KEYS`: the rates, latencies, $/M
    tokens and the three ratios) from the inference calibration's measured uncertainty; empty without one."""

    hardware: str
    display_name: str
    feasible: bool
    reason: str
    precision: str
    plan: str
    point: ServingPoint | None
    instances: int
    num_gpus: int
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    ttft_ms: float
    tpot_ms: float
    money: Money | None
    rent_usd_per_m_tokens: float = NAN
    own_usd_per_m_tokens: float = NAN
    speedup: float = NAN
    rent_cost_ratio: float = NAN
    own_cost_ratio: float = NAN
    options: tuple[ServingOption, ...] = ()
    intervals: Mapping[str, tuple[float, float]] = field(default_factory=lambda: MappingProxyType({}))
    INTERVAL_KEYS: ClassVar[tuple[str, ...]] = SERVING_INTERVAL_KEYS

    @property
    def gpu_hours(self) -> float:
        return self.money.gpu_hours if self.money else NAN

    @property
    def calibrated(self) -> bool:
        """False when this GPU's numbers rest on a conservative efficiency, not one fitted on its runs."""
        return self.point.calibrated if self.point is not None else True

    def to_dict(self) -> dict:
        skip = {"point", "money", "options", "intervals"}
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        d |= self.interval_fields()
        d["calibrated"] = self.calibrated
        d["gpu_hours"] = self.gpu_hours
        d["point"] = self.point.to_dict() if self.point else None
        d["money"] = self.money.to_dict() if self.money else None
        d["options"] = [
            {"precision": o.precision, "feasible": o.feasible, "reason": o.reason}
            | {"point": o.point.to_dict() if o.point else None}
            for o in self.options
        ]
        return d


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """Every GPU's answer for one workload, side by side.

    kind: "training" or "serving"; mode: "fixed" (num_gpus given), "deadline" (fewest GPUs meeting
    deadline_days) or "demand" (serving: enough GPUs for the load); baseline: the GPU ratios refer to;
    grid_g_per_kWh: carbon intensity used; settings: the cost settings; notes: assumptions worth reading.
    """

    kind: str
    workload: TrainingWorkload | ServingWorkload
    mode: str
    num_gpus: int | None
    deadline_days: float | None
    baseline: str
    grid_g_per_kWh: float
    settings: CostSettings
    rows: tuple[TrainingRow | ServingRow, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    elapsed_s: float = 0.0

    def row(self, hardware: str) -> TrainingRow | ServingRow:
        for r in self.rows:
            if r.hardware == hardware:
                return r
        raise KeyError(f"no row for {hardware!r}; rows: {', '.join(r.hardware for r in self.rows)}")

    @property
    def feasible(self) -> bool:
        return any(r.feasible for r in self.rows)

    @property
    def title(self) -> str:
        w = self.workload
        label = w.label or w.model
        if self.kind == "training":
            fixed = self.mode == "fixed"
            where = f"{self.num_gpus:,} GPUs" if fixed else f"{self.deadline_days:g}-day deadline"
            return (
                f"{label}: {format_count(w.tokens)} tokens, {where}; global batch {w.global_batch:,} x "
                f"{w.seq_len:,} tokens"
            )
        return (
            f"{label}: {w.output_tokens_per_s:,.0f} output tok/s at >= {w.min_tokens_per_s_per_user:g} "
            f"tok/s/user, {w.days:g} days"
        )

    def summary(self) -> list[dict]:
        """One flat dict per GPU with the side-by-side table's columns (what the CLI, report and web show).

        Keys: hardware, calibrated, feasible, reason, precision, plan, num_gpus, days, mfu (share of the
        chosen precision's dense peak), mfu_bf16 (share of the BF16 peak), tokens_per_s_per_gpu, gpu_hours,
        rent_usd, own_usd, rent_usd_per_gpu_hour, own_usd_per_gpu_hour, facility_MWh, co2_t, speedup,
        rent_cost_ratio, own_cost_ratio, and `<key>_interval` ([low, high] 80 % range or None, the row's
        interval_fields); serving rows add usd_per_m_tokens (rent and own)."""
        out = []
        for r in self.rows:
            m = r.money
            fp = m.footprint if m else None
            d = {
                "hardware": r.hardware,
                "calibrated": r.calibrated,
                "feasible": r.feasible,
                "reason": r.reason,
                "precision": r.precision,
                "plan": r.plan,
                "num_gpus": r.num_gpus,
                "days": getattr(r, "days", self.workload.days if self.kind == "serving" else NAN),
                "mfu": getattr(r, "mfu_precision", NAN),
                "mfu_bf16": getattr(r, "mfu_bf16", NAN),
                "tokens_per_s_per_gpu": r.tokens_per_s_per_gpu,
                "gpu_hours": r.gpu_hours,
                "rent_usd": m.rent_usd if m else NAN,
                "own_usd": m.own_usd if m else NAN,
                "rent_usd_per_gpu_hour": m.rent.usd_h if m else NAN,
                "own_usd_per_gpu_hour": m.own.usd_per_busy_gpu_hour if m and m.own else NAN,
                "facility_MWh": fp.facility_MWh if fp else NAN,
                "co2_t": fp.co2_t if fp else NAN,
                "speedup": r.speedup,
                "rent_cost_ratio": r.rent_cost_ratio,
                "own_cost_ratio": r.own_cost_ratio,
            }
            d |= r.interval_fields()
            if self.kind == "serving":
                d["rent_usd_per_m_tokens"] = r.rent_usd_per_m_tokens
                d["own_usd_per_m_tokens"] = r.own_usd_per_m_tokens
                d["tokens_per_s_per_user"] = r.tokens_per_s_per_user
            out.append(d)
        return out

    def to_dict(self) -> dict:
        return {
            "title": self.title,
            "summary": self.summary(),
            "kind": self.kind,
            "workload": self.workload.to_dict(),
            "mode": self.mode,
            "num_gpus": self.num_gpus,
            "deadline_days": self.deadline_days,
            "baseline": self.baseline,
            "grid_g_per_kWh": self.grid_g_per_kWh,
            "settings": self.settings.to_dict(),
            "rows": [r.to_dict() for r in self.rows],
            "notes": list(self.notes),
            "elapsed_s": self.elapsed_s,
        }


@dataclass(frozen=True, kw_only=True)
class ComparisonSet:
    """Several comparisons shown together (the embedded default runs two training workloads)."""

    title: str
    comparisons: tuple[Comparison, ...]
    elapsed_s: float = 0.0

    @property
    def feasible(self) -> bool:
        return any(c.feasible for c in self.comparisons)

    def to_dict(self) -> dict:
        return {
            "title": self.title,
            "comparisons": [c.to_dict() for c in self.comparisons],
            "elapsed_s": self.elapsed_s,
        }
