"""`Calibration.expert_lowp_gain`: the routed experts' grouped GEMMs realise that share of the dense
low-precision speedup over 16-bit; 16-bit runs, dense models and the other GEMMs are untouched by it."""

from dataclasses import replace

import pytest

from tenfold.perf import Layout, load_hardware, load_model
from tenfold.perf.calibration import calibration_from_dict, load_calibration
from tenfold.perf.specs.catalog import data_dir, read_toml
from tenfold.perf.specs.precision import get_precision
from tenfold.perf.training.compute import gemm_times, rates
from tenfold.perf.training.grid import PlanGrid
from tenfold.perf.training.stack import stack
from tenfold.perf.training.step import plan_times


def _step(model: str, precision: str, gain: float, layout: Layout) -> float:
    cal = replace(load_calibration(), expert_lowp_gain=gain)
    out = plan_times(
        load_model(model),
        load_hardware("b200"),
        PlanGrid.from_layouts([layout], default_zero=1),
        precision=get_precision(precision),
        software=stack("megatron-core"),
        calibration=cal,
        seq_len=4096,
        global_batch=256,
    )
    return float(out["step_s"][0])


MOE = Layout(tp=1, pp=1, dp=8, ep=8, micro_batch=2, recompute="none", zero=1)
DENSE = Layout(tp=1, pp=1, dp=8, micro_batch=1, recompute="none", zero=1)


def test_expert_rate_spans_the_16_bit_and_low_precision_rates():
    hw, mx = load_hardware("b200"), get_precision("mxfp8")
    cal = load_calibration()
    for gain in (0.05, 0.4, 1.0):
        r = rates(hw, mx, replace(cal, expert_lowp_gain=gain))
        assert r.expert_lp_flops == pytest.approx(r.bf16_flops + gain * (r.lp_flops - r.bf16_flops))
    r = rates(hw, mx, replace(cal, expert_lowp_gain=0.5))
    expert = gemm_times(8192, 3072, 4096, r, experts=True)
    dense = gemm_times(8192, 3072, 4096, r, experts=False)
    assert expert[0] > dense[0] and expert[1] > dense[1]


def test_low_precision_moe_steps_slow_down_as_the_gain_falls():
    full, half = _step("qwen3-30b-a3b", "mxfp8", 1.0, MOE), _step("qwen3-30b-a3b", "mxfp8", 0.5, MOE)
    assert half > full * 1.02


@pytest.mark.parametrize(
    ("model", "precision", "layout"),
    [
        ("qwen3-30b-a3b", "bf16", MOE),
        ("llama3-8b", "mxfp8", DENSE),
    ],
)
def test_16_bit_moe_and_dense_models_ignore_it(model, precision, layout):
    assert _step(model, precision, 1.0, layout) == _step(model, precision, 0.3, layout)


def test_a_calibration_file_without_it_prices_experts_like_dense_gemms():
    d = read_toml(data_dir("calibration") / "training.toml")
    d["parameters"] = {k: v for k, v in d["parameters"].items() if k != "expert_lowp_gain"}
    assert calibration_from_dict(d).expert_lowp_gain == 1.0
    assert "expert_lowp_gain" in load_calibration().free_names()
    assert "expert_lowp_gain" not in load_calibration(kind="inference").free_names()
