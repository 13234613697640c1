"""Facility energy and carbon of a job."""

import pytest

from tenfold.cost.energy import footprint


def test_footprint_arithmetic():
    f = footprint(gpu_hours=1e6, it_kW=1.3, pue=1.2, grid_g_per_kWh=367.0)
    assert f.it_MWh == pytest.approx(1300.0)  # 1e6 h x 1.3 kW = 1.3e6 kWh
    assert f.facility_MWh == pytest.approx(1560.0)
    assert f.co2_t == pytest.approx(1560.0 * 1e3 * 367.0 / 1e6)  # kWh x g/kWh -> t
    assert footprint(gpu_hours=1e6, it_kW=1.3, pue=1.2, grid_g_per_kWh=56.0).co2_t < f.co2_t / 6


def test_keynote_energy_ratio_reads_as_power_times_time():
    # GTC 2024 keynote (as reported by The Verge, Mar 2024): 8,000 Hopper at 15 MW vs 2,000 Blackwell at
    # 4 MW for 90 days = 3.75x
    hopper = footprint(gpu_hours=8000 * 90 * 24, it_kW=15e3 / 8000, pue=1.0, grid_g_per_kWh=0.0)
    blackwell = footprint(gpu_hours=2000 * 90 * 24, it_kW=4e3 / 2000, pue=1.0, grid_g_per_kWh=0.0)
    assert hopper.facility_MWh == pytest.approx(32_400.0)
    assert hopper.facility_MWh / blackwell.facility_MWh == pytest.approx(3.75)


@pytest.mark.parametrize(("key", "value"), [("gpu_hours", -1.0), ("it_kW", float("nan")), ("pue", 0.8)])
def test_bad_inputs(key, value):
    args = dict(gpu_hours=1.0, it_kW=1.0, pue=1.2, grid_g_per_kWh=367.0) | {key: value}
    with pytest.raises(ValueError, match=key):
        footprint(**args)
