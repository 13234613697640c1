"""Validation against the shipped published runs: the accuracy the model is held to.

Thresholds are the achieved errors plus a small margin (the issue asks to start at 15 % / 10 % and
tighten as the model improves). Calibration is in-sample; the held-out error is in test_calibration.py
and docs/perf.md.
"""

import csv
import hashlib
import math
from dataclasses import replace

import pytest

from tenfold.perf.calibration import load_calibration
from tenfold.perf.flops import training_flops_per_token
from tenfold.perf.training.stack import stack
from tenfold.perf.validation.training import (
    build_report,
    case_from_row,
    default_runs_path,
    load_cases,
    predict_case,
    validate_training,
)

# In-sample MAPE over the split = fit rows: achieved 7.1 % overall and 6.3 % on high-reliability rows
# (2026-12-06 refit on 78 fit rows, the two defect rows out; docs/perf.md)
MAPE_OVERALL = 0.09
MAPE_HIGH = 0.08
# Rows added for issue 15 (Megatron-Bridge 25.09-26.06, the Megatron-MoE model zoo, torchtitan, the third
# stage of the Llama 3 paper's Table 4): their hold-out was drawn by a content-blind rule before any fit
ADDED_AFTER_FIT = ("mb25", "mb26", "zoo-", "tt24-", "tt25-", "trainy-", "llama31-405b-8k-16384gpu")


