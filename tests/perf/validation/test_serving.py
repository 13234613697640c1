"""Validation of the serving model against the shipped published runs: the accuracy it is held to.

Thresholds are the achieved errors plus a small margin (the issue asks to start at 30 % and tighten
towards 15 %). The calibration is in-sample here; the held-out error is in test_calibration.py and
docs/inference.md.
"""

import csv
import math
from pathlib import Path

import pytest

from tenfold.perf.validation.serving import (
    EXTENSION_COLUMNS,
    case_from_row,
    default_runs_path,
    load_cases,
    validate_inference,
)
from tenfold.perf.validation.training import ValidationReport

# in-sample figures of the committed fit (cross-validated ones: docs/inference.md, test_crossval_inference.py)
MAPE_OVERALL = 0.09  # achieved 7.3 % over the 21 predictable curated rows
MAPE_HIGH = 0.10  # achieved 8.1 % over their 8 high-reliability rows (3.4 % before issue 16's 186-row refit)
MAPE_FIT = 0.15  # achieved 13.0 % over all 117 fit rows
MAPE_HOLDOUT = 0.16  # achieved 13.7 % over the 56 hold-out rows (never fitted on: out of sample)
CURATED_ROWS = 32  # the curated research rows come first; rows added from issue 16 on follow them
# the research copy beside the repository (../shared), where one exists; the test skips without it
RESEARCH_COPY = (
    Path(__file__).resolve().parents[3].parent / "shared" / "research" / "validation" / "inference_runs.csv"
)


@pytest.fixture(scope="module")
def report():
    return validate_inference()


def test_validation_mape(report):
    assert isinstance(report, ValidationReport)
    with open(default_runs_path(), newline="") as fh:
        ids = [row["id"] for row in csv.DictReader(fh)]
    assert len(report.rows) + len(report.unpredictable) == len(ids)
    curated = set(ids[:CURATED_ROWS])
    # no row added since the curated set is refused, but the two GB200 prefill pools whose weights the
    # LMSYS post offloads to CPU memory (tenfold does not model offload: it says so and what would fit)
    offloaded = {"lmsys-gb200-p2-prefill-fp4-2k", "lmsys-gb200-p2-prefill-fp8-2k"}
    assert {i for i, _ in report.unpredictable} <= curated | offloaded
    assert all("cpu-offload" in why for i, why in report.unpredictable if i in offloaded)
    old = [r for r in report.rows if r.id in curated]
    assert len(old) == 21

    def mape(rows):
        return sum(abs(r.error) for r in rows) / len(rows)

    assert mape(old) <= MAPE_OVERALL
    assert mape([r for r in old if r.reliability == "high"]) <= MAPE_HIGH
    assert mape([r for r in report.rows if r.split == "fit"]) <= MAPE_FIT
    assert mape([r for r in report.rows if r.split == "holdout"]) <= MAPE_HOLDOUT


def test_every_row_is_predicted_or_listed_with_a_reason(report):
    ids = {r.id for r in report.rows} | {i for i, _ in report.unpredictable}
    with open(default_runs_path(), newline="") as fh:
        assert ids == {row["id"] for row in csv.DictReader(fh)}
    for _, why in report.unpredictable:
        assert why
    for r in report.rows:
        assert math.isfinite(r.predicted) and r.predicted > 0
        assert r.error == pytest.approx(r.predicted / r.measured - 1)
    d = report.to_dict()
    assert {"rows", "mape"} <= set(d) and d["mape"]["overall"] == report.mape
    assert set(report.mape_by_gpu) >= {"h100-sxm", "h200", "b200", "gb200", "gb300"}


def test_shipped_rows_keep_the_research_columns():
    """The project's copy = the research CSV's rows and columns unchanged (rows added later follow them),
    then the documented extension columns."""
    with open(default_runs_path(), newline="") as fh:
        shipped = list(csv.reader(fh))
    header = shipped[0]
    assert header[-len(EXTENSION_COLUMNS) :] == list(EXTENSION_COLUMNS)
    if not RESEARCH_COPY.exists():
        pytest.skip("the research copy is not on this machine")
    with open(RESEARCH_COPY, newline="") as fh:
        research = list(csv.reader(fh))
    # the curated rows come first, unchanged; rows added since (issue 16) follow them
    assert len(shipped) >= len(research)
    for ours, theirs in zip(shipped, research, strict=False):
        assert ours[: len(theirs)] == theirs


