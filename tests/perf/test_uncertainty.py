"""Intervals from cross-validated error: the arithmetic, the pooling, and the stored results."""

import math

import pytest

from tenfold.perf.calibration import calibration_from_dict, calibration_to_toml, load_calibration
from tenfold.perf.specs.catalog import read_toml
from tenfold.perf.uncertainty import (
    Z80,
    Uncertainty,
    group_key,
    pooled_spreads,
    spread,
    uncertainty_from_dict,
)


def test_interval_is_symmetric_in_log_space_and_covers_80_percent_of_a_lognormal():
    u = Uncertainty(log_sigma={"hopper/dense": 0.1}, pooled=0.1)
    lo, hi = u.interval(100.0, "hopper/dense")
    assert lo * hi == pytest.approx(100.0**2)
    assert math.log(hi / 100.0) == pytest.approx(Z80 * 0.1)
    # z is the 90th percentile of the standard normal
    assert 0.5 * (1 + math.erf(Z80 / math.sqrt(2))) == pytest.approx(0.9, abs=1e-9)


def test_unvalidated_hardware_gets_the_widest_spread():
    u = Uncertainty(log_sigma={"hopper/dense": 0.05, "blackwell/moe": 0.2}, pooled=0.1)
    assert u.sigma(group_key("cdna3", False)) == 0.2
    assert group_key("blackwell-ultra", True) == "blackwell/moe"


def test_ratio_interval_narrows_with_correlated_errors():
    g = "hopper/dense", "blackwell/dense"
    ind = Uncertainty(log_sigma=dict.fromkeys(g, 0.1), pooled=0.1, ratio_correlation=0.0)
    cor = Uncertainty(log_sigma=dict.fromkeys(g, 0.1), pooled=0.1, ratio_correlation=0.6)
    w_ind = math.log(ind.ratio_interval(3.0, *g)[1] / 3.0)
    w_cor = math.log(cor.ratio_interval(3.0, *g)[1] / 3.0)
    assert w_ind == pytest.approx(Z80 * 0.1 * math.sqrt(2))
    assert w_cor == pytest.approx(Z80 * 0.1 * math.sqrt(2 - 1.2))


def test_partial_pooling_pulls_small_groups_toward_the_pooled_spread():
    errors = {"a": [0.01, -0.01], "b": [0.05, -0.1, 0.3, -0.4, 0.35, -0.3, 0.45, 0.2]}
    sig, pooled = pooled_spreads(errors)
    assert spread(errors["a"]) < sig["a"] < pooled < sig["b"] < spread(errors["b"])
    # the spread is the 80th percentile of |r| over z: 80 % of normal errors fall inside +-z sigma
    assert spread([0.1 * i for i in range(11)]) == pytest.approx(0.8 / Z80)


def test_bad_uncertainty_values_are_refused():
    with pytest.raises(ValueError, match="log_sigma"):
        Uncertainty(log_sigma={"x": -0.1}, pooled=0.1)
    with pytest.raises(ValueError, match="ratio_correlation"):
        Uncertainty(log_sigma={}, pooled=0.1, ratio_correlation=1.5)


def test_calibration_file_round_trips_its_uncertainty(tmp_path):
    cal = load_calibration()
    assert cal.uncertainty is not None, "the committed calibration carries its measured uncertainty"
    path = tmp_path / "cal.toml"
    path.write_text(calibration_to_toml(cal))
    back = calibration_from_dict(read_toml(path))
    assert dict(back.uncertainty.log_sigma) == pytest.approx(dict(cal.uncertainty.log_sigma), abs=1e-4)
    assert back.uncertainty.ratio_correlation == pytest.approx(cal.uncertainty.ratio_correlation, abs=1e-3)
    assert uncertainty_from_dict({"pooled": 0.1}).log_sigma == {}
