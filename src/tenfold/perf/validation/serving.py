"""Validation against published serving measurements: predict each row with its own deployment.

Reads a CSV in the schema of `tenfold/data/validation/inference_runs.csv` (the published-runs columns plus
optional tenfold extension columns; docs/validation.md).
For each row:

* the architecture comes from the row's columns, with what the schema lacks (MLA ranks, dense layers,
  shared experts, MTP, sliding window, biases) from the catalog model the `model` column names;
* the deployment is the row's: tp is the attention TP, pp the pipeline stages (empty = 1); with
  `attention_dp` = 1 (or empty, tp = 1 on several GPUs) attention runs data-parallel over
  num_gpus / (tp·pp) replicas; with `attention_dp` = 0 the num_gpus / (tp·pp) instances are independent
  replicas (they never exchange anything: per-GPU rates are one instance's, at its share of the
  concurrency); ep is the row's;
* the engine preset (`engine_preset`, default trtllm) with the row's stated overrides (`kv_fraction`,
  `max_batch_size`, `max_num_tokens`); `concurrency` empty = the engine's max load (all that fit);
* formats: `weights_precision`, `attention_precision` (default: the weights'), `kv_precision`; an empty or
  `auto` KV cell is resolved as the engines resolve "auto" (serving.query.auto_kv_precision: the
  checkpoint's kv_cache_quant_algo, else the model dtype), and the row's notes say so; a format the GPU
  has no tensor cores for runs weight-only where the row's engine supports it (query.resolve_format);
* speculative decoding from `draft_tokens` / `accepted_tokens`;
* the metric in the row's unit: output_tokens_per_s_per_gpu, total_tokens_per_s_per_gpu,
  input_tokens_per_s_per_gpu, output_tokens_per_s_per_user (1/TPOT), ttft_ms, tpot_ms;
* `role`: empty for an aggregated instance; `prefill` or `decode` for one pool of a disaggregated (P/D)
  deployment measured on its own (num_gpus, tp, ep = that pool's), predicted with disagg.py's prefill-only
  or decode-only worker. A prefill row needs no output_len; its rates are prompt tokens (input_tokens_*,
  or total_tokens_* which then counts the same tokens) and TTFT; a decode row's are generated tokens,
  tok/s/user and TPOT; `redundant_experts` gives an expert load balancer's extra slots (EPLB).

Rows that cannot be predicted (no input or output length, no GPU count, unknown GPU or metric, an MLA
model without a catalog entry, an inconsistent mapping, an infeasible configuration) are returned with the
reason; none is dropped. The report is the training validation's (`validate.build_report`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from tenfold.perf.calibration import Calibration, load_calibration
from tenfold.perf.serving.disagg import decode_worker, prefill_worker
from tenfold.perf.serving.estimate import estimate_for
from tenfold.perf.serving.presets import engine
from tenfold.perf.serving.query import ServingQuery
from tenfold.perf.serving.results import Deployment
from tenfold.perf.specs.catalog import data_dir
from tenfold.perf.specs.hardware import list_hardware
from tenfold.perf.uncertainty import serving_group_key
from tenfold.perf.validation.cvresults import attach_cv, read_cv
from tenfold.perf.validation.rows import choice_reason as one_of
from tenfold.perf.validation.rows import fill_assumptions, int_cell, read_rows, row_model, row_origin
from tenfold.perf.validation.training import (
    RowResult,
    ValidationReport,
    build_report,
)

# A row's metric (in the CSV's unit) -> the estimate's field and the factor from its unit to the row's
METRICS = {
    "output_tokens_per_s_per_gpu": ("output_tokens_per_s_per_gpu", 1.0),
    "total_tokens_per_s_per_gpu": ("total_tokens_per_s_per_gpu", 1.0),
    "input_tokens_per_s_per_gpu": ("", 1.0),  # total - output (predict_case)
    "output_tokens_per_s_per_user": ("output_tokens_per_s_per_user", 1.0),
    "ttft_ms": ("ttft_s", 1e3),
    "tpot_ms": ("tpot_s", 1e3),
}
REQUIRED = ("id", "model", "gpu", "metric", "value", "layers", "hidden", "heads")
EXTENSION_COLUMNS = (
    "engine_preset",
    "attention_precision",
    "kv_fraction",
    "max_batch_size",
    "max_num_tokens",
    "draft_tokens",
    "accepted_tokens",
    "assumptions",
    "source",
    "split",
    "role",
    "redundant_experts",
)
# What each disaggregated role's rows may measure -> the WorkerEstimate field and the factor to the row's unit
ROLE_METRICS = {
    "prefill": {
        "input_tokens_per_s_per_gpu": ("input_tokens_per_s_per_gpu", 1.0),
        "total_tokens_per_s_per_gpu": ("input_tokens_per_s_per_gpu", 1.0),
        "ttft_ms": ("ttft_s", 1e3),
    },
    "decode": {
        "output_tokens_per_s_per_gpu": ("output_tokens_per_s_per_gpu", 1.0),
        "output_tokens_per_s_per_user": ("tpot_s", -1.0),
        "tpot_ms": ("tpot_s", 1e3),
    },
}


def default_runs_path() -> Path:
    return Path(str(data_dir("validation") / "inference_runs.csv"))


@dataclass(frozen=True, kw_only=True)
class ServingCase:
    """One row resolved into a `ServingQuery` and a concurrency (or the reason it cannot be).

    The row's identity and measurement (id, model_name, gpu, num_gpus, metric, measured, reliability,
    source_url); role: "", "prefill" or "decode" (module docstring); reason: why it cannot be predicted
    ('' if it can); query: the configuration (None when it cannot); concurrency: requests in flight
    (None = the engine's max load); assumed: what was assumed for cells the row leaves empty.
    """

    id: str
    model_name: str
    gpu: str
    num_gpus: int
    metric: str
    measured: float
    reliability: str
    source_url: str
    source: str = ""
    split: str = "fit"
    role: str = ""
    reason: str = ""
    query: ServingQuery | None = None
    concurrency: int | None = None
    assumed: tuple[str, ...] = ()


def _cell(row: dict[str, str], key: str) -> str:
    return (row.get(key) or "").strip()


def case_from_row(row: dict[str, str]) -> ServingCase:
    """Resolve one CSV row (see the module docstring)."""
    head = dict(
        id=row.get("id", "?"),
        model_name=row.get("model", ""),
        gpu=_cell(row, "gpu"),
        num_gpus=int_cell(row.get("num_gpus"), 0) or 0,
        metric=_cell(row, "metric"),
        measured=float(row["value"]) if _cell(row, "value") else math.nan,
        reliability=_cell(row, "reliability") or "unknown",
        source_url=row.get("source_url", ""),
        **row_origin(row),
        role=_cell(row, "role").lower(),
    )
    missing = [k for k in REQUIRED if not _cell(row, k)]
    if missing:
        return ServingCase(**head, reason=f"missing required columns: {', '.join(missing)}")
    if bad := one_of("metric", head["metric"], METRICS):
        return ServingCase(**head, reason=bad)
    role = head["role"]
    if role and role not in ROLE_METRICS:
        return ServingCase(**head, reason=f"role {role!r} is not one of '', {', '.join(ROLE_METRICS)}")
    if role and head["metric"] not in ROLE_METRICS[role]:
        allowed = ", ".join(ROLE_METRICS[role])
        return ServingCase(**head, reason=f"a {role} worker's row measures {allowed}, not {head['metric']}")
    if head["gpu"] not in list_hardware():
        return ServingCase(**head, reason=f"GPU {head['gpu']!r} is not in the hardware catalog")
    row, assumed, why = fill_assumptions(row, blank=("", "auto"))
    if why:
        return ServingCase(**head, reason=why)
    for key, why in (
        ("input_len", "input_len is empty (variable-length dataset: its length statistics are needed)"),
        ("output_len", "output_len is empty: decode throughput depends on the generated length"),
        ("num_gpus", "num_gpus is empty: the per-GPU rate depends on how many GPUs the point used"),
        ("weights_precision", "weights_precision is empty"),
    ):
        if not _cell(row, key) and not (key == "output_len" and role == "prefill"):
            return ServingCase(**head, reason=why)
    model, why, notes = row_model(row)
    assumed += notes
    if model is None:
        return ServingCase(**head, reason=why)
    tp, pp = int_cell(row.get("tp"), 0), int_cell(row.get("pp"), 1) or 1
    if not tp:
        return ServingCase(
            **head, reason=f"tp is empty: the split of the {head['num_gpus']} GPUs is not stated"
        )
    ep = int_cell(row.get("ep"), 1)
    dep, replicas, why = row_deployment(head["num_gpus"], tp, pp, ep, _cell(row, "attention_dp"))
    if dep is None:
        return ServingCase(**head, reason=why)
    dep = replace(dep, redundant_experts=int_cell(row.get("redundant_experts"), 0))
    if why:
        assumed.append(why)
    preset = _cell(row, "engine_preset")
    if not preset:
        preset = "trtllm"
        assumed.append("engine_preset=trtllm (empty)")
    overrides = {}
    for key, conv in (("kv_fraction", float), ("max_batch_size", int), ("max_num_tokens", int)):
        if _cell(row, key):
            overrides[key] = conv(float(row[key]))
    eng = engine(preset, **overrides)
    weights = _cell(row, "weights_precision")
    kv = _cell(row, "kv_precision") or "auto"  # empty = what the engine picks: query.auto_kv_precision
    isl, osl = int_cell(row["input_len"]), int_cell(row.get("output_len"), 1)
    conc = int_cell(row.get("concurrency"))
    if conc is not None and replicas > 1:
        conc = math.ceil(conc / replicas)
    draft = int_cell(row.get("draft_tokens"), 0)
    accepted = float(row["accepted_tokens"]) if _cell(row, "accepted_tokens") else 1.0
    if draft and not _cell(row, "accepted_tokens"):
        return ServingCase(
            **head, reason=f"draft_tokens={draft} without accepted_tokens: the speedup is unknown"
        )
    query = ServingQuery(
        model=model,
        hardware=head["gpu"],
        deployment=dep,
        engine=eng,
        input_len=isl,
        output_len=osl,
        precision=weights,
        attention_precision=_cell(row, "attention_precision") or weights,
        kv_precision=kv,
        draft_tokens=draft,
        accepted_tokens=accepted,
    )
    return ServingCase(**head, query=query, concurrency=conc, assumed=tuple(assumed))


def row_deployment(gpus: int, tp: int, pp: int, ep: int, adp: str) -> tuple[Deployment | None, int, str]:
    """A row's instance, how many independent replicas of it the row's GPUs hold, and a note on what was
    assumed (or, with no deployment, why none). `adp` is the attention_dp cell ('0', '1' or '')."""
    if gpus % (tp * pp):
        return None, 0, f"tp={tp} x pp={pp} = {tp * pp} GPUs per instance does not divide num_gpus={gpus}"
    rest = gpus // (tp * pp)
    if rest > 1 and adp == "0":
        dep = Deployment(tp=tp, pp=pp, ep=ep)
        return dep, rest, f"{rest} independent replicas of {dep.describe()} (attention_dp=0)"
    note = f"attention_dp=1 (tp={tp} on {gpus} GPUs)" if rest > 1 and adp == "" else ""
    return Deployment(tp=tp, dp=rest, ep=ep, pp=pp), 1, note


def load_cases(path: str | Path | None = None) -> list[ServingCase]:
    """Every row of an inference validation CSV as a ServingCase (default: the shipped rows)."""
    path = Path(path) if path is not None else default_runs_path()
    return [case_from_row(row) for row in read_rows(path, REQUIRED)]


def case_group(case: ServingCase) -> str:
    """A row's uncertainty group: engine family and dense/MoE (tenfold.perf.uncertainty)."""
    assert case.query is not None, case.reason
    return serving_group_key(case.query.engine.name, case.query.model.is_moe)


def predict_worker(case: ServingCase, calibration: Calibration) -> RowResult:
    """Predict a `role` row with disagg.py's prefill-only or decode-only worker."""
    q = case.query
    run = prefill_worker if case.role == "prefill" else decode_worker
    w = run(q, concurrency=case.concurrency, calibration=calibration)
    field, scale = ROLE_METRICS[case.role][case.metric]
    value = getattr(w, field)
    pred = (1.0 / value if scale < 0 else value * scale) if w.feasible else math.nan
    layout = f"{case.role} {q.deployment.describe()} {q.precision}/kv {q.formats.kv} {q.engine.name}"
    batch = f"batch {w.batch_per_rank}/rank ({w.limited_by})" if w.feasible else w.reason
    return row_result(case, calibration, pred, f"{layout}, {batch}", w.feasible, math.nan, w.notes)


def predict_case(case: ServingCase, calibration: Calibration) -> RowResult:
    """Predict one resolved case; an infeasible configuration comes back with a NaN prediction."""
    assert not case.reason, case.reason
    if case.role:
        return predict_worker(case, calibration)
    q = case.query
    est = estimate_for(q, concurrency=case.concurrency, calibration=calibration)
    if case.metric == "input_tokens_per_s_per_gpu":
        pred = est.total_tokens_per_s_per_gpu - est.output_tokens_per_s_per_gpu
    else:
        field, scale = METRICS[case.metric]
        pred = getattr(est, field) * scale
    pred = pred if est.feasible else math.nan
    wo = " weight-only" if q.weight_only else ""
    layout = f"{q.deployment.describe()} {q.precision}{wo}/kv {q.formats.kv} {q.engine.name}"
    batch = f"batch {est.batch_per_rank}/rank ({est.limited_by})" if est.feasible else est.reason
    memory = est.weights_GiB + est.workspace_GiB + max(est.kv_budget_GiB, 0.0)
    return row_result(case, calibration, pred, f"{layout}, {batch}", est.feasible, memory, est.notes)


def row_result(
    case: ServingCase,
    calibration: Calibration,
    pred: float,
    layout: str,
    feasible: bool,
    memory_GiB: float,
    notes: tuple[str, ...],
) -> RowResult:
    """A row's result: its prediction, error, layout and the calibration's 80 % range (feasible rows)."""
    u = calibration.uncertainty
    interval = u.interval(pred, case_group(case)) if u is not None and feasible else None
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
        layout=layout,
        fits_memory=feasible,
        memory_GiB=memory_GiB,
        assumed=case.assumed + tuple(notes),
        split=case.split,
        interval=interval,
    )


def validate_inference(
    path: str | Path | None = None, *, calibration: Calibration | None = None
) -> ValidationReport:
    """Predict every row of an inference CSV (default: the shipped rows) and summarise the errors.

    With the shipped calibration, rows the stored leave-one-source-out cross-validation
    (`data/validation/inference_cv.csv`) covers carry their out-of-source error and interval, and the
    report's `cross_validation` holds that MAPE and coverage (as for training)."""
    cal = calibration or load_calibration(kind="inference")
    cases = load_cases(path)
    results, unpredictable = [], []
    for c in cases:
        if c.reason:
            unpredictable.append((c.id, c.reason))
            continue
        r = predict_case(c, cal)
        if math.isfinite(r.predicted):
            results.append(r)
        else:
            unpredictable.append((c.id, f"infeasible as stated: {r.layout}"))
    cv = read_cv(kind="inference") if calibration is None else {}
    results, info = attach_cv(results, cv, fitted_on=dict(cal.fit).get("date", ""))
    moe = {c.id for c in cases if c.query is not None and c.query.model.is_moe}
    report = build_report(results, unpredictable, moe)
    return replace(report, cross_validation=info) if info else report
