"""Hardware catalog: every number sourced, dense figures, units converted once."""

import tomllib
from importlib.resources import files

import pytest

from tenfold.perf import list_hardware, load_hardware
from tenfold.perf.specs.precision import check_supported, get_precision

REQUIRED = ("a100-80gb", "h100-sxm", "h800", "h200", "b200", "b300", "gb200", "gb300")


def _entries(d, path=()):
    for k, v in d.items():
        if isinstance(v, dict) and "value" in v:
            yield (*path, k), v
        elif isinstance(v, dict):
            yield from _entries(v, (*path, k))


def test_required_accelerators_are_catalogued():
    assert set(REQUIRED) <= set(list_hardware())


@pytest.mark.parametrize("name", list_hardware())
def test_every_number_has_a_source_and_confidence(name):
    raw = tomllib.loads((files("tenfold") / "data" / "hardware" / f"{name}.toml").read_text())
    entries = list(_entries(raw))
    assert entries
    for key, e in entries:
        assert e.get("source"), (name, key)
        assert e.get("confidence") in ("high", "medium", "low"), (name, key)
    # every numeric leaf is a sourced table (no bare numbers except the year)
    for section in ("peak_dense_tflops", "memory", "scale_up", "scale_out", "power", "price", "softmax"):
        for key, v in raw.get(section, {}).items():
            assert isinstance(v, dict | str), (name, section, key)


def test_units_are_converted_once_to_si():
    h = load_hardware("h100-sxm")
    assert h.peak("bf16") == pytest.approx(989.4e12)
    assert h.peak("fp8") == pytest.approx(1978.9e12)
    assert h.hbm_Bps == pytest.approx(3.35e12)
    assert h.hbm_GiB == pytest.approx(80.0)
    assert h.scaleup_Bps == pytest.approx(450e9)
    assert h.scaleout_Bps == pytest.approx(50e9)
    assert h.scaleup_domain == 8
    assert h.tdp_W == 700 and h.allin_W == pytest.approx(1730.0)
    assert h.sources["peak_flops.bf16"].source.startswith("https://")


def test_dense_not_sparse_peaks():
    # The datasheets quote 1,979 (H100 BF16) and 4.5 PF (B200 BF16) with 2:4 sparsity: we hold half.
    assert load_hardware("h100-sxm").peak("bf16") < 1000e12
    assert load_hardware("b200").peak("bf16") == pytest.approx(2250e12)
    assert load_hardware("gb300").peak("fp4") == pytest.approx(15000e12)
    # B300's dense FP4 is not half its sparse figure (13.5 vs 18 PF): recorded as dense 13.5
    assert load_hardware("b300").peak("fp4") == pytest.approx(13500e12)


def test_nvl72_domain_and_placement():
    g = load_hardware("gb200")
    assert g.scaleup_domain == 72
    assert g.placement_domain == 64
    assert load_hardware("b200").placement_domain == 8


def test_fields_the_cost_issue_needs():
    for name in ("h100-sxm", "b200", "gb200"):
        h = load_hardware(name)
        assert h.tdp_W and h.allin_W and h.ondemand_usd_h and h.capex_usd and h.tco_usd_h
        assert "capex_usd" in h.sources and h.sources["capex_usd"].confidence == "low"


def test_precision_support():
    assert "no fp4" in check_supported(get_precision("nvfp4"), load_hardware("h100-sxm"))
    assert "block-scaled" in check_supported(get_precision("mxfp8"), load_hardware("h100-sxm"))
    assert check_supported(get_precision("mxfp8"), load_hardware("gb200")) == ""
    assert check_supported(get_precision("nvfp4"), load_hardware("gb300")) == ""
    with pytest.raises(ValueError, match="no fp4"):
        load_hardware("a100-80gb").peak("fp4")
    with pytest.raises(ValueError, match="unknown hardware"):
        load_hardware("h1000")


@pytest.mark.parametrize("name", list_hardware())
def test_hbm_capacity_is_catalogued_in_gib(name):
    raw = tomllib.loads((files("tenfold") / "data" / "hardware" / f"{name}.toml").read_text())
    assert "hbm_GiB" in raw["memory"] and "hbm_GB" not in raw["memory"]
    assert load_hardware(name).hbm_bytes == raw["memory"]["hbm_GiB"]["value"] * 1024**3


@pytest.mark.parametrize(
    ("spelling", "entry"),
    [
        ("h100", "h100-sxm"),
        ("H100", "h100-sxm"),
        ("H100 SXM", "h100-sxm"),
        ("gb200-nvl72", "gb200"),
        ("GB300 NVL72", "gb300"),
        ("a100", "a100-80gb"),
        ("MI300X", "mi300x"),
        ("tpu v5p", "tpu-v5p"),
    ],
)
def test_common_spellings_of_a_gpu_name_find_its_entry(spelling, entry):
    assert load_hardware(spelling).name == load_hardware(entry).name


def test_an_unknown_or_ambiguous_name_is_refused_with_suggestions():
    with pytest.raises(ValueError, match=r"did you mean 'h100-sxm'"):
        load_hardware("h100-sxn")
    with pytest.raises(ValueError, match="unknown hardware entry 'mi3'"):  # mi300x, mi325x, mi355x
        load_hardware("mi3")
    with pytest.raises(ValueError, match="unknown hardware entry 'h10'"):  # not a whole word of a name
        load_hardware("h10")


def test_power_limited_grand_teton_h100_sits_between_nvl_and_sxm():
    # torchtitan's benchmarks: peak "between SXM and NVL"; H100 NVL dense BF16 is 835.5 TFLOP/s
    gt, sxm = load_hardware("grandteton-h100"), load_hardware("h100-sxm")
    assert 835.5e12 < gt.peak("bf16") < sxm.peak("bf16")
    assert 2 * 835.5e12 < gt.peak("fp8") < sxm.peak("fp8")
    assert gt.hbm_Bps < sxm.hbm_Bps and gt.tdp_W < sxm.tdp_W
    assert gt.arch == sxm.arch  # same Hopper calibration
