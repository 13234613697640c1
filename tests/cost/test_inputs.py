"""Input checks of the cost library (issue 14): counts, owner inputs, per-GPU prices."""

import math

import pytest

from tenfold.cost.tco import OWN_RANGES, check_own_input
from tenfold.cost.workloads import CostSettings, format_count, parse_count


@pytest.mark.parametrize("text", ["15,6T", "1,2,3", "12,34", ",100"])
def test_commas_only_as_groups_of_three(text):
    with pytest.raises(ValueError, match="not a count"):
        parse_count(text)


def test_grouped_counts_and_suffixes():
    assert parse_count("15,600,000,000,000") == 15.6e12
    assert parse_count("1,000T") == 1e15
    assert parse_count("15k") == 15e3


@pytest.mark.parametrize("x", [15e3, 2.5e6, 300e9, 15.6e12, 950.0])
def test_format_count_round_trips(x):
    text = format_count(x)
    assert "e" not in text
    assert parse_count(text) == pytest.approx(x)


@pytest.mark.parametrize(
    ("key", "value"), [("pue", -1.0), ("life_years", 0.0), ("utilisation", 5.0), ("pue", math.nan)]
)
def test_cost_settings_reject_out_of_range_own_inputs(key, value):
    lo, hi, _ = OWN_RANGES[key]
    with pytest.raises(ValueError, match=key):
        CostSettings(own={key: value})
    check_own_input(key, hi if math.isfinite(hi) else lo + 1.0)  # an allowed value passes


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf])
def test_cost_settings_reject_bad_prices(value):
    with pytest.raises(ValueError, match="reserved_usd_h"):
        CostSettings(per_gpu={"b200": {"reserved_usd_h": value}})


def test_price_for_a_gpu_not_compared():
    s = CostSettings(per_gpu={"b300": {"reserved_usd_h": 5.0}})
    with pytest.raises(ValueError, match="b300"):
        s.check_gpus(["h100-sxm", "b200"])
    s.check_gpus(["b300"])