def test_research_schema_without_extension_columns_still_works(tmp_path):
    """A CSV in the research schema is accepted; rows it cannot resolve say why."""
    with open(default_runs_path(), newline="") as fh:
        rows = list(csv.DictReader(fh))
    base = [c for c in rows[0] if c not in EXTENSION_COLUMNS]
    out = tmp_path / "runs.csv"
    with open(out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=base, extrasaction="ignore")
        w.writeheader()
        keep = [r for r in rows if r["id"].startswith("trtllm10-")]
        bad = [
            {**keep[0], "id": "bad-gpu", "gpu": "tpu-v9"},
            {**keep[0], "id": "no-isl", "input_len": ""},
            {**keep[0], "id": "bad-metric", "metric": "joules"},
            {**keep[0], "id": "split", "tp": "3"},
            {**keep[0], "id": "too-big", "model": "Llama-3.1-405B", "num_gpus": "1", "tp": "1"},
        ]
        w.writerows([*keep, *bad])
    rep = validate_inference(out)
    reasons = dict(rep.unpredictable)
    assert "not in the hardware catalog" in reasons["bad-gpu"]
    assert "input_len is empty" in reasons["no-isl"]
    assert "metric" in reasons["bad-metric"]
    assert "does not divide" in reasons["split"]
    assert "infeasible" in reasons["too-big"] and "GiB" in reasons["too-big"]
    assert len(rep.rows) == len(keep)
    assert all(any("engine_preset=trtllm" in a for a in r.assumed) for r in rep.rows)


def test_an_assumption_on_no_column_is_a_row_error():
    """The serving rows share the training rows' check (rows.fill_assumptions): a key on no column is the
    row's error, named."""
    with open(default_runs_path(), newline="") as fh:
        row = next(csv.DictReader(fh))
    case = case_from_row({**row, "assumptions": "kv_precison=fp8 (a typo)"})
    assert case.reason == "assumptions: 'kv_precison' is not a column"


def test_row_assumptions_are_reported():
    cases = {c.id: c for c in load_cases()}
    llama = cases["trtllm12-llama33-70b-b200-tp1-fp4-1k1k"]
    assert llama.query.formats.kv == "fp8" and any("kv auto: nvfp4 weights" in n for n in llama.query.notes)
    h200 = cases["trtllm-blog-dsr1-h200-tp8-minlat"]
    assert h200.query.accepted_tokens == 2.82 and any("accepted_tokens=2.82" in a for a in h200.assumed)
    dep = cases["trtllm12-dsr1-b200-dep4-fp4-1k1k"].query.deployment
    assert (dep.tp, dep.dp, dep.ep) == (1, 4, 4)
    mla = cases["trtllm-blog-dsr1-b200-tp8-minlat"].query.deployment
    assert (mla.tp, mla.dp, mla.ep, mla.moe_tp) == (8, 1, 2, 4)


def test_role_rows_use_the_disaggregated_workers(report):
    """`role` rows are predicted by the prefill-only / decode-only worker (disagg.py)."""
    rows = {r.id: r for r in report.rows}
    assert rows["lmsys-ep96-h100-decode-2k"].layout.startswith("decode DEP72")
    assert rows["lmsys-ep96-h100-prefill-2k"].layout.startswith("prefill DEP32")
    cases = {c.id: c for c in load_cases()}
    dec = cases["lmsys-gb200-p2-decode-fp4-2k"]
    assert dec.role == "decode" and dec.query.output_len == 100
    assert dec.query.deployment.redundant_experts == 32
    assert any("redundant_experts=32" in a for a in dec.assumed)
    assert cases["lmsys-ep96-h100-prefill-1k"].query.output_len == 1  # a prefill row needs no OSL


def test_role_and_metric_errors_are_named(tmp_path):
    with open(default_runs_path(), newline="") as fh:
        rows = list(csv.DictReader(fh))
    keep = next(r for r in rows if r["id"] == "lmsys-ep96-h100-decode-2k")
    out = tmp_path / "runs.csv"
    with open(out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(
            [
                {**keep, "id": "bad-role", "role": "router"},
                {**keep, "id": "bad-pair", "metric": "ttft_ms"},
                {**keep, "id": "no-redundant", "redundant_experts": ""},
            ]
        )
    reasons = dict(validate_inference(out).unpredictable)
    assert "role 'router'" in reasons["bad-role"]
    assert "decode worker's row measures" in reasons["bad-pair"]
    assert "256 experts" in reasons["no-redundant"]
