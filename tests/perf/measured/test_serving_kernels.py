"""Measured serving kernels (optional extra): MoE and decode-attention reads and their interpolation."""

from itertools import pairwise

import numpy as np
import pytest

from tenfold.perf.measured import serving
from tenfold.perf.specs.hardware import load_hardware

DSV3_MOE = dict(hidden=7168, inter=2048, topk=8, experts=256)


@pytest.fixture(autouse=True)
def installed():
    pytest.importorskip("aiconfigurator_core")
    pytest.importorskip("pyarrow")


def test_moe_time_grows_with_tokens_and_is_none_off_the_grid():
    times = [
        serving.moe_seconds("b200", "nvfp4", tokens=t, moe_tp=4, moe_ep=2, **DSV3_MOE)
        for t in (1, 8, 64, 512, 4096, 32768)
    ]
    assert all(t is not None for t in times)
    assert all(b >= a * 0.95 for a, b in pairwise(times))
    assert times[-1] > times[-2]  # beyond the largest measured count it keeps growing
    assert serving.moe_seconds("b200", "nvfp4", tokens=8, moe_tp=3, moe_ep=1, **DSV3_MOE) is None
    assert serving.moe_seconds("mi300x", "nvfp4", tokens=8, moe_tp=1, moe_ep=8, **DSV3_MOE) is None


def test_a_touched_expert_costs_far_less_than_a_microsecond_of_fixed_time():
    """Qwen3-30B-A3B on one B200 (128 experts, top-8): 32 tokens touch ~112 experts; the whole fused
    layer is measured well under 112 x 1 us (tenfold's fit charges 3.5 us per touched expert)."""
    t = serving.moe_seconds(
        "b200", "nvfp4", tokens=32, hidden=2048, inter=768, topk=8, experts=128, moe_tp=1, moe_ep=1
    )
    assert t is not None and t < 112 * 1e-6


def test_decode_attention_never_beats_the_kv_read():
    """Llama-3-70B on H200 TP2, 627 sequences of 1536 cached FP8 tokens: each layer must read
    627 x 2 x 4 heads x 128 x 1536 bytes; large batches were measured only at short contexts, so
    clamping the context (instead of extending at that batch's bandwidth) would undercut this floor."""
    hw = load_hardware("h200")
    kv_bytes = 627 * 2 * 4 * 128 * 1536
    t = serving.attention_decode_seconds(
        "h200", "fp8", batch=627, ctx=1536, heads_per_rank=32, kv_heads_per_rank=4, head_dim=128
    )
    assert t is not None and t >= kv_bytes / hw.hbm_Bps


def test_mla_decode_has_a_launch_floor_and_grows_with_batch():
    small = serving.mla_decode_seconds("b200", "fp8", batch=1, ctx=2048, heads_per_rank=16)
    large = serving.mla_decode_seconds("b200", "fp8", batch=256, ctx=2048, heads_per_rank=16)
    assert small is not None and small > 5e-6  # a kernel launch, not 2.4 MB / 8 TB/s = 0.3 us
    assert large is not None and large > 2 * small
    assert np.isfinite(large)


def test_sliding_window_layers_are_read_at_their_window():
    """gpt-oss-120b: half its layers attend over 128 tokens, so at a long context its average layer is
    well below a full-attention layer of the same heads."""
    from tenfold.perf.specs.models import load_model

    model = load_model("gpt-oss-120b")
    mean = serving.layer_decode_attention_seconds("b200", "fp8", model, tp=1, batch=256, ctx=8192)
    full = serving.attention_decode_seconds(
        "b200", "fp8", batch=256, ctx=8192, heads_per_rank=64, kv_heads_per_rank=8, head_dim=64
    )
    assert mean is not None and full is not None and mean < 0.8 * full
