"""Per-shape GEMM efficiency from the measured kernel tables (`gemm_shapes = "measured"`)."""

import math
import tomllib
from dataclasses import replace

import numpy as np
import pytest

from tenfold.perf import Layout, estimate_training, load_hardware, load_model
from tenfold.perf.calibration import calibration_from_dict, calibration_to_toml, load_calibration
from tenfold.perf.measured import tables
from tenfold.perf.measured.gemm import (
    REFERENCE_MODEL,
    REFERENCE_TOKENS,
    REFERENCE_TP,
    gemm_efficiency,
    shape_efficiency,
    table_log_flops,
)
from tenfold.perf.training.compute import layer_gemms
from tenfold.perf.validation.user import check_calibration_dict


@pytest.fixture
def tables_installed():
    pytest.importorskip("aiconfigurator_core")
    pytest.importorskip("pyarrow")


def test_array_interpolation_matches_one_shape_at_a_time(tables_installed):
    table = tables.gemm_table("h100_sxm", "fp8")
    rng = np.random.default_rng(0)
    m, n, k = (np.exp(rng.uniform(np.log(16), np.log(60000), 40)) for _ in range(3))
    together = table_log_flops(table, m, n, k)
    one_by_one = [float(table_log_flops(table, a, b, c)) for a, b, c in zip(m, n, k, strict=True)]
    np.testing.assert_allclose(together, one_by_one, rtol=0, atol=1e-12)
    peak = load_hardware("h100-sxm").peak("fp8")
    assert math.exp(together[0]) / peak == pytest.approx(gemm_efficiency("h100-sxm", "fp8", m[0], n[0], k[0]))


def test_factor_is_one_over_the_reference_layer(tables_installed):
    """The factors are relative to the reference layer: its GEMMs, weighted by FLOPs, average to exactly 1
    (harmonic mean: the layer's time at the calibrated efficiency is unchanged)."""
    shape = shape_efficiency("b200", "mxfp8")
    flops = seconds = 0.0
    model = load_model(REFERENCE_MODEL)
    for g in layer_gemms(model, moe=False, tokens=REFERENCE_TOKENS, tp=REFERENCE_TP, ep=1):
        M, N, K = (float(np.asarray(x).reshape(-1)[0]) for x in (g.M, g.N, g.K))
        for s in ((M, N, K), (M, K, N), (N, K, M)):
            flops += M * N * K
            seconds += M * N * K / float(shape.factor(*s))
    assert flops / seconds == pytest.approx(1.0, rel=1e-9)


def test_small_expert_gemms_run_below_the_reference(tables_installed):
    shape = shape_efficiency("h100-sxm", "fp8")
    expert = float(shape.factor(2048, 1536, 2048))  # a Qwen3-30B-A3B expert at 2048 tokens
    large = float(shape.factor(8192, 10240, 8192))
    assert expert < 0.8 < large
    assert shape_efficiency("mi300x", "bf16") is None
    assert shape_efficiency("grandteton-h100", "bf16") is not None  # the H100's shapes, read as ratios


def _tokens(model, gpu, layout, cal, precision="fp8", seq_len=4096, global_batch=256):
    est = estimate_training(
        model, gpu, layout, seq_len=seq_len, global_batch=global_batch, precision=precision, calibration=cal
    )
    return est.tokens_per_s_per_gpu


def test_measured_shapes_move_predictions_the_expected_way(tables_installed):
    flat = load_calibration()
    measured = replace(flat, gemm_shapes="measured")
    # small experts (hidden 2048, expert FFN 768) are slower per FLOP than the reference layer
    qwen = Layout(dp=8, ep=8)
    assert _tokens("qwen3-30b-a3b", "h100-sxm", qwen, measured) < 0.95 * _tokens(
        "qwen3-30b-a3b", "h100-sxm", qwen, flat
    )
    # the reference model itself moves little
    llama = Layout(tp=4, dp=2)
    ratio = _tokens("llama3-70b", "h100-sxm", llama, measured) / _tokens(
        "llama3-70b", "h100-sxm", llama, flat
    )
    assert 0.93 < ratio < 1.07
    # a GPU without tables keeps the flat roofline
    assert _tokens("llama3-8b", "mi300x", Layout(dp=8), measured) == _tokens(
        "llama3-8b", "mi300x", Layout(dp=8), flat
    )


def test_expert_only_shapes_leave_dense_layers_flat(tables_installed):
    flat = load_calibration()
    experts = replace(flat, gemm_shapes="measured-experts")
    llama = Layout(tp=4, dp=2)
    assert _tokens("llama3-70b", "h100-sxm", llama, experts) == _tokens("llama3-70b", "h100-sxm", llama, flat)
    qwen = Layout(dp=8, ep=8)
    assert _tokens("qwen3-30b-a3b", "h100-sxm", qwen, experts) < 0.95 * _tokens(
        "qwen3-30b-a3b", "h100-sxm", qwen, flat
    )
    assert "per expert GEMM shape" in experts.gemm_source("hopper", "8")


def test_gemm_shapes_round_trip_and_bad_values():
    cal = replace(load_calibration(), gemm_shapes="measured")
    text = calibration_to_toml(cal)
    assert 'gemm_shapes = "measured"' in text
    d = tomllib.loads(text)
    assert calibration_from_dict(d).gemm_shapes == "measured"
    assert check_calibration_dict(d).gemm_shapes == "measured"
    assert "gemm_shapes" not in calibration_to_toml(load_calibration())  # flat is the default, not written
    assert "per GEMM shape" in cal.gemm_source("hopper", "8")
    d["fixed"]["gemm_shapes"] = "per-row"
    with pytest.raises(ValueError, match="gemm_shapes must be one of flat, measured, measured-experts"):
        check_calibration_dict(d)
    with pytest.raises(ValueError, match="gemm_shapes"):
        replace(cal, gemm_shapes="roofline")
