"""estimate_training: feasibility with reasons, breakdown consistency, definitions of the outputs."""

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenfold.perf import Infeasible, Layout, estimate_training, load_hardware, load_model


def test_reason_prints_the_numbers():
    m = replace(load_model("llama3-8b"), heads=28, kv_heads=4, head_dim=128, hidden=3584)
    e = estimate_training(m, "h100-sxm", Layout(tp=16, dp=1), seq_len=4096, global_batch=16)
    assert not e.feasible and "TP=16 does not divide 28 heads" in e.reason
    assert math.isnan(e.step_time_s)
    oom = estimate_training(
        "llama3-70b", "h100-sxm", Layout(dp=8), seq_len=8192, global_batch=64, precision="fp8"
    )
    assert not oom.feasible
    assert oom.reason.startswith("needs ") and "GiB of 80 GiB" in oom.reason
    with pytest.raises(Infeasible, match="GiB of 80 GiB"):
        oom.raise_if_infeasible()


def test_unsupported_precision_and_cluster_size():
    e = estimate_training(
        "llama3-8b", "h100-sxm", Layout(dp=8), seq_len=8192, global_batch=64, precision="nvfp4", num_gpus=16
    )
    assert "no fp4 tensor cores" in e.reason and "cluster has 16 GPUs" in e.reason


def test_bad_input_raises_value_error():
    with pytest.raises(ValueError):
        Layout(tp=0)
    with pytest.raises(ValueError, match="recompute"):
        Layout(recompute="some")
    with pytest.raises(ValueError, match="precision"):
        estimate_training("llama3-8b", "h100-sxm", Layout(), seq_len=8192, global_batch=8, precision="fp7")


def test_breakdown_sums_to_step_and_outputs_are_consistent():
    e = estimate_training(
        "llama3.1-405b",
        "h100-sxm",
        Layout(tp=8, pp=8, vp=8, dp=8, cp=2),
        seq_len=8192,
        global_batch=1536,
        precision="fp8",
    )
    b = e.breakdown
    parts = b.compute_s + b.tp_s + b.cp_s + b.ep_s + b.pp_s + b.fsdp_s + b.bubble_s + b.dp_s + b.optimizer_s
    assert parts == pytest.approx(e.step_time_s, rel=1e-12)
    assert e.tokens_per_s_per_gpu == pytest.approx(1536 * 8192 / e.step_time_s / 1024)
    h = load_hardware("h100-sxm")
    assert e.mfu_bf16 == pytest.approx(e.model_tflops_per_gpu * 1e12 / h.peak("bf16"))
    assert e.mfu_precision == pytest.approx(e.mfu_bf16 / 2, rel=1e-3)  # FP8 peak = 2 x BF16 peak
    assert e.microbatches == 1536 // 8
    assert e.to_dict()["layout"]["tp"] == 8


def test_directions_the_physics_requires():
    base = dict(seq_len=8192, global_batch=256)
    lay = Layout(tp=4, pp=8, vp=5, dp=2)
    fp8 = estimate_training("llama3-70b", "h100-sxm", lay, precision="fp8", **base)
    bf16 = estimate_training("llama3-70b", "h100-sxm", lay, precision="bf16", **base)
    assert fp8.step_time_s < bf16.step_time_s
    gb = estimate_training("llama3-70b", "gb200", lay, precision="fp8", **base)
    assert gb.step_time_s < fp8.step_time_s / 1.8  # > 2x the FP8 peak, 2.4x the HBM bandwidth
    full = estimate_training(
        "llama3-70b", "h100-sxm", replace(lay, recompute="full"), precision="fp8", **base
    )
    assert full.step_time_s > fp8.step_time_s and full.memory.activations_GiB < fp8.memory.activations_GiB
    # EP inside NVL72 beats EP over the network for a large MoE (no VP: 61 layers do not split into
    # PP4 x VP4 equal chunks, which Megatron-Core refuses)
    ds = load_model("deepseek-v3")
    nvl = estimate_training(
        ds, "gb200", Layout(pp=4, dp=64, ep=64), seq_len=4096, global_batch=4096, precision="mxfp8"
    )
    ib = estimate_training(
        ds, "b200", Layout(pp=4, dp=64, ep=64), seq_len=4096, global_batch=4096, precision="mxfp8"
    )
    assert nvl.breakdown.ep_s < ib.breakdown.ep_s


