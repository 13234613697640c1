"""A calibration given by the user (a file `tenfold calibrate training|inference` wrote, or the same tables
sent to the web API), checked before it is used: every table and key the kind's model needs (the serving
model has three parameters more than training's), no unknown key, and every fitted value inside its
physical range (`tenfold.perf.calibration.BOUNDS`).

The shipped `training.toml` and `inference.toml` pass these checks; a file that fails them raises
ValueError with the reason, so the CLI can exit 2 and the web API answer 422 naming the field.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

from tenfold.perf.calibration import BOUNDS, Calibration, calibration_from_dict, calibration_kind
from tenfold.perf.uncertainty import uncertainty_from_dict

TABLES = ("gemm_efficiency", "parameters", "fixed", "fit", "uncertainty")
REQUIRED_TABLES = ("gemm_efficiency", "parameters")
BITS = ("16", "8", "4")
FIXED_RANGES = {
    "scaleup_latency_us": (0.0, 1000.0),
    "scaleout_latency_us": (0.0, 1000.0),
    "fallback_gemm_efficiency": BOUNDS["gemm"],
}
"""The [fixed] values: link latencies (microseconds) and the GEMM efficiency of an uncalibrated GPU; also
`gemm_shapes`, one of GEMM_SHAPES (see `tenfold.perf.calibration`)."""


def _number(where: str, v: Any, lo: float, hi: float) -> float:
    """`v` as a float inside [lo, hi], else ValueError naming `where`."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"{where} must be a number, got {v!r}")
    if not lo <= v <= hi:
        raise ValueError(f"{where} = {v:g} is outside its physical range {lo:g} to {hi:g}")
    return float(v)


def _table(d: dict, name: str) -> dict:
    t = d.get(name, {})
    if not isinstance(t, dict):
        raise ValueError(f"[{name}] must be a table, got {type(t).__name__}")
    return t


def check_calibration_dict(d: Any, *, kind: str = "training") -> Calibration:
    """A calibration of `kind` (training or inference) from its tables (the TOML layout of
    `calibration_to_toml`), checked: the tables [gemm_efficiency] (keys "<arch>/<16|8|4>") and [parameters]
    (every fraction and overhead of the kind) present, no unknown table or key, each value within BOUNDS.
    ValueError with the reason otherwise (a training file given for inference lacks the serving keys)."""
    cls = calibration_kind(kind)
    if not isinstance(d, dict):
        raise ValueError(f"a calibration is a table of tables, got {type(d).__name__}")
    unknown = [k for k in d if k not in TABLES]
    if unknown:
        raise ValueError(f"unknown table(s) {', '.join(map(repr, unknown))}; known: {', '.join(TABLES)}")
    missing = [k for k in REQUIRED_TABLES if k not in d]
    if missing:
        raise ValueError(f"missing table(s): {', '.join(f'[{k}]' for k in missing)}")
    gemm = _table(d, "gemm_efficiency")
    if not gemm:
        raise ValueError("[gemm_efficiency] is empty: give at least one '<arch>/<bits>' efficiency")
    lo, hi = cls.GEMM_BOUNDS
    for key, v in gemm.items():
        arch, _, bits = str(key).partition("/")
        if not arch or bits not in BITS:
            raise ValueError(f"[gemm_efficiency] key {key!r} is not '<arch>/<bits>' with bits 16, 8 or 4")
        _number(f"gemm_efficiency[{key!r}]", v, lo, hi)
    params = _table(d, "parameters")
    names = (*cls.FRACTION_FIELDS, *cls.OVERHEAD_FIELDS)
    unknown = [k for k in params if k not in names]
    if unknown:
        raise ValueError(
            f"[parameters] unknown key(s) {', '.join(map(repr, unknown))} for the {kind} calibration; "
            f"known: {', '.join(names)}"
        )
    missing = [k for k in names if k not in params]
    if missing:
        raise ValueError(f"[parameters] missing key(s) of a {kind} calibration: {', '.join(missing)}")
    for k in names:
        _number(f"parameters.{k}", params[k], *cls.PARAM_BOUNDS[k])
    fixed = _table(d, "fixed")
    known = (*FIXED_RANGES, "gemm_shapes")
    unknown = [k for k in fixed if k not in known]
    if unknown:
        raise ValueError(f"[fixed] unknown key(s) {', '.join(map(repr, unknown))}; known: {', '.join(known)}")
    for k, v in fixed.items():
        if k != "gemm_shapes":  # a choice, checked by Calibration itself
            _number(f"fixed.{k}", v, *FIXED_RANGES[k])
    _table(d, "fit")
    if "uncertainty" in d:
        u = _table(d, "uncertainty")
        if "pooled" not in u:
            raise ValueError("[uncertainty] needs `pooled` (the spread of all rows' log errors)")
        uncertainty_from_dict(u)  # ValueError naming the bad spread or correlation
    return calibration_from_dict(d, kind=kind)


def load_user_calibration(path: str | Path, *, kind: str = "training") -> Calibration:
    """A calibration file of `kind` checked as `check_calibration_dict` does (ValueError: not TOML, or the
    reason)."""
    try:
        with open(path, "rb") as fh:
            d = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not valid TOML ({exc})") from None
    except UnicodeDecodeError:
        raise ValueError("not valid TOML (not UTF-8 text)") from None
    return check_calibration_dict(d, kind=kind)


def describe(cal: Calibration) -> str:
    """One line saying where a user calibration comes from (its [fit] section), for labels and notes."""
    fit = cal.fit
    if "source" in fit:
        return f"fitted on {fit.get('rows', '?')} rows of {fit['source']} ({fit.get('date', 'undated')})"
    return "a calibration file without a [fit] source"
