"""Validation against published training runs: predict each row's metric with the row's own layout.

Reads a CSV in the schema of `tenfold/data/validation/training_runs.csv` (documented in
docs/validation.md: one published run per row, each with its source URL, plus optional tenfold extension
columns). For each row:

* the architecture comes from the row's columns, with what the schema lacks (activation, MLA ranks, dense
  layers, MTP, sliding window, biases, tied embeddings) from the catalog model the `model` column names
  ("X (N-layer slice)" rows use model X truncated to the row's layers);
* the layout is the row's (tp, pp, vp, dp, ep, cp, micro-batch, recompute, fsdp). Where the source left a
  knob out (empty cell), the row's software stack's documented default is used (`Stack.default_*`); where
  the stack documents none, every plausible value is evaluated, the plans that are valid and fit in memory
  give a range of the metric, the prediction is its midpoint (the error is scored on it) and the layout
  shown is the plan nearest the midpoint (the fastest plan was optimistic by 20-30 % where micro-batch
  was unstated, issue 15). An unstated micro-batch of a pipelined run only ranges over sizes that leave
  at least one micro-batch per stage when any does (see `_knob_options`). The row says what was assumed;
* the metric is predicted in the row's convention: tokens_per_s_per_gpu, step_time_s, tflops_per_gpu
  and mfu (FLOPs counted by the row's `flops_convention`, `tenfold.perf.flops.CONVENTIONS`: model FLOPs
  with causal attention, `palm` for the PaLM MFU definition, `hardware_incl_recompute` for Narayanan 2021
  Eq. 3; where the source does not say, every convention is in the range scored at its midpoint; mfu
  divides by the dense peak of the row's precision), time_to_train_min (needs a `train_tokens` column).

Rows that cannot be predicted (unknown GPU, no catalog match for an MLA model, empty global batch, an
unsupported metric) are returned with the reason; they are never dropped silently.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from tenfold.perf.calibration import Calibration, load_calibration
from tenfold.perf.flops import CONVENTIONS, training_flops_per_token
from tenfold.perf.specs.catalog import data_dir
from tenfold.perf.specs.hardware import Hardware, list_hardware, load_hardware
from tenfold.perf.specs.models import ModelSpec
from tenfold.perf.specs.precision import Precision, check_supported, get_precision
from tenfold.perf.training.grid import PlanGrid
from tenfold.perf.training.layout import RECOMPUTE, Layout, max_chunks
from tenfold.perf.training.stack import CUDA_GRAPH_MODES, Stack, stack
from tenfold.perf.training.step import evaluate_plans
from tenfold.perf.uncertainty import group_key
from tenfold.perf.validation import rows as row_csv
from tenfold.perf.validation.cvresults import attach_cv, read_cv
from tenfold.perf.validation.rows import choice_reason as one_of
from tenfold.perf.validation.rows import fill_assumptions, int_cell, read_rows, row_model, row_origin

METRICS = ("tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "step_time_s", "time_to_train_min")
FLOP_RATE_METRICS = ("tflops_per_gpu", "mfu")
"""The metrics whose value depends on how FLOPs are counted (`flops_convention`)."""
REQUIRED = (
    "id",
    "model",
    "gpu",
    "num_gpus",
    "tp",
    "pp",
    "metric",
    "value",
    "seq_len",
    "layers",
    "hidden",
    "heads",
)
UNSTATED_MICRO_BATCHES = (1, 2, 4, 8)
"""Micro-batch sizes tried for a published run that states none under a stack without a default (the search
tries more)."""


def default_runs_path() -> Path:
    return Path(str(data_dir("validation") / "training_runs.csv"))


@dataclass(frozen=True, kw_only=True)
class TrainingCase:
    """One validation row, resolved into model inputs (or the reason it cannot be)."""

    id: str
    model_name: str
    gpu: str
    num_gpus: int
    metric: str
    measured: float
    convention: str
    reliability: str
    source_url: str
    source: str = ""
    split: str = "fit"
    reason: str = ""
    model: ModelSpec | None = None
    hardware: Hardware | None = None
    precision: Precision | None = None
    software: Stack | None = None
    seq_len: int = 0
    global_batch: int = 0
    train_tokens: float = 0.0
    candidates: tuple[Layout, ...] = ()
    assumed: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RowResult:
    """Prediction for one row; error = predicted / measured - 1."""

    id: str
    model: str
    gpu: str
    num_gpus: int
    metric: str
    reliability: str
    measured: float
    predicted: float
    error: float
    layout: str
    fits_memory: bool
    memory_GiB: float
    assumed: tuple[str, ...] = ()
    predicted_range: tuple[float, float] | None = None
    """(low, high) of the metric over the plans an unstated knob allows (predicted = its midpoint); None when
    the row fixes a single plan."""
    split: str = "fit"
    interval: tuple[float, float] | None = None
    cv_error: float | None = None
    cv_interval: tuple[float, float] | None = None

    @property
    def covered(self) -> bool | None:
        """Whether the measured value lies inside the 80 % interval (None without one)."""
        return None if self.interval is None else self.interval[0] <= self.measured <= self.interval[1]


@dataclass(frozen=True, kw_only=True)
class ValidationReport:
    """Per-row results, rows that could not be predicted (id, reason), and MAPE (fractions)."""

    rows: tuple[RowResult, ...]
    unpredictable: tuple[tuple[str, str], ...]
    mape: float
    mape_by_gpu: dict[str, float] = field(default_factory=dict)
    mape_by_reliability: dict[str, float] = field(default_factory=dict)
    mape_by_arch: dict[str, float] = field(default_factory=dict)
    mape_by_split: dict[str, float] = field(default_factory=dict)
    coverage: float = math.nan
    cross_validation: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "rows": [
                r.__dict__
                | {
                    "assumed": list(r.assumed),
                    "interval": list(r.interval) if r.interval else None,
                    "cv_interval": list(r.cv_interval) if r.cv_interval else None,
                    "predicted_range": list(r.predicted_range) if r.predicted_range else None,
                }
                for r in self.rows
            ],
            "unpredictable": [{"id": i, "reason": why} for i, why in self.unpredictable],
            "mape": {
                "overall": self.mape,
                "by_gpu": self.mape_by_gpu,
                "by_reliability": self.mape_by_reliability,
                "by_arch": self.mape_by_arch,
                "by_split": self.mape_by_split,
                "rows": len(self.rows),
            },
            "coverage": self.coverage,
            "cross_validation": self.cross_validation,
        }


STACK_COLUMNS: dict[str, tuple[str, Callable[[str], object]]] = {
    "pp_schedule": ("pp_schedule", str),
    "ep_dispatch": ("ep_dedup", lambda v: v == "dedup"),
    "ep_overlap": ("ep_overlap", lambda v: v == "1"),
    "tp_overlap": ("tp_overlap", lambda v: v == "1"),
    "cp_comm": ("cp_comm", str),
    "recompute_modules": ("recompute_modules", lambda v: tuple(v.split())),
    "offload_layers": ("activation_offload_layers", int),
    "cuda_graph": ("full_iteration_graph", lambda v: v == "full_iteration"),
}
"""Extension columns that override a field of the row's software preset: column -> (`Stack` field, parser)."""


