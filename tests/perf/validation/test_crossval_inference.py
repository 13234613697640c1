"""The serving model's leave-one-source-out cross-validation and 80 % intervals (issue 16): the same
procedure as training's, grouped by engine family and dense/MoE; the stored results belong to the committed
inference calibration and their coverage is measured honestly."""

import math
from dataclasses import replace

import pytest

from tenfold.perf.calibration import load_calibration
from tenfold.perf.serving.estimate import estimate_inference
from tenfold.perf.uncertainty import Z80, engine_family, serving_group_key
from tenfold.perf.validation import crossval
from tenfold.perf.validation.cvresults import read_cv, summary
from tenfold.perf.validation.serving import case_group, load_cases, validate_inference


def fitted_cases():
    return [c for c in load_cases() if not c.reason and c.split == "fit"]


def test_engine_presets_group_by_family():
    assert engine_family("trtllm-bench") == engine_family("trtllm") == "trtllm"
    assert serving_group_key("vllm", True) == "vllm/moe"
    assert serving_group_key("sglang", False) == "sglang/dense"
    groups = {case_group(c) for c in fitted_cases()}
    assert "trtllm/dense" in groups and "trtllm/moe" in groups


def test_each_serving_row_is_predicted_without_any_row_of_its_source(monkeypatch):
    cases = [c for c in load_cases() if not c.reason]
    seen = []

    def fake_fit(all_cases, *, exclude, kind, **kw):
        assert kind == "inference"
        seen.append(exclude)
        return load_calibration(kind="inference")

    monkeypatch.setattr(crossval, "fit_calibration", fake_fit)
    prior = load_calibration(kind="inference")
    predicted = crossval.cross_validate(cases, prior=prior, iters=1, restarts=1, kind="inference")
    by_id = {c.id: c for c in cases}
    assert set(predicted) == {c.id for c in cases if c.split == "fit"}
    for excluded in seen:
        (source,) = {by_id[i].source for i in excluded}
        assert excluded == {c.id for c in cases if c.source == source and c.split == "fit"}


def test_a_serving_rows_interval_uses_only_other_sources_errors():
    cases = fitted_cases()
    predicted = {c.id: c.measured * 1.05 for c in cases}
    odd = cases[0].source  # one source wildly off: its rows' intervals must not widen to cover it
    predicted |= {c.id: c.measured * 3.0 for c in cases if c.source == odd}
    rows = {r.id: r for r in crossval.cv_rows(cases, predicted, kind="inference")}
    assert not any(rows[c.id].covered for c in cases if c.source == odd)
    assert all(rows[c.id].covered for c in cases if c.source != odd)


def test_the_prior_keeps_held_parameters_and_owes_nothing_else_to_the_fit():
    cal = load_calibration(kind="inference")
    prior = crossval.physical_prior(cal)
    held = set(cal.fit["fixed_parameters"])
    for name in cal.free_names():  # every fitted value starts from a physical default
        if name.startswith("gemm:"):
            assert prior.gemm_efficiency[name[5:]] == cal.fallback_gemm_efficiency
        else:
            assert getattr(prior, name) == crossval.PHYSICAL_DEFAULTS[name]
    for name in held:  # parameters the fit never moves keep their committed value
        key = name[5:] if name.startswith("gemm:") else None
        value = prior.gemm_efficiency[key] if key else getattr(prior, name)
        assert value == (cal.gemm_efficiency[key] if key else getattr(cal, name))
    assert prior.uncertainty is None


def test_stored_inference_cv_belongs_to_the_committed_calibration():
    cal = load_calibration(kind="inference")
    stored = read_cv(kind="inference")
    assert set(stored) == {c.id for c in fitted_cases()}, (
        "rerun python -m tenfold.perf.validation.crossval --kind inference --write"
    )
    s = summary(list(stored.values()))
    assert s["mape"] == pytest.approx(cal.fit["cv_mape"], abs=1e-4)
    assert s["coverage"] == pytest.approx(cal.fit["cv_coverage"], abs=1e-3)
    assert cal.uncertainty is not None
    assert sum(cal.uncertainty.rows.values()) == len(stored)
    # coverage counted from the stored bounds, not trusted from the file
    inside = sum(r.low <= r.measured <= r.high for r in stored.values())
    assert s["coverage"] == inside / len(stored)


def test_cross_validated_interval_coverage_is_on_target():
    """Issue 16: 80 % intervals cover 75-85 % of the cross-validated serving rows."""
    s = summary(list(read_cv(kind="inference").values()))
    assert 0.75 <= s["coverage"] <= 0.85


def test_validate_inference_rows_carry_intervals_and_cv():
    report = validate_inference()
    d = report.to_dict()
    for row in d["rows"]:
        lo, hi = row["interval"]
        assert lo < row["predicted"] < hi
        if row["split"] == "fit":  # holdout rows are never fitted, so their plain error is out of sample
            assert row["cv_error"] is not None and len(row["cv_interval"]) == 2
    assert 0.0 <= d["coverage"] <= 1.0
    cv = d["cross_validation"]
    fit_rows = [r for r in d["rows"] if r["split"] == "fit"]
    assert cv["rows"] == len(fit_rows) and math.isfinite(cv["coverage"])
    # with a user's calibration the stored CV (of the committed fit) is not attached
    assert validate_inference(calibration=load_calibration(kind="inference")).cross_validation == {}


def test_estimate_interval_follows_the_calibrations_uncertainty():
    kw = dict(input_len=1024, output_len=1024, concurrency=32, precision="fp8", kv_precision="fp8")
    est = estimate_inference("llama3-70b", "h200", **kw)
    cal = load_calibration(kind="inference")
    f = cal.uncertainty.factor("trtllm/dense")
    assert est.uncertainty_group == "trtllm/dense"
    assert est.interval == pytest.approx(
        (est.output_tokens_per_s_per_gpu / f, est.output_tokens_per_s_per_gpu * f)
    )
    d = est.to_dict()
    lo, hi = d["tpot_ms_interval"]
    assert lo < d["tpot_ms"] < hi and d["interval_level"] == 0.8
    # an engine family nobody measured gets the widest spread
    other = estimate_inference("llama3-70b", "h200", engine="sglang", **kw)
    u = cal.uncertainty
    assert other.interval_factor == pytest.approx(math.exp(Z80 * max([u.pooled, *u.log_sigma.values()])))
    assert other.interval_factor > est.interval_factor
    # without a measured uncertainty there is no range
    bare = estimate_inference("llama3-70b", "h200", calibration=replace(cal, uncertainty=None), **kw)
    assert bare.to_dict()["tpot_ms_interval"] is None and bare.to_dict()["interval"] is None
