"""A stack's kernel family: PyTorch-native stacks (torchtitan) run their tensor-core work at the calibration's
`torch_kernel_efficiency` of the Transformer Engine rate; TE stacks are untouched by it."""

from dataclasses import replace

import pytest

from tenfold.perf import Layout, load_hardware, load_model
from tenfold.perf.calibration import calibration_from_dict, calibration_to_toml, load_calibration
from tenfold.perf.specs.catalog import data_dir, read_toml
from tenfold.perf.specs.precision import get_precision
from tenfold.perf.training.grid import PlanGrid
from tenfold.perf.training.stack import Stack, stack
from tenfold.perf.training.step import plan_times

LAYOUT = Layout(tp=8, pp=1, dp=4, micro_batch=1, recompute="none", zero=1)


def _times(software: Stack, torch_eff: float) -> dict:
    cal = replace(load_calibration(), torch_kernel_efficiency=torch_eff)
    return plan_times(
        load_model("llama3-70b"),
        load_hardware("h100-sxm"),
        PlanGrid.from_layouts([LAYOUT], default_zero=1),
        precision=get_precision("bf16"),
        software=software,
        calibration=cal,
        seq_len=8192,
        global_batch=64,
    )


def test_presets_name_their_kernel_family():
    assert stack("torchtitan").kernels == "torch"
    assert {stack(n).kernels for n in ("megatron-core", "megatron-2021", "deepseek-v3")} == {"te"}
    with pytest.raises(ValueError, match="kernels 'jax'"):
        Stack(name="x", kernels="jax")


def test_torch_stacks_scale_their_tensor_core_work():
    tt = stack("torchtitan", default_zero=1)
    fast, slow = _times(tt, 1.0), _times(tt, 0.5)
    ratio = float(slow["compute_s"][0]) / float(fast["compute_s"][0])
    # GEMMs and attention take twice as long; norms, activations and other memory-bound work do not
    assert 1.6 < ratio < 2.0


def test_te_stacks_ignore_the_torch_factor():
    mc = stack("megatron-core")
    a, b = _times(mc, 1.0), _times(mc, 0.5)
    assert float(a["step_s"][0]) == float(b["step_s"][0])


def test_the_factor_is_a_training_parameter_only():
    train, infer = load_calibration(), load_calibration(kind="inference")
    assert "torch_kernel_efficiency" in train.free_names()
    assert "torch_kernel_efficiency" not in infer.free_names()
    assert "torch_kernel_efficiency" in calibration_to_toml(train)
    assert "torch_kernel_efficiency" not in calibration_to_toml(infer)


def test_a_calibration_file_without_it_loads_as_te_speed():
    d = read_toml(data_dir("calibration") / "training.toml")
    d["parameters"] = {k: v for k, v in d["parameters"].items() if k != "torch_kernel_efficiency"}
    assert calibration_from_dict(d).torch_kernel_efficiency == 1.0
