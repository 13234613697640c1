"""MoE layer costs: one kernel launch per local expert GEMM, and what it does across EP sizes."""

from dataclasses import replace

import numpy as np
import pytest

from tenfold.perf import load_hardware, load_model
from tenfold.perf.calibration import load_calibration
from tenfold.perf.specs.precision import get_precision
from tenfold.perf.training.compute import gemm_times, layer_gemms, layer_times, rates


def _rates():
    return rates(load_hardware("b200"), get_precision("bf16"), load_calibration())


def test_each_kernel_pays_its_launch_overhead():
    r = _rates()
    f1, b1 = gemm_times(1024, 4096, 7168, r, count=16)
    f16, b16 = gemm_times(1024, 4096, 7168, r, count=16, kernels=16)
    assert float(f16 - f1) == pytest.approx(15 * r.kernel_s)
    assert float(b16 - b1) == pytest.approx(2 * 15 * r.kernel_s)  # dgrad and wgrad


def test_expert_gemms_are_one_kernel_per_local_expert():
    model = load_model("deepseek-v3")
    for ep in (8, 64):
        gemms = layer_gemms(model, moe=True, tokens=np.array([4096.0]), tp=np.array([1.0]), ep=np.array([ep]))
        experts = [g for g in gemms if np.any(np.asarray(g.count) > 1)]
        assert len(experts) == 2  # up/gate and down
        for g in experts:
            assert np.asarray(g.kernels).item() == model.experts / ep == np.asarray(g.count).item()
        dense = [g for g in gemms if np.all(np.asarray(g.count) == 1)]
        assert all(np.asarray(g.kernels).item() == 1.0 for g in dense)


def test_fewer_experts_per_gpu_cost_less_at_equal_flops():
    """Same tokens per GPU and FLOPs: EP8 holds 32 experts per GPU, EP64 4, and launches 8x the kernels.
    (HBM made fast so no GEMM is memory-bound: EP8's wgrad also accumulates 8x the local expert weights.)"""
    model = load_model("deepseek-v3")
    r = replace(_rates(), hbm_Bps=_rates().hbm_Bps * 1e3)
    kw = dict(moe=True, tokens=np.array([4096.0]), tp=np.array([1.0]), sp=np.array([False]), seq_len=4096)
    t8 = layer_times(model, ep=np.array([8.0]), flash=True, r=r, low=False, **kw)
    t64 = layer_times(model, ep=np.array([64.0]), flash=True, r=r, low=False, **kw)
    launches = (model.experts / 8 - model.experts / 64) * 2  # two expert GEMMs per pass
    assert (t8.gemm_f - t64.gemm_f).item() == pytest.approx(launches * r.kernel_s, rel=0.05)
    assert (t8.gemm_b - t64.gemm_b).item() == pytest.approx(2 * launches * r.kernel_s, rel=0.05)