def _csv_rows() -> list[dict[str, str]]:
    with open(default_runs_path(), newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def report():
    return validate_training()


def test_validation_mape(report):
    assert len(report.rows) + len(report.unpredictable) == len(_csv_rows())
    fitted = [r for r in report.rows if r.split == "fit"]
    high = [r for r in fitted if r.reliability == "high"]
    assert sum(abs(r.error) for r in fitted) / len(fitted) <= MAPE_OVERALL
    assert sum(abs(r.error) for r in high) / len(high) <= MAPE_HIGH


def test_every_row_has_a_source_and_a_split():
    rows = _csv_rows()
    assert all(r["source"].strip() and r["split"] in ("fit", "holdout", "defect") for r in rows)
    added = [r for r in rows if r["id"].startswith(ADDED_AFTER_FIT)]
    assert len(added) >= 20
    # the hold-out was drawn before any fit by a content-blind rule on the id (docs/validation.md)
    for r in added:
        drawn = int(hashlib.sha1(r["id"].encode()).hexdigest(), 16) % 3 == 0
        assert (r["split"] == "holdout") == drawn, r["id"]
    assert not any(r["split"] == "holdout" for r in rows if r not in added)


# Rows marked defect and the faster run their publisher's own tables give (tok/s/GPU): the 26.02.01 patch
# container on the same layout, and DGX-B200 in the same 26.02 table (docs/validation.md)
DEFECT_EVIDENCE = {"mb2602-qwen3-30b-h100-fp8": 9058, "mb2602-qwen3-235b-b300-mxfp8": 3805}


def test_defect_rows_have_their_evidence_and_are_shown_but_not_scored(report):
    rows = {r["id"]: r for r in _csv_rows()}
    assert {i for i, r in rows.items() if r["split"] == "defect"} == set(DEFECT_EVIDENCE)
    for rid, faster in DEFECT_EVIDENCE.items():
        assert faster >= 1.3 * float(rows[rid]["value"]), rid
        assert "split = defect:" in rows[rid]["notes"] and str(faster) in rows[rid]["notes"], rid
    shown = {r.id: r for r in report.rows}
    assert set(DEFECT_EVIDENCE) <= set(shown)
    scored = [r for r in report.rows if r.split != "defect"]
    assert report.mape == pytest.approx(sum(abs(r.error) for r in scored) / len(scored))
    defect = [shown[i] for i in DEFECT_EVIDENCE]
    assert report.mape_by_split["defect"] == pytest.approx(sum(abs(r.error) for r in defect) / len(defect))
    inside = [r.covered for r in scored if r.covered is not None]
    assert report.coverage == pytest.approx(sum(inside) / len(inside))


def test_every_row_is_predicted_or_listed_with_a_reason(report):
    ids = {r.id for r in report.rows} | {i for i, _ in report.unpredictable}
    assert ids == {row["id"] for row in _csv_rows()}
    for _, why in report.unpredictable:
        assert why
    for r in report.rows:
        assert math.isfinite(r.predicted) and r.predicted > 0
        assert r.error == pytest.approx(r.predicted / r.measured - 1)


def test_groupings(report):
    assert set(report.mape_by_gpu) >= {"a100-80gb", "h100-sxm", "h200", "b200", "b300", "gb200", "gb300"}
    d = report.to_dict()
    assert {"rows", "mape"} <= set(d) and d["mape"]["overall"] == report.mape


def test_research_schema_without_extension_columns_still_works(tmp_path):
    """A CSV in the research schema (no tenfold columns) is accepted; rows it cannot resolve say why."""
    src = default_runs_path()
    with open(src, newline="") as fh:
        rows = list(csv.DictReader(fh))
    base = [
        c
        for c in rows[0]
        if c
        not in (
            "software",
            "pp_schedule",
            "ep_dispatch",
            "ep_overlap",
            "tp_overlap",
            "cp_comm",
            "recompute_layers",
            "dense_layers",
            "recompute_modules",
            "offload_layers",
            "cuda_graph",
            "assumptions",
            "source",
            "split",
        )
    ]
    out = tmp_path / "runs.csv"
    with open(out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=base, extrasaction="ignore")
        w.writeheader()
        bad = [
            {**rows[0], "id": "bad-gpu", "gpu": "tpu-v9"},
            {**rows[0], "id": "no-batch", "global_batch_seqs": ""},
            {**rows[0], "id": "bad-metric", "metric": "joules"},
            {**rows[0], "id": "bad-convention", "flops_convention": "causal-ish"},
        ]
        w.writerows([*rows[:5], *bad])
    rep = validate_training(out)
    reasons = dict(rep.unpredictable)
    assert "not in the hardware catalog" in reasons["bad-gpu"]
    assert "global_batch_seqs is empty" in reasons["no-batch"]
    assert "metric" in reasons["bad-metric"]
    assert "flops_convention 'causal-ish'" in reasons["bad-convention"]
    assert len(rep.rows) == 5


def test_an_assumption_on_no_column_is_a_row_error():
    """An `assumptions` key that names no column would change nothing (a typo, or prose with an '=' in
    it): the row is not predicted and the reason names the key; a real column is filled and reported."""
    row = next(r for r in _csv_rows() if r["id"] == "opt-175b-a100x992")
    bad = case_from_row({**row, "assumptions": "global_batch_seqs=992; 124 ranks x 8 = 992"})
    assert bad.reason == "assumptions: '124 ranks x 8' is not a column"
    good = case_from_row({**row, "assumptions": "global_batch_seqs=992; micro_batch=4 (a launcher)"})
    assert not good.reason and "micro_batch=4 (assumptions column)" in good.assumed
    assert {lay.micro_batch for lay in good.candidates} == {4}


def test_opt_reads_its_launcher_and_its_flop_total():
    """OPT-175B's unstated knobs come from metaseq's own launcher (8 sequences per rank in one micro-batch,
    full activation checkpointing) and its FLOP count from the project's final note (4.30E+23 FLOPs for
    300B tokens, i.e. 8ND plus attention): one plan, no range, and that count is Narayanan's Eq. 3."""
    cases = {c.id: c for c in load_cases()}
    opt = cases["opt-175b-a100x992"]
    assert [lay.describe() for lay in opt.candidates] == ["TP8 PP1 DP124 mb8 full ZeRO-3"]
    assert predict_case(opt, load_calibration()).predicted_range is None
    flops = training_flops_per_token(opt.model, 2048, convention="hardware_incl_recompute") * 300e9
    assert flops == pytest.approx(4.30e23, rel=0.02)


def test_two_published_layouts_on_one_gpu_rank_as_measured(report):
    """DeepSeek-V3 on 256 DGX B200: 26.04 ran EP8 inside each node (PP16, 2815 tok/s); 26.04.01 spread EP32
    over four nodes with DeepEP and all-to-all overlap (PP8 VP2, 3328 tok/s). The model must order them the
    same way, and by about as much (the search picks between such plans)."""
    rows = {r.id: r for r in report.rows}
    inside, across = rows["mbridge-dsv3-b200-mxfp8"], rows["mb2604p-dsv3-b200-mxfp8"]
    measured = across.measured / inside.measured
    predicted = across.predicted / inside.predicted
    assert predicted > 1.0
    assert predicted == pytest.approx(measured, rel=0.10)


def test_unstated_flops_convention_of_a_flop_rate_is_ranged():
    """A FLOP rate whose source does not say how it counted (OPT's 147 TFLOP/s read without the project's
    FLOP total) is read under every convention: the range spans them all and the midpoint is scored, as for
    an unstated micro-batch."""
    row = next(r for r in _csv_rows() if r["id"] == "opt-175b-a100x992")
    assert row["flops_convention"] == "hardware_incl_recompute"
    row = {**row, "flops_convention": ""}
    cal = load_calibration(kind="training")
    unstated = predict_case(case_from_row(row), cal)
    assert (
        "flops_convention unstated: range over model, palm, hardware_incl_recompute" in unstated.assumed[-1]
    )
    each = [
        predict_case(case_from_row({**row, "flops_convention": c}), cal).predicted
        for c in ("model", "palm", "hardware_incl_recompute")
    ]
    assert unstated.predicted_range == pytest.approx((min(each), max(each)))
    assert unstated.predicted == pytest.approx(sum(unstated.predicted_range) / 2)
    # a rate in tokens needs no FLOP count: an empty convention changes nothing there
    tok = next(r for r in _csv_rows() if r["id"] == "dsv3-h800x2048")
    assert tok["flops_convention"] == ""
    assert predict_case(case_from_row(tok), cal).predicted == pytest.approx(
        predict_case(case_from_row({**tok, "flops_convention": "palm"}), cal).predicted, rel=1e-12
    )


@pytest.mark.parametrize("metric", ["mfu", "tflops_per_gpu"])
def test_flops_convention_sets_the_flops_behind_a_utilisation(metric):
    """The same run read as PaLM MFU (full attention counted) claims more FLOPs per token than under the
    causal count, so the same predicted step gives a higher MFU, by exactly the ratio of the counts."""
    row = next(r for r in _csv_rows() if r["id"] == "llama31-405b-128k-16384gpu")
    cal = load_calibration(kind="training")
    got = {}
    for conv in ("model", "palm"):
        case = case_from_row({**row, "metric": metric, "flops_convention": conv})
        assert not case.reason
        got[conv] = predict_case(case, cal).predicted
    m = case.model
    ratio = training_flops_per_token(m, 131072, convention="palm") / training_flops_per_token(m, 131072)
    assert got["palm"] / got["model"] == pytest.approx(ratio, rel=1e-9)
    assert ratio > 1.39


def test_unknown_knobs_are_ranged_and_reported():
    cases = {c.id: c for c in load_cases()}
    c = cases["nara21-gpt-1p7b-a100x32"]
    assert len(c.candidates) > 1 and any("micro_batch unstated" in a for a in c.assumed)
    assert len(cases["mbridge-llama3-70b-h100-fp8"].candidates) == 1
    # SimuMax's launcher leaves VP and recomputation to Megatron-LM's defaults (off)
    simumax = cases["simumax-llama3-70b-l12-b200x8"]
    assert len(simumax.candidates) == 1 and simumax.candidates[0].recompute == "none"
    assert "recompute=none (megatron-core-nooverlap default)" in simumax.assumed


def _row(rid: str, **changes: str) -> dict[str, str]:
    with open(default_runs_path(), newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["id"] == rid)
    return {**row, **changes}


def _as_json(r):
    return build_report([r], [], set()).to_dict()["rows"][0]


ROW = "kort22-22b-selective-a100x8"  # Korthikanti 2022 Table 3: micro-batch 4 stated, megatron-2021 stack


def test_unstated_micro_batch_without_a_stack_default_gives_a_range_scored_at_its_midpoint():
    cal = load_calibration()
    case = case_from_row(_row(ROW, micro_batch=""))
    assert not case.reason and case.software.default_micro_batch is None
    r = predict_case(case, cal)
    assert r.predicted_range is not None
    lo, hi = r.predicted_range
    assert lo < hi
    assert r.predicted == pytest.approx((lo + hi) / 2)
    assert r.error == pytest.approx(r.predicted / r.measured - 1)
    # the range spans the micro-batches that fit: each stated one predicts inside it
    stated = [predict_case(case_from_row(_row(ROW, micro_batch=str(b))), cal).predicted for b in (1, 2, 4, 8)]
    fitting = [p for p in stated if lo - 1e-9 <= p <= hi + 1e-9]
    assert min(fitting) == pytest.approx(lo) and max(fitting) == pytest.approx(hi)
    assert r.layout in {lay.describe() for lay in case.candidates}
    assert any("micro_batch unstated" in a for a in r.assumed)
    assert _as_json(r)["predicted_range"] == [lo, hi]


def test_unstated_micro_batch_under_a_stack_default_uses_it():
    cal = load_calibration()
    case = case_from_row(_row(ROW, micro_batch="", software="megatron-core"))
    assert case.software.default_micro_batch == 1
    r = predict_case(case, cal)
    assert r.predicted_range is None and "mb1" in r.layout
    assert "micro_batch=1 (megatron-core default)" in r.assumed
    same = predict_case(case_from_row(_row(ROW, micro_batch="1", software="megatron-core")), cal)
    assert r.predicted == pytest.approx(same.predicted)


def test_unstated_micro_batch_of_a_pipeline_leaves_every_stage_work():
    """Llama 3.1 405B at 128K (arXiv 2407.21783 Table 4): PP16 and 16 sequences per DP rank, so only
    micro-batch 1 gives each of the 16 stages a micro-batch; without pipelining every size stays."""
    meta = case_from_row(_row("llama31-405b-128k-16384gpu"))
    assert {lay.micro_batch for lay in meta.candidates} == {1}
    flat = case_from_row(_row("llama31-405b-128k-16384gpu", pp="1", dp="128", global_batch_seqs="1024"))
    assert {lay.micro_batch for lay in flat.candidates} == {1, 2, 4, 8}
    # when no size fills the pipeline, all sizes stay (the rule never empties the range)
    starved = case_from_row(_row("llama31-405b-128k-16384gpu", global_batch_seqs="64"))
    assert {lay.micro_batch for lay in starved.candidates} == {1, 2, 4, 8}


def test_llama3_rows_run_the_interleaving_the_paper_implies(report):
    """arXiv 2407.21783 §3.3.2: the first and last stages hold one layer fewer, their first and last chunks
    only the embedding and the output, so 126 layers + 2 fill PP16 x 8 chunks of one layer; the rows read
    VP8 from their assumptions column, and their layouts fit in 80 GB (at 8K without recomputation, as the
    paper says they ran)."""
    rows = {x.id: x for x in report.rows}
    for rid in ("llama31-405b-8k-8192gpu", "llama31-405b-8k-16384gpu", "llama31-405b-128k-16384gpu"):
        case = case_from_row(_row(rid))
        assert {lay.vp for lay in case.candidates} == {8}
        assert any(a.startswith("vp=8 ") for a in case.assumed)
        assert rows[rid].fits_memory, rows[rid].memory_GiB


def test_stated_knobs_give_no_range(report):
    r = predict_case(case_from_row(_row(ROW)), load_calibration())
    assert r.predicted_range is None and not any("range over" in a for a in r.assumed)
    assert _as_json(r)["predicted_range"] is None
    rows = {x.id: x for x in report.rows}
    assert rows["mbridge-llama3-70b-h100-fp8"].predicted_range is None
    assert rows["nara21-gpt-1p7b-a100x32"].predicted_range is not None


def test_row_architecture_matches_published_params():
    for c in load_cases():
        if c.reason or c.model is None or not c.model.published_params:
            continue
        # 3 %: Narayanan Table 1 prints 1.7B for a 1.65B model
        assert c.model.total_params() == pytest.approx(c.model.published_params, rel=0.03), c.id


def test_torchtitan_rows_use_their_preset_and_async_tp_matters():
    """torchtitan rows resolve to the torchtitan stack (FSDP2 = ZeRO-3); turning its async TP off slows a
    TP8 row, turning it off on a TP1 row changes nothing."""
    cases = {c.id: c for c in load_cases()}
    cal = load_calibration()
    tp8 = cases["tt24-llama31-70b-fsdp32-tp8-asynctp-float8"]
    tp1 = cases["tt24-llama31-8b-fsdp8-float8"]
    for c in (tp8, tp1):
        assert c.software.name == "torchtitan" and all(lay.zero == 3 for lay in c.candidates)
    vanilla = stack("torchtitan", tp_overlap=False)
    fast, slow = (predict_case(replace(tp8, software=s), cal).predicted for s in (tp8.software, vanilla))
    assert slow < fast
    same = predict_case(replace(tp1, software=vanilla), cal).predicted
    assert same == pytest.approx(predict_case(tp1, cal).predicted)


def test_tp_overlap_column_sets_the_stack():
    """`tp_overlap` = 0 (a recipe that switches TE's TP overlap off) exposes the TP collectives of a TP2
    row; 1 and an empty cell keep the preset's overlap."""
    row = next(r for r in _csv_rows() if r["id"] == "mbridge-qwen3-235b-h100-fp8")
    assert int(row["tp"]) == 2 and not row.get("tp_overlap")
    cal = load_calibration()
    off, on, unset = (case_from_row({**row, "tp_overlap": v}) for v in ("0", "1", ""))
    assert not off.software.tp_overlap and on.software.tp_overlap and unset.software.tp_overlap
    assert predict_case(off, cal).predicted < predict_case(on, cal).predicted
    assert predict_case(unset, cal).predicted == predict_case(on, cal).predicted


def test_stated_memory_savers_let_published_layouts_fit(report):
    """Rows whose sources state what they recompute or offload (and the torchtitan runs, whose FSDP reshards
    after the forward) ran; with those facts their own layouts fit in memory."""
    rows = {r.id: r for r in report.rows}
    for rid in (
        "mbridge-llama3-70b-gb300-fp8",
        "mbridge-dsv3-b200-mxfp8",
        "mb2606-dsv3-b300-mxfp8",
        "zoo-qwen3-235b-h100-bf16-ep32-deepep",
        "zoo-qwen3-235b-h100-bf16-ep8-pp32-a2a",
        "tt24-llama31-8b-fsdp8-compile-bf16",
        "tt24-llama31-8b-fsdp8-float8",
    ):
        assert rows[rid].fits_memory, (rid, rows[rid].memory_GiB)
