"""Calibration: the committed values are physical, reproduce their recorded fit, and generalise."""

import numpy as np
import pytest

from tenfold.perf.calibration import BOUNDS, calibration_from_dict, fit_calibration, load_calibration
from tenfold.perf.validate import load_cases, predict_case


@pytest.mark.parametrize("kind", ["training", "inference"])
def test_committed_values_are_within_physical_bounds(kind):
    cal = load_calibration(kind=kind)
    for k, v in cal.gemm_efficiency.items():
        lo, hi = cal.GEMM_BOUNDS
        assert lo <= v <= hi, k
    for name in (*cal.FRACTION_FIELDS, *cal.OVERHEAD_FIELDS):
        lo, hi = BOUNDS[name]
        assert lo <= getattr(cal, name) <= hi, name


def test_committed_fit_objective_is_reproducible():
    cal = load_calibration()
    cases = [c for c in load_cases() if not c.reason]
    w = np.array([{"high": 1.0, "medium": 0.5}.get(c.reliability, 0.25) for c in cases])
    e = np.minimum([abs(predict_case(c, cal).error) for c in cases], 0.5)
    assert float(np.sum(w * e) / np.sum(w)) == pytest.approx(cal.fit["objective_value"], abs=2e-5)


def test_vector_round_trip():
    cal = load_calibration()
    back = cal.from_vector(cal.to_vector())
    for k in cal.gemm_efficiency:
        assert back.gemm_efficiency[k] == pytest.approx(cal.gemm_efficiency[k], rel=1e-9)
    assert back.kernel_overhead_us == pytest.approx(cal.kernel_overhead_us, rel=1e-9)


def test_fallback_for_uncalibrated_architectures():
    cal = load_calibration()
    assert cal.gemm("blackwell-ultra", "16") == cal.gemm("blackwell", "16")  # borrows its predecessor
    assert cal.gemm("cdna3", "16") == cal.fallback_gemm_efficiency
    assert not cal.is_calibrated("tpu", "16")
    with pytest.raises(ValueError, match="hbm_efficiency"):
        calibration_from_dict(
            {
                "gemm_efficiency": {"hopper/16": 0.7},
                "parameters": {
                    "attention_efficiency": 0.8,
                    "hbm_efficiency": 2.0,
                    "scaleup_efficiency": 0.8,
                    "scaleout_efficiency": 0.8,
                    "alltoall_efficiency": 0.6,
                    "kernel_overhead_us": 3,
                },
            }
        )


@pytest.mark.slow
def test_held_out_split_generalises():
    """Fit on the even-numbered rows, score the odd-numbered ones (and vice versa): each held-out half
    must stay within the issue's starting bound of 15 % (achieved 12.4 % and 8.9 %)."""
    cases = [c for c in load_cases() if not c.reason]
    start = load_calibration()
    for keep in (0, 1):
        train = frozenset(c.id for i, c in enumerate(cases) if i % 2 != keep)
        cal = fit_calibration(cases, start=start, iters=300, restarts=1, exclude=train)
        held = [abs(predict_case(c, cal).error) for c in cases if c.id in train]
        assert np.mean(held) <= 0.15
