"""The cost defaults file: every derived fill-in recomputed from the hardware catalog, grid presets."""

import math

import pytest

from tenfold.cost.defaults import gpu_facts, grid_intensity, load_cost_defaults
from tenfold.perf.specs.hardware import load_hardware

D = load_cost_defaults()


def test_derived_fill_ins_follow_from_the_catalog():
    h100, h200, b200, gb200 = (load_hardware(n) for n in ("h100-sxm", "h200", "b200", "gb200"))
    gb300 = load_hardware("gb300")
    ratios = [h.reserved_usd_h / h.ondemand_usd_h for h in (h100, h200, b200)]
    assert D.rules["reserved_ratio"].value == pytest.approx(sum(ratios) / 3, abs=1e-4)
    r = D.rules["reserved_ratio"].value
    assert D.fill["gb200"]["reserved_usd_per_gpu_hour"].value == pytest.approx(
        gb200.ondemand_usd_h * r, abs=0.01
    )
    tco = gb300.tco_usd_h / gb200.tco_usd_h
    assert D.fill["gb300"]["ondemand_usd_per_gpu_hour"].value == pytest.approx(
        gb200.ondemand_usd_h * tco, abs=0.01
    )
    assert D.fill["gb300"]["capex_usd_per_gpu"].value == pytest.approx(gb200.capex_usd * tco, abs=1.0)
    assert D.fill["gb300"]["allin_kW"].value == pytest.approx(gb200.allin_W / 1e3 * gb300.tdp_W / gb200.tdp_W)
    assert D.fill["h200"]["allin_kW"].value == pytest.approx(h100.allin_W / 1e3)
    assert D.fill["h200"]["capex_usd_per_gpu"].value == h100.capex_usd + h200.gpu_price_usd - 27_500.0
    # allin_overhead maps H100's provisioned 1.73 kW to the worked example's 1.3 kW of IT power
    assert h100.allin_W / 1e3 / D.own["allin_overhead"].value == pytest.approx(1.3, abs=1e-3)


def test_catalog_wins_over_fill_ins_and_sources_are_named():
    f = gpu_facts(load_hardware("b200"), D)
    assert f.reserved_usd_h == 5.1 and f.sources["reserved_usd_h"].startswith("catalog")
    g = gpu_facts(load_hardware("gb300"), D)
    assert g.capex_usd == D.fill["gb300"]["capex_usd_per_gpu"].value and "derived" in g.sources["capex_usd"]
    m = gpu_facts(load_hardware("mi355x"), D)
    assert m.capex_usd is None and "none" in m.sources["capex_usd"]


def test_every_swept_default_has_a_range_around_its_value_and_a_source():
    for key, d in D.own.items():
        assert d.source, key
        if not math.isnan(d.low):
            assert d.low <= d.value <= d.high, key


def test_grid_presets_and_numbers():
    assert grid_intensity("us") == 367.0 and grid_intensity("World") == 436.0
    assert grid_intensity("france") < grid_intensity("germany") < grid_intensity("india")
    assert grid_intensity("250") == 250.0 and grid_intensity(0) == 0.0
    for bad in ("mars", -1.0, math.inf):
        with pytest.raises(ValueError, match="grid"):
            grid_intensity(bad)