def _row_software(row: dict[str, str]) -> Stack:
    """The row's software preset with the overrides its columns give (`STACK_COLUMNS`)."""
    cells = {column: (row.get(column) or "").strip() for column in STACK_COLUMNS}
    overrides = {name: parse(cells[c]) for c, (name, parse) in STACK_COLUMNS.items() if cells[c]}
    return stack((row.get("software") or "").strip() or "megatron-core", **overrides)


def _knob_options(
    row: dict[str, str], *, global_batch: int, dp: int, pp: int, layers: int, software: Stack
) -> tuple[list[int], list[int], list[str], list[str]]:
    """(micro-batches, vps, recompute modes, notes) to evaluate: the row's value; if empty, the stack's
    documented default (noted); else every plausible value."""
    notes: list[str] = []

    def pick(key: str, default: object, plausible: list) -> list:
        cell = (row.get(key) or "").strip()
        if cell:
            return [cell]
        if default is not None:
            notes.append(f"{key}={default} ({software.name} default)")
            return [default]
        return plausible

    # Unknown micro-batch: the sizes that divide the batch per DP rank; with pipelining, only those that
    # give every stage work (m >= pp micro-batches), when any does. With fewer the bubble, (p - 1)/m of
    # the step (Narayanan et al. 2021, https://arxiv.org/abs/2104.04473 §2.2), leaves most stages idle,
    # and Megatron-Core's interleaved schedule refuses it (m must be a multiple of pp).
    sizes = [b for b in UNSTATED_MICRO_BATCHES if global_batch % (dp * b) == 0]
    filled = [b for b in sizes if global_batch // (dp * b) >= pp]
    mbs = pick("micro_batch", software.default_micro_batch, filled or sizes)
    # Unknown VP: interleaving depths up to 8 whose chunks still hold a layer, or the embedding or loss alone
    # (uneven layouts allowed, as Megatron-Core's pipeline layouts and Llama 3's balanced stages do).
    most = max_chunks(layers, software.balanced_stages) if pp > 1 and software.interleaving else 0
    vps = pick("vp", software.default_vp, [1] + [v for v in range(2, 9) if pp * v <= most])
    rcs = pick("recompute", software.default_recompute, list(RECOMPUTE))
    return [int_cell(str(b)) for b in mbs], [int_cell(str(v)) for v in vps], [str(r) for r in rcs], notes


def case_from_row(row: dict[str, str]) -> TrainingCase:
    """Resolve one CSV row (see the module docstring)."""
    missing = [k for k in REQUIRED if not (row.get(k) or "").strip()]
    head = dict(
        id=row.get("id", "?"),
        model_name=row.get("model", ""),
        gpu=row.get("gpu", ""),
        num_gpus=int_cell(row.get("num_gpus"), 0) or 0,
        metric=row.get("metric", ""),
        measured=float(row["value"]) if (row.get("value") or "").strip() else math.nan,
        convention=(row.get("flops_convention") or "").strip(),
        reliability=(row.get("reliability") or "").strip() or "unknown",
        source_url=row.get("source_url", ""),
        **row_origin(row),
    )
    if missing:
        return TrainingCase(**head, reason=f"missing required columns: {', '.join(missing)}")
    bad = one_of("metric", head["metric"], METRICS)
    if head["convention"]:
        bad = bad or one_of("flops_convention", head["convention"], CONVENTIONS)
    if bad:
        return TrainingCase(**head, reason=bad)
    if head["gpu"] not in list_hardware():
        return TrainingCase(**head, reason=f"GPU {head['gpu']!r} is not in the hardware catalog")
    row, assumed, why = fill_assumptions(row)
    if why:
        return TrainingCase(**head, reason=why)
    model, why, notes = row_model(row)
    assumed += notes
    if model is None:
        return TrainingCase(**head, reason=why)
    hw = load_hardware(head["gpu"])
    prec_name = (row.get("precision") or "").strip()
    if not prec_name:
        prec_name = "bf16"
        assumed.append("precision=bf16 (empty; fp16 and bf16 share the peak)")
    precision = get_precision(prec_name)
    unsupported = check_supported(precision, hw)
    if unsupported:
        return TrainingCase(**head, reason=unsupported)
    graph = (row.get("cuda_graph") or "").strip()
    if graph and (bad := one_of("cuda_graph", graph, CUDA_GRAPH_MODES)):
        return TrainingCase(**head, reason=bad)
    software = _row_software(row)
    seq = int_cell(row["seq_len"])
    gbs = int_cell(row.get("global_batch_seqs"))
    if not gbs:
        return TrainingCase(
            **head,
            reason="global_batch_seqs is empty: the pipeline bubble and the number of "
            "gradient-accumulation steps depend on it",
        )
    tp, pp, cp = int_cell(row["tp"]), int_cell(row["pp"]), int_cell(row.get("cp"), 1)
    dp = int_cell(row.get("dp"), head["num_gpus"] // (tp * pp * cp))
    if tp * pp * dp * cp != head["num_gpus"]:
        return TrainingCase(
            **head, reason=f"TP·PP·DP·CP = {tp * pp * dp * cp} but num_gpus = {head['num_gpus']}"
        )
    ep = int_cell(row.get("ep"), 1)
    if int_cell(row.get("etp"), 1) != 1:
        return TrainingCase(**head, reason="ETP > 1 is not modelled")
    sp_cell = (row.get("sp") or "").strip()
    sp = bool(int(sp_cell)) if sp_cell else (tp > 1 and software.flash_attention)
    if not sp_cell and tp > 1:
        assumed.append(f"sp={int(sp)} (empty)")
    zero = 3 if int_cell(row.get("fsdp"), 0) else software.default_zero
    mbs, vps, rcs, defaults = _knob_options(
        row, global_batch=gbs, dp=dp, pp=pp, layers=model.layers, software=software
    )
    assumed += defaults
    for label, options in (("micro_batch", mbs), ("vp", vps), ("recompute", rcs)):
        if len(options) > 1:
            assumed.append(f"{label} unstated, no {software.name} default: range over {options}")
    rl = int_cell(row.get("recompute_layers"))
    candidates = tuple(
        Layout(
            tp=tp,
            pp=pp,
            dp=dp,
            cp=cp,
            ep=ep,
            vp=v,
            sp=sp,
            micro_batch=b,
            recompute=rc,
            zero=zero,
            recompute_layers=rl if rc == "full" else None,
        )
        for b, v, rc in itertools.product(mbs, vps, rcs)
    )
    if not candidates:
        return TrainingCase(
            **head, reason=f"no micro-batch in {UNSTATED_MICRO_BATCHES} divides the batch per DP rank"
        )
    train_tokens = float(row["train_tokens"]) if (row.get("train_tokens") or "").strip() else 0.0
    if head["metric"] == "time_to_train_min" and not train_tokens:
        return TrainingCase(
            **head, reason="time_to_train_min needs the number of training tokens (train_tokens column)"
        )
    return TrainingCase(
        **head,
        model=model,
        hardware=hw,
        precision=precision,
        software=software,
        seq_len=seq,
        global_batch=gbs,
        train_tokens=train_tokens,
        candidates=candidates,
        assumed=tuple(assumed),
    )


def load_cases(path: str | Path | None = None) -> list[TrainingCase]:
    """Every row of a validation CSV as a TrainingCase (default: the shipped rows)."""
    path = Path(path) if path is not None else default_runs_path()
    return [case_from_row(row) for row in read_rows(path, REQUIRED)]


def _conventions(case: TrainingCase) -> tuple[str, ...]:
    """The FLOP conventions a row's metric is read under: its own; for a FLOP-rate metric whose source
    does not say how it counted, every convention (the prediction is then the midpoint of their range)."""
    if case.convention:
        return (case.convention,)
    return CONVENTIONS if case.metric in FLOP_RATE_METRICS else ("model",)


def _metric(case: TrainingCase, step_s: np.ndarray, convention: str) -> np.ndarray:
    """The row's metric for each candidate layout, from its step time (seconds), FLOPs counted by
    `convention` (for tflops_per_gpu and mfu)."""
    tok_gpu = case.global_batch * case.seq_len / step_s / case.num_gpus
    if case.metric == "tokens_per_s_per_gpu":
        return tok_gpu
    if case.metric == "step_time_s":
        return step_s
    if case.metric == "time_to_train_min":
        return case.train_tokens / (tok_gpu * case.num_gpus) / 60.0
    per_mode = {
        rc: training_flops_per_token(case.model, case.seq_len, convention=convention, recompute=rc)
        for rc in {lay.recompute for lay in case.candidates}
    }
    rate = np.array([per_mode[lay.recompute] for lay in case.candidates]) * tok_gpu
    if case.metric == "tflops_per_gpu":
        return rate / 1e12
    # mfu
    return rate / case.hardware.peak(case.precision.peak_key)


def predict_case(case: TrainingCase, calibration: Calibration) -> RowResult:
    """Predict one resolved case (all its candidate layouts in one vectorised call). With several candidates
    (unstated knobs) or an unstated FLOP convention, the prediction is the midpoint of the metric's range
    over the valid plans that fit in memory (over the valid ones if none fits, over all if none is valid),
    each plan read under every convention in play."""
    assert not case.reason, case.reason
    lays = case.candidates
    grid = PlanGrid.from_layouts(lays, default_zero=case.software.default_zero)
    out = evaluate_plans(
        case.model,
        case.hardware,
        grid,
        precision=case.precision,
        software=case.software,
        calibration=calibration,
        seq_len=case.seq_len,
        global_batch=case.global_batch,
    )
    masks = grid.rule_masks(case.model, case.seq_len, case.global_batch)
    valid = ~np.any(np.stack(list(masks.values())), axis=0)
    fits = out["memory_B"] <= case.hardware.hbm_bytes
    convs = _conventions(case)
    step_s = np.asarray(out["step_s"], dtype=float)
    values = np.concatenate([_metric(case, step_s, conv) for conv in convs])
    pools = ((fits & valid, "valid plans that fit"), (valid, "valid plans, none fits"))
    pool, kind = next(((m, k) for m, k in pools if np.any(m)), (np.ones(len(lays), dtype=bool), "plans"))
    pool = np.tile(pool, len(convs))
    idx = np.flatnonzero(pool & np.isfinite(values))
    idx = idx if len(idx) else np.arange(len(values))
    span: tuple[float, float] | None = None
    if len(values) == 1:
        j, pred = 0, float(values[0])
    else:
        span = (float(values[idx].min()), float(values[idx].max()))
        pred = 0.5 * (span[0] + span[1])
        j = int(idx[np.argmin(np.abs(values[idx] - pred))])
    i = j % len(lays)
    lay = lays[i]
    chosen: list[str] = []
    if span is not None:
        parts = [f"flops_convention unstated: range over {', '.join(convs)}"] if len(convs) > 1 else []
        if len(lays) > 1:
            parts.append(f"range over {len(set(idx % len(lays)))} of {len(lays)} {kind}")
        tag = f" ({convs[j // len(lays)]})" if len(convs) > 1 else ""
        chosen.append("; ".join([*parts, f"nearest the midpoint: {lay.describe()}{tag}"]))
    u = calibration.uncertainty
    interval = None if u is None else u.interval(pred, case_group(case))
    return RowResult(
        id=case.id,
        model=case.model_name,
        gpu=case.gpu,
        num_gpus=case.num_gpus,
        metric=case.metric,
        reliability=case.reliability,
        measured=case.measured,
        predicted=pred,
        error=pred / case.measured - 1.0,
        layout=lay.describe(),
        fits_memory=bool(fits[i]),
        memory_GiB=float(out["memory_B"][i]) / 1024**3,
        assumed=case.assumed + tuple(chosen),
        split=case.split,
        interval=interval,
        predicted_range=span,
    )


def case_group(case: TrainingCase) -> str:
    """A row's uncertainty group: GPU generation and dense/MoE (tenfold.perf.uncertainty.group_key)."""
    return group_key(case.hardware.arch, case.model.is_moe)


def _mape(rows: list[RowResult]) -> float:
    return float(np.mean([abs(r.error) for r in rows])) if rows else math.nan


def build_report(
    results: list[RowResult], unpredictable: list[tuple[str, str]], moe_ids: set[str]
) -> ValidationReport:
    """Per-row results and unpredicted rows -> MAPE overall, by GPU, reliability and dense/moe over the scored
    splits (rows.SCORED), and by split over all of them. Shared by the training and inference validations."""
    by = defaultdict(list)
    rel = defaultdict(list)
    kind = defaultdict(list)
    split = defaultdict(list)
    scored = row_csv.scored_rows(results)
    for r in results:
        split[r.split].append(r)
    for r in scored:
        by[r.gpu].append(r)
        rel[r.reliability].append(r)
        kind["moe" if r.id in moe_ids else "dense"].append(r)
    inside = [r.covered for r in scored if r.covered is not None]
    return ValidationReport(
        rows=tuple(results),
        unpredictable=tuple(unpredictable),
        mape=_mape(scored),
        mape_by_gpu={k: _mape(v) for k, v in sorted(by.items())},
        mape_by_reliability={k: _mape(v) for k, v in sorted(rel.items())},
        mape_by_arch={k: _mape(v) for k, v in sorted(kind.items())},
        mape_by_split={k: _mape(v) for k, v in sorted(split.items())},
        coverage=sum(inside) / len(inside) if inside else math.nan,
    )


def validate_training(
    path: str | Path | None = None, *, calibration: Calibration | None = None
) -> ValidationReport:
    """Predict every row of a validation CSV (default: the shipped rows) and summarise the errors.

    With the shipped calibration, rows the stored leave-one-source-out cross-validation covers also carry
    their out-of-source error and interval (`cv_error`, `cv_interval`), and the report's
    `cross_validation` holds that MAPE and coverage."""
    cal = calibration or load_calibration()
    cases = load_cases(path)
    results = [predict_case(c, cal) for c in cases if not c.reason]
    cv = read_cv() if calibration is None else {}
    results, info = attach_cv(results, cv, fitted_on=dict(cal.fit).get("date", ""))
    moe = {c.id for c in cases if c.model is not None and c.model.is_moe}
    report = build_report(results, [(c.id, c.reason) for c in cases if c.reason], moe)
    return replace(report, cross_validation=info) if info else report
