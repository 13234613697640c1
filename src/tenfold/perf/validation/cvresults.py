"""Stored results of the leave-one-source-out cross-validation (`data/validation/<kind>_cv.csv`, kind
training or inference).

Written by `python -m tenfold.perf.validation.crossval --kind KIND --write`; read by `tenfold validate
training` and `tenfold validate inference`, which print each row's out-of-source error beside its in-sample
error (`attach_cv`).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tenfold.perf.specs.catalog import data_dir
from tenfold.perf.uncertainty import spread
from tenfold.perf.validation.rows import scored_rows


@dataclass(frozen=True, kw_only=True)
class CVRow:
    """One row's out-of-source prediction: error = predicted / measured - 1; [low, high] its 80 % interval
    (spreads measured on the other sources only); covered = measured inside it."""

    id: str
    source: str
    group: str
    measured: float
    predicted: float
    error: float
    low: float
    high: float

    @property
    def covered(self) -> bool:
        return self.low <= self.measured <= self.high


CV_COLUMNS = ("id", "source", "group", "measured", "predicted", "error", "low", "high")


def default_cv_path(kind: str = "training") -> Path:
    """Where the cross-validation of a kind ("training", "inference") is stored."""
    return Path(str(data_dir("validation") / f"{kind}_cv.csv"))


def write_cv(rows: Sequence[CVRow], path: str | Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(CV_COLUMNS)
        for r in rows:
            w.writerow(
                [
                    r.id,
                    r.source,
                    r.group,
                    f"{r.measured:.6g}",
                    f"{r.predicted:.6g}",
                    f"{r.error:.5f}",
                    f"{r.low:.6g}",
                    f"{r.high:.6g}",
                ]
            )


def read_cv(path: str | Path | None = None, *, kind: str = "training") -> dict[str, CVRow]:
    """The stored cross-validation results of a kind (empty when the file is absent)."""
    path = Path(path) if path is not None else default_cv_path(kind)
    if not path.exists():
        return {}
    with open(path, newline="") as fh:
        out = {}
        for row in csv.DictReader(fh):
            out[row["id"]] = CVRow(
                id=row["id"],
                source=row["source"],
                group=row["group"],
                **{k: float(row[k]) for k in ("measured", "predicted", "error", "low", "high")},
            )
        return out


def summary(rows: Sequence[CVRow]) -> dict[str, float]:
    """MAPE and 80 % interval coverage over cross-validated rows."""
    if not rows:
        return {"mape": math.nan, "coverage": math.nan, "rows": 0}
    return {
        "mape": sum(abs(r.error) for r in rows) / len(rows),
        "coverage": sum(r.covered for r in rows) / len(rows),
        "rows": len(rows),
        "log_spread": spread(math.log(r.predicted / r.measured) for r in rows),
    }


def attach_cv(results: Sequence[Any], cv: dict[str, CVRow], *, fitted_on: str = "") -> tuple[list, dict]:
    """Validation rows (`RowResult`s) with their stored out-of-source error and interval (`cv_error`,
    `cv_interval`) where the cross-validation covers the row with the same measured value, and the report's
    `cross_validation` figures over those rows of the scored splits (rows.SCORED; empty when none
    matched)."""
    matched = {
        r.id: cv[r.id]
        for r in results
        if r.id in cv and math.isclose(cv[r.id].measured, r.measured, rel_tol=1e-5)
    }
    out = [
        replace(r, cv_error=matched[r.id].error, cv_interval=(matched[r.id].low, matched[r.id].high))
        if r.id in matched
        else r
        for r in results
    ]
    scored = [matched[r.id] for r in scored_rows(results) if r.id in matched]
    if not scored:
        return out, {}
    s = summary(scored)
    info = {
        "method": "leave-one-source-out: each row predicted by a calibration fitted without its source",
        "mape": s["mape"],
        "coverage": s["coverage"],
        "rows": s["rows"],
        "sources": len({c.source for c in scored}),
        "fitted_on": fitted_on,
    }
    return out, info
