"""torchtitan's async TP hides much less of the TP collectives than Transformer Engine's overlap: the
model's speedup from turning it on is held to torchtitan's published runs with and without it."""

from dataclasses import replace

import pytest

from tenfold.perf.calibration import load_calibration
from tenfold.perf.training.stack import TORCHTITAN_ASYNC_TP_RESIDUAL, TP_OVERLAP_RESIDUAL, stack
from tenfold.perf.validation.training import load_cases, predict_case

# row id -> (tok/s/GPU without async TP, with it), Grand Teton H100, FSDP + TP8
PUBLISHED = {
    # benchmarks/llama3_h100_202412_torchtitan.md Table 4: "2D" vs "2D + AsyncTP"
    "tt24-llama31-70b-fsdp32-tp8-asynctp-float8": (829.0, 876.0),
    # benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md: vanilla TP vs async TP
    "tt25-llama3-70b-fsdp32-tp8-asynctp-bf16": (597.3, 652.4),
    "tt25-llama3-70b-fsdp32-tp8-asynctp-float8": (809.8, 942.4),
    "tt25-llama3-8b-fsdp8-tp8-asynctp-float8": (5078.1, 5570.1),
}


@pytest.fixture(scope="module")
def cases() -> dict:
    return {c.id: c for c in load_cases() if c.id in PUBLISHED}


@pytest.fixture(scope="module")
def ratios(cases) -> dict[str, tuple[float, float]]:
    """Per published pair: (measured async/vanilla, the model's) under the shipped calibration."""
    cal = load_calibration()
    out = {}
    for rid, (vanilla, with_async) in PUBLISHED.items():
        c = cases[rid]
        on = predict_case(c, cal).predicted
        off = predict_case(replace(c, software=replace(c.software, tp_overlap=False)), cal).predicted
        out[rid] = (with_async / vanilla, on / off)
    return out


def test_the_rows_run_the_torchtitan_preset_with_async_tp(cases):
    assert set(cases) == set(PUBLISHED)
    for c in cases.values():
        assert c.software.name == "torchtitan" and c.software.tp_overlap
        assert c.software.tp_overlap_residual == TORCHTITAN_ASYNC_TP_RESIDUAL


@pytest.mark.parametrize("rid", sorted(PUBLISHED))
def test_async_tp_speedup_matches_the_published_on_off_runs(ratios, rid):
    """Within 8 % of each measured ratio (1.06-1.16x; the shipped calibration gives -3 % to +6 %): one
    residual cannot fit all four, whose own values span 0.44-0.79. With TE's residual of 0.1 the model is
    15-26 % over on every pair."""
    measured, model = ratios[rid]
    assert model == pytest.approx(measured, rel=0.08)


def test_transformer_engine_overlap_keeps_its_residual():
    assert stack("megatron-core").tp_overlap_residual == TP_OVERLAP_RESIDUAL == 0.1
    assert TORCHTITAN_ASYNC_TP_RESIDUAL > 4 * TP_OVERLAP_RESIDUAL
