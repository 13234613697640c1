"""What the training and serving validation readers share: CSV cells, the row's architecture, assumptions.

The schemas are documented in `docs/validation.md`; these helpers read the columns both CSVs have.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from tenfold.perf.specs.models import ModelSpec, find_model, with_layers

R = TypeVar("R")


def int_cell(s: str, default: int | None = None) -> int | None:
    """A CSV cell as an int ('' -> default; '8.0' -> 8)."""
    s = (s or "").strip()
    if not s:
        return default
    return int(float(s))


def choice_reason(field: str, value: str, allowed: tuple[str, ...]) -> str:
    """A row's reason when a cell must be one of `allowed` ('' when it is), naming the field."""
    return "" if value in allowed else f"{field} {value!r} is not one of {', '.join(allowed)}"


def row_model(row: dict[str, str]) -> tuple[ModelSpec | None, str, list[str]]:
    """The row's architecture: catalog details overridden by the row's columns."""
    name = row["model"].strip()
    notes: list[str] = []
    base_name = name.split(" (")[0]
    base = find_model(name) or find_model(base_name)
    layers = int_cell(row["layers"])
    if base is None:
        if row.get("attention", "").strip() == "mla":
            return None, f"model {name!r} uses MLA but matches no catalog entry (MLA ranks unknown)", notes
        mha = row.get("attention", "").strip() == "mha"
        base = ModelSpec(
            name=name,
            layers=layers,
            hidden=int_cell(row["hidden"]),
            heads=int_cell(row["heads"]),
            kv_heads=int_cell(row["kv_heads"], int_cell(row["heads"])),
            head_dim=int_cell(row["head_dim"]),
            ffn=int_cell(row["ffn"], 1),
            vocab=int_cell(row["vocab"]),
            activation="gelu" if mha else "swiglu",
            norm="layernorm" if mha else "rmsnorm",
        )
        notes.append(
            "architecture details not in the catalog: " + ("GeLU/LayerNorm" if mha else "SwiGLU/RMSNorm")
        )
    if layers != base.layers:
        base = with_layers(base, layers)
    over = {
        k: int_cell(row[k]) for k in ("hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab") if row.get(k)
    }
    if row.get("experts"):
        over.update(
            experts=int_cell(row["experts"]),
            shared_experts=int_cell(row.get("shared_experts"), base.shared_experts),
            topk=int_cell(row["topk"]),
            moe_ffn=int_cell(row["moe_ffn"]),
        )
    if row.get("dense_layers", "").strip():
        over["dense_layers"] = int_cell(row["dense_layers"])
    return replace(base, **over), "", notes


def parse_assumptions(text: str) -> dict[str, str]:
    """The `assumptions` column ('mb=1 (stated); vp=4') as key -> first word of its value."""
    out = {}
    for part in (text or "").split(";"):
        part = part.strip()
        if "=" in part:
            key, rest = part.split("=", 1)
            out[key.strip()] = rest.split(" ", 1)[0].strip()
    return out


def fill_assumptions(
    row: dict[str, str], *, blank: tuple[str, ...] = ("",)
) -> tuple[dict[str, str], list[str], str]:
    """Fill a row's `blank` cells from its `assumptions` column ('key=value (why); ...').

    Returns the filled row, a note per filled cell, and '' or the reason the column is bad: a key that names
    no column would change nothing (a typo, or prose with an '=' in it), so it is an error, not a no-op."""
    given = parse_assumptions(row.get("assumptions", ""))
    unknown = [k for k in given if k not in row]
    if unknown:
        return row, [], f"assumptions: {', '.join(map(repr, unknown))} is not a column"
    filled = {k: v for k, v in given.items() if (row.get(k) or "").strip() in blank}
    return {**row, **filled}, [f"{k}={v} (assumptions column)" for k, v in filled.items()], ""


def read_rows(path: str | Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    """A validation CSV's rows as dicts; ValueError naming the file and the missing columns."""
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing columns {', '.join(missing)}")
        return list(reader)


SPLITS = ("fit", "holdout", "defect")
"""What a row is for: `fit` (the calibration is fitted on it), `holdout` (kept aside before any fit, scored
apart) or `defect` (its publisher's own tables show the run was slowed by a software fault: predicted and
shown, never fitted and left out of the headline error; docs/validation.md gives the rule)."""
SCORED = ("fit", "holdout")
"""The splits whose errors make up a report's overall MAPE and interval coverage."""


def scored_rows(rows: Iterable[R]) -> list[R]:
    """The rows (anything with a `split`) whose errors a report's overall figures count (SCORED)."""
    return [r for r in rows if r.split in SCORED]


def row_origin(row: dict[str, str]) -> dict[str, str]:
    """The row's `source` group (cross-validation holds a group out together; default: its source URL
    without the fragment) and `split` (one of SPLITS; default "fit").
    ValueError naming the row for any other split."""
    source = (row.get("source") or "").strip() or (row.get("source_url") or "").split("#")[0].strip()
    split = (row.get("split") or "").strip() or "fit"
    if split not in SPLITS:
        raise ValueError(f"row {row.get('id', '?')!r}: split {split!r} is not one of {', '.join(SPLITS)}")
    return {"source": source or "unknown", "split": split}
