"""Leave-one-source-out cross-validation: each row is predicted by a fit that never saw its source, the
stored results belong to the committed calibration, and their intervals are honest."""

import math

import pytest

from tenfold.perf.calibration import load_calibration
from tenfold.perf.validation import crossval
from tenfold.perf.validation.cvresults import read_cv, summary
from tenfold.perf.validation.training import load_cases, validate_training


def test_each_row_is_predicted_without_any_row_of_its_source(monkeypatch):
    cases = [c for c in load_cases() if not c.reason]
    seen = []

    def fake_fit(all_cases, *, exclude, **kw):
        seen.append(exclude)
        return load_calibration()

    monkeypatch.setattr(crossval, "fit_calibration", fake_fit)
    predicted = crossval.cross_validate(cases, prior=load_calibration(), iters=1, restarts=1)
    by_id = {c.id: c for c in cases}
    assert set(predicted) == {c.id for c in cases if c.split == "fit"}
    for excluded in seen:
        sources = {by_id[i].source for i in excluded}
        assert len(sources) == 1, "a fold holds out exactly one source"
        (source,) = sources
        assert excluded == {c.id for c in cases if c.source == source and c.split == "fit"}
    assert len(seen) == len({c.source for c in cases if c.split == "fit"})


def test_interval_of_a_row_uses_only_other_sources_errors():
    cases = [c for c in load_cases() if not c.reason and c.split == "fit"]
    predicted = {c.id: c.measured * 1.1 for c in cases}
    # one source is wildly off: its own rows' intervals must not widen to cover it
    odd = cases[0].source
    predicted |= {c.id: c.measured * 3.0 for c in cases if c.source == odd}
    rows = {r.id: r for r in crossval.cv_rows(cases, predicted)}
    assert not any(rows[c.id].covered for c in cases if c.source == odd)


def test_stored_cross_validation_belongs_to_the_committed_calibration():
    cal = load_calibration()
    stored = read_cv()
    fitted = {c.id for c in load_cases() if not c.reason and c.split == "fit"}
    assert set(stored) == fitted, "rerun python -m tenfold.perf.validation.crossval --write"
    s = summary(list(stored.values()))
    assert s["mape"] == pytest.approx(cal.fit["cv_mape"], abs=1e-4)
    assert s["coverage"] == pytest.approx(cal.fit["cv_coverage"], abs=1e-3)


def test_cross_validated_accuracy_and_interval_coverage():
    """80 % intervals cover 75-85 % of the cross-validated rows (issue 15). Leave-one-source-out MAPE:
    achieved 8.9 % overall and 8.5 % on high-reliability rows (2026-12-06, 78 fit rows; the issue asks for
    10 %). Refits of nearly the same model have moved it by one to two points (the optimizer's spread,
    docs/perf.md), so the bounds sit that far above; they guard against getting worse, not against the
    noise."""
    rows = read_cv()
    s = summary(list(rows.values()))
    assert 0.75 <= s["coverage"] <= 0.85
    assert s["mape"] <= 0.12
    high = {c.id for c in load_cases() if c.reliability == "high"}
    assert summary([r for i, r in rows.items() if i in high])["mape"] <= 0.11


def test_the_prior_owes_nothing_to_an_earlier_fit():
    """Folds start from physical defaults: no fitted value or fit record of the committed file leaks in."""
    cal = load_calibration()
    prior = crossval.physical_prior(cal)
    assert set(prior.gemm_efficiency.values()) == {cal.fallback_gemm_efficiency}
    assert prior.uncertainty is None and "objective_value" not in prior.fit
    assert prior.attention_efficiency == crossval.PHYSICAL_DEFAULTS["attention_efficiency"]


def test_validate_reports_intervals_coverage_and_cv():
    report = validate_training()
    d = report.to_dict()
    row = d["rows"][0]
    lo, hi = row["interval"]
    assert lo < row["predicted"] < hi
    assert 0.0 <= d["coverage"] <= 1.0
    cv = d["cross_validation"]
    assert cv["rows"] == sum(r.cv_error is not None for r in report.rows) > 0
    assert math.isfinite(cv["mape"]) and "leave-one-source-out" in cv["method"]
    # with a user's calibration the stored CV (of the committed fit) is not attached
    assert validate_training(calibration=load_calibration()).cross_validation == {}
