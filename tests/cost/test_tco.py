"""The owner's and renter's $/GPU-hour: the worked H100 example of docs/cost.md from its inputs, the annuity
against a loan simulated year by year, and the breakdown's bookkeeping."""

import math

import pytest

from tenfold.cost.tco import OwnInputs, annuity_factor, own_cost, own_inputs, rent_prices
from tenfold.perf.specs.hardware import load_hardware

# the worked H100 example of docs/cost.md, each input from a public source (data/cost/defaults.toml):
# $50k over 4 yr at 11 %, 1.3 kW IT, $185/kW-month, PUE 1.3, $0.08/kWh -> ~$16.1k + ~$2.9k + ~$1.2k per year
# ~ $20k/yr ~ $2.3/GPU-hour (and ~$1.8 with a 6-yr life). No operations line in that example.
WORKED = dict(
    capex_usd=50_000.0,
    it_kW=1.3,
    life_years=4.0,
    cost_of_capital=0.11,
    colo_usd_per_kW_month=185.0,
    electricity_usd_per_kWh=0.08,
    pue=1.3,
    ops_share_of_capex=0.0,
    utilisation=1.0,
    idle_fraction=0.3,
)


def test_worked_h100_example_reproduces_the_notes():
    c = own_cost(OwnInputs(**WORKED))
    assert c.capital_usd_per_year == pytest.approx(16.1e3, abs=0.05e3)
    assert c.colo_usd_per_year == pytest.approx(2.9e3, abs=0.05e3)
    assert c.electricity_usd_per_year == pytest.approx(1.2e3, abs=0.05e3)
    assert c.total_usd_per_year == pytest.approx(20e3, rel=0.02)
    assert c.usd_per_gpu_hour == pytest.approx(2.3, abs=0.01)
    six = own_cost(OwnInputs(**(WORKED | {"life_years": 6.0})))
    assert six.usd_per_gpu_hour == pytest.approx(1.8, abs=0.05)


def test_catalog_h100_gets_the_worked_examples_capex_and_it_power():
    x = own_inputs(load_hardware("h100-sxm"), pue=1.3, ops_share_of_capex=0.0)
    assert x.capex_usd == 50_000.0 and x.it_kW == pytest.approx(1.3, abs=1e-3)
    assert own_cost(x).usd_per_gpu_hour == pytest.approx(2.3, abs=0.01)


def _simulated_payment(rate: float, years: int) -> float:
    """Bisection on the yearly payment that leaves a $1 loan at zero after `years` (independent of the
    closed form)."""
    lo, hi = 0.0, 2.0
    for _ in range(200):
        pay = (lo + hi) / 2
        balance = 1.0
        for _ in range(years):
            balance = balance * (1 + rate) - pay
        lo, hi = (pay, hi) if balance > 0 else (lo, pay)
    return (lo + hi) / 2


@pytest.mark.parametrize(("rate", "years"), [(0.11, 4), (0.06, 6), (0.15, 3), (0.0, 5)])
def test_annuity_matches_a_simulated_loan(rate, years):
    assert annuity_factor(rate, years) == pytest.approx(_simulated_payment(rate, years), rel=1e-9)


def test_breakdown_sums_and_utilisation_spreads_fixed_costs():
    full = own_cost(OwnInputs(**WORKED | {"ops_share_of_capex": 0.04}))
    assert sum(full.breakdown_per_busy_hour().values()) == pytest.approx(full.usd_per_busy_gpu_hour)
    half = own_cost(OwnInputs(**WORKED | {"ops_share_of_capex": 0.04, "utilisation": 0.5}))
    # idle hours still pay capital, ops and colocation; electricity falls to idle power
    assert half.capital_usd_per_year == full.capital_usd_per_year
    assert half.avg_it_kW == pytest.approx(1.3 * (0.3 + 0.5 * 0.7))
    assert half.usd_per_busy_gpu_hour > 1.8 * full.usd_per_busy_gpu_hour
    assert half.usd_per_gpu_hour < full.usd_per_gpu_hour


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("pue", 0.9),
        ("utilisation", 0.0),
        ("utilisation", 1.2),
        ("life_years", 0),
        ("capex_usd", -1.0),
        ("cost_of_capital", 11.0),
        ("it_kW", math.nan),
    ],
)
def test_own_inputs_reject_bad_values(key, value):
    with pytest.raises(ValueError, match=key):
        OwnInputs(**WORKED | {key: value})


def test_unknown_override_and_missing_capex():
    with pytest.raises(ValueError, match="unknown cost input"):
        own_inputs(load_hardware("h100-sxm"), pue_typo=1.2)
    with pytest.raises(ValueError, match="capex_usd"):
        own_inputs(load_hardware("mi355x"))  # the catalog has no capex for it


def test_rent_prices_from_catalog_and_overrides():
    h = load_hardware("h100-sxm")
    r = rent_prices(h)
    assert (r.reserved_usd_h, r.ondemand_usd_h, r.usd_h) == (2.72, 6.88, 2.72)
    assert rent_prices(h, basis="ondemand").usd_h == 6.88
    assert rent_prices(h, reserved_usd_h=2.0).usd_h == 2.0
    with pytest.raises(ValueError, match="basis"):
        rent_prices(h, basis="spot")
