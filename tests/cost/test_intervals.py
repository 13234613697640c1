"""80 % ranges on comparison rows: present with a measured uncertainty, absent without, around the value,
ratios narrower than independent errors when the two GPUs' errors correlate; the tornado follows them."""

import dataclasses
import json
import math

import pytest

from tenfold.cost.compare import compare_training
from tenfold.cost.intervals import INTERVAL_KEYS
from tenfold.cost.tco import own_inputs, rent_prices
from tenfold.cost.tornado import own_tornado, rent_tornado
from tenfold.cost.workloads import TrainingWorkload
from tenfold.perf.calibration import load_calibration
from tenfold.perf.specs.hardware import load_hardware
from tenfold.perf.uncertainty import Uncertainty
from tenfold.report.format import json_clean

SIGMA = {"hopper/dense": 0.12, "blackwell/dense": 0.20}
W = TrainingWorkload(model="llama3-8b", tokens=1e12, seq_len=8192, global_batch=256)


def calibration(rho: float = 0.3, sigma: dict | None = None):
    u = Uncertainty(log_sigma=sigma or SIGMA, pooled=0.15, ratio_correlation=rho)
    return dataclasses.replace(load_calibration(), uncertainty=u)


def run(cal):
    return compare_training(W, ["h100-sxm", "b200"], num_gpus=64, calibration=cal)


@pytest.fixture(scope="module")
def comp():
    return run(calibration())


def test_every_range_contains_its_value(comp):
    for r in comp.rows:
        assert r.feasible, r.reason
        keys = set(INTERVAL_KEYS) - (
            set() if r.hardware != "h100-sxm" else {"speedup", "rent_cost_ratio", "own_cost_ratio"}
        )
        assert set(r.intervals) == keys
        for k in keys:
            lo, hi = r.interval(k)
            v = (
                r.gpu_hours
                if k == "gpu_hours"
                else getattr(r.money, k, None)
                if k.endswith("_usd")
                else getattr(r, k)
            )
            assert lo < v < hi, (r.hardware, k, lo, v, hi)


def test_time_and_money_move_with_the_estimates_factor(comp):
    for r in comp.rows:
        f = r.estimate.interval_factor
        lo, hi = r.interval("days")
        assert lo == pytest.approx(r.days / f) and hi == pytest.approx(r.days * f)
        # a slower run (low throughput) is the long end of the time range
        t_lo, _ = r.interval("tokens_per_s_per_gpu")
        assert r.days * r.tokens_per_s_per_gpu / t_lo == pytest.approx(hi)


def test_ratio_range_narrower_than_independent_errors_when_correlated(comp):
    b200 = comp.row("b200")
    lo, hi = b200.interval("speedup")
    indep = run(calibration(rho=0.0)).row("b200")
    i_lo, i_hi = indep.interval("speedup")
    assert i_lo < lo < b200.speedup < hi < i_hi
    # the ratio's log width is sqrt(sa^2 + sb^2 - 2 rho sa sb), below the two widths added
    sa, sb = SIGMA["blackwell/dense"], SIGMA["hopper/dense"]
    assert math.log(hi / lo) < math.log(b200.estimate.interval_factor**2) + 2 * 1.2816 * sb
    assert math.log(hi / lo) == pytest.approx(
        2 * 1.2816 * math.sqrt(sa**2 + sb**2 - 2 * 0.3 * sa * sb), rel=1e-3
    )
    # cost ratios carry the same relative range as the speedup (prices are exact)
    c_lo, c_hi = b200.interval("own_cost_ratio")
    assert c_hi / c_lo == pytest.approx(hi / lo)


def test_json_fields_present_and_null_without_uncertainty(comp):
    d = json.loads(json.dumps(json_clean(comp.to_dict())))
    for row in (d["rows"][1], d["summary"][1]):
        for k in INTERVAL_KEYS:
            lo, hi = row[f"{k}_interval"]
            assert lo < hi
    assert d["rows"][0]["speedup_interval"] is None  # the baseline's ratios are 1 by definition
    bare = run(dataclasses.replace(load_calibration(), uncertainty=None))
    d = json.loads(json.dumps(json_clean(bare.to_dict())))
    assert all(d["rows"][1][f"{k}_interval"] is None for k in INTERVAL_KEYS)


def test_tornado_mfu_bar_follows_the_measured_uncertainty():
    hw = load_hardware("h100-sxm")
    narrow = own_tornado(1e6, own_inputs(hw), mfu_halfwidth=0.05)
    wide = own_tornado(1e6, own_inputs(hw), mfu_halfwidth=0.30)
    bar = lambda t: next(b for b in t.bars if b.name == "mfu")  # noqa: E731
    assert bar(wide).swing_usd > bar(narrow).swing_usd
    assert (bar(wide).low_value, bar(wide).high_value) == pytest.approx((0.70, 1.30))
    assert "measured" in bar(wide).label
    old = rent_tornado(1e6, rent_prices(hw))
    assert "assumed" in bar(old).label and (bar(old).low_value, bar(old).high_value) == (0.87, 1.13)


def test_comparison_tornado_uses_the_rows_group():
    comp = run(calibration(sigma={"hopper/dense": 0.05, "blackwell/dense": 0.30}))
    h, b = (
        next(x for x in comp.row(g).money.tornado_own.bars if x.name == "mfu") for g in ("h100-sxm", "b200")
    )
    u = calibration().uncertainty
    assert h.high_value - 1 < b.high_value - 1
    assert b.high_value - 1 == pytest.approx(
        dataclasses.replace(u, log_sigma={"blackwell/dense": 0.30}).relative_halfwidth("blackwell/dense")
    )
