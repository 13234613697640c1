"""Which layers are at risk in low precision: a summary of a run's `telemetry.jsonl` (`tenfold inspect`).

Per (layer, GEMM operand, recipe) over the sampled steps: the worst saturated (clipped) fraction, the
worst underflow fraction, the lowest SQNR and the latest amax. Rows are sorted by risk: the elements a
format loses outright (clipped + flushed to zero) first, then the lowest SQNR. The heat-map shows the
lowest SQNR of each layer's operands at each sampled step (layers × steps), where trouble that grows
during training is easy to see (`tenfold.report.runs.sqnr_heatmap_chart` draws it). Plain Python:
reading a run never needs a GPU.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tenfold.engine.telemetry.writers import JSONL_NAME
from tenfold.jsonl import read_jsonl

REQUIRED = ("step", "layer", "gemm", "tensor", "recipe", "what_if", "clip_frac", "underflow_frac", "sqnr_db")


@dataclass(frozen=True, kw_only=True)
class RiskRow:
    """One operand of one layer under one recipe, summarised over the sampled steps."""

    layer: str
    gemm: str
    tensor: str
    recipe: str
    what_if: bool
    steps: int
    clip_frac_max: float
    underflow_frac_max: float
    sqnr_db_min: float | None  # None: exact at every sampled step
    amax_last: float

    @property
    def lost_frac(self) -> float:
        """Worst clipped plus worst flushed fraction: the share of elements the format loses outright."""
        return self.clip_frac_max + self.underflow_frac_max


def load_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """The telemetry records of a run folder; ValueError naming the file and line when malformed."""
    path = Path(run_dir) / JSONL_NAME
    if not Path(run_dir).is_dir():
        raise ValueError(f"run directory {str(run_dir)!r} does not exist")
    if not path.is_file():
        raise ValueError(f"{path} not found: train with telemetry on (tenfold train --telemetry-every N)")
    out = read_jsonl(path, REQUIRED)
    if not out:
        raise ValueError(f"{path} holds no records")
    return out


def risk_table(records: list[dict[str, Any]], *, what_if: bool | None = False) -> list[RiskRow]:
    """Rows sorted by risk (most at risk first). `what_if`: False = the recipe training used,
    True = only what-if recipes, None = both."""
    groups: dict[tuple[str, str, str, str, bool], list[dict[str, Any]]] = {}
    for r in records:
        if what_if is not None and bool(r["what_if"]) != what_if:
            continue
        groups.setdefault((r["layer"], r["gemm"], r["tensor"], r["recipe"], bool(r["what_if"])), []).append(r)
    rows = []
    for (layer, gemm, tensor, rec, wi), rs in groups.items():
        rs.sort(key=lambda r: r["step"])
        sq = [r["sqnr_db"] for r in rs if r["sqnr_db"] is not None]
        rows.append(
            RiskRow(
                layer=layer,
                gemm=gemm,
                tensor=tensor,
                recipe=rec,
                what_if=wi,
                steps=len(rs),
                clip_frac_max=max(r["clip_frac"] for r in rs),
                underflow_frac_max=max(r["underflow_frac"] for r in rs),
                sqnr_db_min=min(sq) if sq else None,
                amax_last=float(rs[-1].get("amax", math.nan)),
            )
        )
    rows.sort(key=lambda x: (-x.lost_frac, math.inf if x.sqnr_db_min is None else x.sqnr_db_min, x.layer))
    return rows


def heatmap_grid(records: list[dict[str, Any]]) -> tuple[list[str], list[int], list[list[float]]]:
    """(layers in first-seen order, sampled steps, lowest SQNR per layer and step; NaN where none)."""
    own = [r for r in records if not r["what_if"]]
    layers = list(dict.fromkeys(r["layer"] for r in own))
    steps = sorted({r["step"] for r in own})
    li = {n: i for i, n in enumerate(layers)}
    si = {s: j for j, s in enumerate(steps)}
    grid = [[math.nan] * len(steps) for _ in layers]
    for r in own:
        if r["sqnr_db"] is None:
            continue
        i, j = li[r["layer"]], si[r["step"]]
        cur = grid[i][j]
        grid[i][j] = r["sqnr_db"] if math.isnan(cur) else min(cur, r["sqnr_db"])
    return layers, steps, grid


def rows_to_dicts(rows: list[RiskRow]) -> list[dict[str, Any]]:
    """JSON form of the table, with the derived lost fraction."""
    return [asdict(r) | {"lost_frac": r.lost_frac} for r in rows]
