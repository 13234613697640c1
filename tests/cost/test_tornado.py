"""The cost tornado: bars, directions and order."""

import pytest

from tenfold.cost.tco import own_cost, own_inputs, rent_prices
from tenfold.cost.tornado import own_tornado, owned_job_cost, rent_tornado
from tenfold.perf.specs.hardware import load_hardware

H100 = load_hardware("h100-sxm")
HOURS = 1e6


def test_own_tornado_covers_the_inputs_that_matter_and_points_the_right_way():
    x = own_inputs(H100)
    t = own_tornado(HOURS, x)
    assert t.base_cost_usd == pytest.approx(HOURS * own_cost(x).usd_per_busy_gpu_hour)
    bars = {b.name: b for b in t.bars}
    assert {"capex", "utilisation", "life_years", "pue", "electricity_usd_per_kWh", "mfu"} <= set(bars)
    up = lambda b: b.cost_at_high_usd > b.cost_at_low_usd  # noqa: E731
    assert up(bars["capex"]) and up(bars["pue"]) and up(bars["electricity_usd_per_kWh"])
    assert up(bars["cost_of_capital"]) and up(bars["colo_usd_per_kW_month"])
    assert not up(bars["life_years"]) and not up(bars["utilisation"]) and not up(bars["mfu"])
    swings = [b.swing_usd for b in t.bars]
    assert swings == sorted(swings, reverse=True)
    # capex, utilisation and life dominate; energy is a small share of owner TCO (2-6 % of amortised cost in
    # Epoch AI's Cottier et al., arXiv 2405.21015)
    assert bars["capex"].swing_usd > 3 * bars["electricity_usd_per_kWh"].swing_usd
    assert bars["pue"].cost_at_high_usd == pytest.approx(
        owned_job_cost(
            HOURS,
            x.__class__(
                **{**{f: getattr(x, f) for f in x.__dataclass_fields__}, "pue": bars["pue"].high_value}
            ),
        )
    )


def test_rent_tornado_spans_reserved_to_ondemand():
    t = rent_tornado(HOURS, rent_prices(H100))
    price = next(b for b in t.bars if b.name == "price")
    assert (price.low_value, price.high_value) == (2.72, 6.88)
    assert price.cost_at_high_usd == pytest.approx(HOURS * 6.88)
    assert t.to_dict()["bars"][0]["swing_usd"] == max(b.swing_usd for b in t.bars)
