"""Framework rules (layout.RULES) and the pipeline bubble: every plan the search returns can be launched."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenfold.perf import Layout, estimate_training
from tenfold.perf.specs.models import load_model
from tenfold.perf.training.layout import RULES, broken_rules, microbatches
from tenfold.perf.training.search import search_training
from tenfold.perf.training.stack import stack


def test_issue_example_interleaving_with_one_microbatch_is_refused():
    # Llama 3.1 405B on GB200, TP8 PP2 VP8 DP1024 mb2: one micro-batch per step; Megatron-Core refuses
    e = estimate_training(
        "llama3.1-405b",
        "gb200",
        Layout(tp=8, pp=2, vp=8, dp=1024, micro_batch=2, recompute="full"),
        seq_len=8192,
        global_batch=2048,
        precision="fp8",
    )
    assert not e.feasible and "multiple of PP=2" in e.reason


def _bubble_in_microbatches(e) -> float:
    """bubble / (m · t_mb): the bubble in units of one micro-batch's stage time, per micro-batch."""
    b = e.breakdown
    work = e.step_time_s - b.bubble_s - b.dp_s - b.optimizer_s
    return b.bubble_s / work * e.microbatches


@pytest.mark.parametrize("m", [1, 2])
def test_interleaving_cannot_shrink_the_bubble_below_p_minus_m(m):
    # Meta's schedule runs interleaving with m < p; each of the v rounds then waits p - m chunk-slots
    kw = dict(seq_len=8192, global_batch=4 * m, precision="bf16", software="meta-llama3")
    p, v = 4, 5
    flat = estimate_training("llama3-70b", "h100-sxm", Layout(tp=8, pp=p, dp=4), **kw)
    inter = estimate_training("llama3-70b", "h100-sxm", Layout(tp=8, pp=p, vp=v, dp=4), **kw)
    assert flat.microbatches == inter.microbatches == m
    assert _bubble_in_microbatches(flat) == pytest.approx(p - 1)
    assert _bubble_in_microbatches(inter) == pytest.approx((p - 1) / v + (p - m) * (1 - 1 / v))
    if m == 1:  # one micro-batch: interleaving gains nothing on the bubble
        assert inter.breakdown.bubble_s == pytest.approx(flat.breakdown.bubble_s, rel=0.05)


def test_one_layer_chunks_beside_embedding_and_loss_chunks_are_launchable():
    """Llama 3 405B's 126 layers at PP16 VP8: 128 chunks, the first holding only the embedding and the last
    only the output and loss (arXiv 2407.21783 §3.3.2; Megatron-Core pipeline_model_parallel_layout).
    Stacks without balanced stages need a layer in every chunk, and no stack takes a chunk more."""
    m = load_model("llama3.1-405b")
    kw = dict(seq_len=8192, global_batch=2048)
    assert m.layers % 16 and m.layers + 2 == 16 * 8
    for name in ("megatron-core", "meta-llama3"):
        assert broken_rules(m, Layout(tp=8, pp=16, vp=8, dp=64), software=stack(name), **kw) == []
        too_many = broken_rules(m, Layout(tp=8, pp=16, vp=9, dp=64), software=stack(name), **kw)
        assert "pp_layers" in {r.key for r in too_many}
    flat = stack("megatron-core", balanced_stages=False)
    refused = broken_rules(m, Layout(tp=8, pp=16, vp=8, dp=64), software=flat, **kw)
    assert "pp_layers" in {r.key for r in refused}


def test_every_rule_names_its_source():
    assert all(r.source for r in RULES)


def _launchable(model, lay, *, seq_len, global_batch, software) -> list[str]:
    """The framework rules checked directly (not through RULES), for Megatron-Core style stacks."""
    m = global_batch // (lay.dp * lay.micro_batch)
    out = []
    if model.heads % lay.tp:
        out.append("heads")
    if global_batch % (lay.dp * lay.micro_batch):
        out.append("batch")
    if model.is_moe and model.experts % lay.ep:
        out.append("experts")
    if lay.cp > 1 and seq_len % (2 * lay.cp):
        out.append("cp")
    chunks = lay.pp * lay.vp
    if chunks > model.layers + (2 if software.balanced_stages else 0):
        out.append("chunks")
    if lay.vp > 1:
        if model.layers % chunks and (model.layers + 2) % chunks:
            out.append("vp layers")
        if software.interleave_needs_pp_multiple and m % lay.pp:
            out.append("vp micro-batches")
        if not software.interleaving:
            out.append("vp software")
    return out


@settings(max_examples=8, deadline=None, derandomize=True)
@given(
    model=st.sampled_from(["llama3-8b", "llama3-70b", "mixtral-8x7b", "deepseek-v3"]),
    gpus=st.sampled_from([8, 16, 32, 64]),
    batch=st.sampled_from([16, 64, 96, 256]),
    software=st.sampled_from(["megatron-core", "megatron-deepspeed-2021", "meta-llama3"]),
)
def test_every_searched_plan_passes_every_rule(model, gpus, batch, software):
    spec = load_model(model)
    sw = stack(software)
    res = search_training(
        spec, "gb200", gpus, seq_len=4096, global_batch=batch, software=sw, top_k=5, max_vp=4
    )
    for e in res.top:
        assert e.feasible
        assert broken_rules(spec, e.layout, seq_len=4096, global_batch=batch, software=sw) == []
        assert _launchable(spec, e.layout, seq_len=4096, global_batch=batch, software=sw) == []


def test_microbatches_is_zero_when_the_batch_does_not_divide():
    assert int(microbatches(10, {"dp": 4, "micro_batch": 1})) == 0
    assert int(microbatches(16, {"dp": 4, "micro_batch": 2})) == 2


HARDWARE = ["h100-sxm", "b200", "gb200", "mi300x", "mi355x", "tpu-v5p", "a100-80gb"]


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    model=st.sampled_from(["llama3-8b", "llama3-70b", "mixtral-8x7b", "gpt3-175b"]),
    hw=st.sampled_from(HARDWARE),
    precision=st.sampled_from(["bf16", "fp8", "mxfp8", "nvfp4"]),
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 4]),
    dp=st.sampled_from([1, 2, 8, 64]),
    mb=st.sampled_from([1, 2, 4]),
    recompute=st.sampled_from(["none", "selective", "full"]),
)
def test_no_estimate_exceeds_the_peak(model, hw, precision, tp, pp, dp, mb, recompute):
    lay = Layout(tp=tp, pp=pp, dp=dp, micro_batch=mb, recompute=recompute)
    try:
        e = estimate_training(model, hw, lay, seq_len=4096, global_batch=dp * mb * 8, precision=precision)
    except ValueError:  # a precision the GPU lacks
        return
    if e.breakdown is not None:
        assert e.mfu_precision <= 1.0


def test_uncalibrated_hardware_is_flagged_and_not_faster_than_h100():
    kw = dict(seq_len=8192, global_batch=64, precision="fp8")
    lay = Layout(tp=8, dp=8)
    amd = estimate_training("llama3-70b", "mi300x", lay, **kw)
    nv = estimate_training("llama3-70b", "h100-sxm", lay, **kw)
    assert not amd.calibrated and amd.to_dict()["calibrated"] is False
    assert any("uncalibrated" in n for n in amd.notes)
    assert nv.calibrated
    # MI300X: 1.32x H100's FP8 peak, so the ratio may exceed 1, but not by more than the peak ratio
    assert amd.tokens_per_s_per_gpu / nv.tokens_per_s_per_gpu < 1.45