PLAN = st.fixed_dictionaries(
    {
        "tp": st.sampled_from([1, 2, 3, 4, 8, 16]),
        "pp": st.sampled_from([1, 2, 4, 8, 100]),
        "vp": st.sampled_from([1, 2, 3]),
        "dp": st.sampled_from([1, 2, 4, 8, 64]),
        "cp": st.sampled_from([1, 2, 3]),
        "ep": st.sampled_from([1, 2, 8, 16]),
        "micro_batch": st.sampled_from([1, 2, 4]),
        "recompute": st.sampled_from(["none", "selective", "full"]),
        "zero": st.sampled_from([0, 1, 2, 3]),
    }
)


@given(
    plan=PLAN,
    name=st.sampled_from(["llama3-8b", "qwen3-30b-a3b", "deepseek-v3", "gpt3-175b"]),
    gpu=st.sampled_from(["h100-sxm", "b200", "gb200"]),
    gbs=st.sampled_from([64, 96, 1024]),
    precision=st.sampled_from(["bf16", "fp8", "nvfp4"]),
)
def test_infeasible_plans_always_carry_a_reason(plan, name, gpu, gbs, precision):
    lay = Layout(**plan)
    e = estimate_training(name, gpu, lay, seq_len=4096, global_batch=gbs, precision=precision)
    assert e.feasible == (e.reason == "")
    assert e.num_gpus == lay.tp * lay.pp * lay.dp * lay.cp == lay.gpus
    if e.feasible:
        assert e.step_time_s > 0 and e.memory.total_GiB <= e.memory.capacity_GiB


def test_every_estimate_carries_its_measured_80_percent_interval():
    from tenfold.perf import load_calibration

    cal = load_calibration()
    dense = estimate_training(
        "llama3-70b", "h100-sxm", Layout(tp=4, pp=4, dp=4), seq_len=8192, global_batch=128, precision="fp8"
    )
    lo, hi = dense.interval
    assert lo < dense.tokens_per_s_per_gpu < hi
    assert dense.uncertainty_group == "hopper/dense"
    assert hi / dense.tokens_per_s_per_gpu == pytest.approx(dense.interval_factor)
    assert dense.interval_factor == pytest.approx(cal.uncertainty.factor("hopper/dense"))
    # an accelerator nobody validated gets the widest spread measured
    amd = estimate_training("llama3-70b", "mi300x", Layout(tp=8, dp=8), seq_len=8192, global_batch=128)
    assert amd.interval_factor == pytest.approx(
        math.exp(1.2815515655446004 * max([cal.uncertainty.pooled, *cal.uncertainty.log_sigma.values()]))
    )
    # without a measured uncertainty there is no interval rather than an invented one
    bare = estimate_training(
        "llama3-8b",
        "h100-sxm",
        Layout(dp=8),
        seq_len=8192,
        global_batch=64,
        calibration=replace(cal, uncertainty=None),
    )
    assert all(math.isnan(x) for x in bare.interval)


def test_estimate_says_where_its_gemm_efficiency_comes_from():
    from tenfold.perf import load_calibration

    cal = load_calibration()
    measured = estimate_training(
        "llama3-70b", "gb200", Layout(tp=2, pp=4, dp=8), seq_len=8192, global_batch=128, precision="nvfp4"
    )
    assert measured.gemm_source.startswith("measured kernel table") == (
        "blackwell/4" in cal.fit.get("gemm_tied", ())
    )
    amd = estimate_training("llama3-70b", "mi300x", Layout(tp=8, dp=8), seq_len=8192, global_batch=128)
    assert amd.gemm_source.startswith("fallback")
