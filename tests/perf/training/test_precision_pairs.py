"""MXFP8 and per-tensor FP8 share the calibration's "8" efficiency, so what separates them is held to
NVIDIA's published same-layout pairs: the model's MXFP8 / FP8 ratio must match each within 2 %."""

from dataclasses import replace

import pytest

from tenfold.perf.calibration import load_calibration
from tenfold.perf.specs.precision import get_precision
from tenfold.perf.validation.training import load_cases, predict_case

# row id (its FP8-CS run) -> the MXFP8 tok/s/GPU of the same table row ("FP8-CS (FP8-MX)"),
# Megatron-Bridge docs/performance-summary-archive.md, "25.11 NeMo Container"
MXFP8_PAIRS = {
    "mbridge-llama3-8b-b200-fp8": 29521.0,
    "mbridge-llama3-8b-gb200-fp8": 29789.0,
    "mb2511-llama3-8b-gb300-fp8": 36108.0,
}


@pytest.fixture(scope="module")
def cases() -> dict:
    """The pairs' FP8 rows, loaded once for the module."""
    return {c.id: c for c in load_cases() if c.id in MXFP8_PAIRS}


@pytest.fixture(scope="module")
def ratios(cases) -> dict[str, tuple[float, float]]:
    """Per pair: (measured MXFP8 / FP8, the model's) under the shipped calibration."""
    cal = load_calibration()
    mx = get_precision("mxfp8")
    out = {}
    for rid, measured_mx in MXFP8_PAIRS.items():
        c = cases[rid]
        assert c.precision.name == "fp8"
        fp8 = predict_case(c, cal).predicted
        mxfp8 = predict_case(replace(c, precision=mx), cal).predicted
        out[rid] = (measured_mx / c.measured, mxfp8 / fp8)
    return out


@pytest.mark.parametrize("rid", sorted(MXFP8_PAIRS))
def test_mxfp8_over_fp8_matches_the_published_pair(ratios, rid):
    measured, model = ratios[rid]
    assert measured < 1.0
    assert model == pytest.approx(measured, rel=0.02)


def test_without_the_factor_the_model_would_rank_mxfp8_first(cases):
    """The factor is what makes the pairs hold: with it set to 1, MXFP8's lighter quantization makes
    the model's MXFP8 run the faster of the two."""
    cal = load_calibration()
    c = cases["mbridge-llama3-8b-b200-fp8"]
    plain = replace(get_precision("mxfp8"), training_gemm_factor=1.0)
    assert predict_case(replace(c, precision=plain), cal).predicted > predict_case(c, cal).predicted
