"""Memory formulas against the published examples, and the general activation count against Korthikanti."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenfold.perf import Layout, estimate_training, load_model
from tenfold.perf.specs.models import ModelSpec
from tenfold.perf.training.memory import (
    inflight_layer_microbatches,
    korthikanti_activation_bytes,
    layer_activation_bytes_per_token,
    zero_model_state_bytes,
)


def test_zero_paper_example():
    # Rajbhandari et al. 2020 Figure 1: Psi = 7.5B, N_d = 64, K = 12 -> 120, 31.4, 16.6, 1.9 GB
    got = [zero_model_state_bytes(7.5e9, 64, s) / 1e9 for s in range(4)]
    assert got == pytest.approx([120.0, 31.4, 16.6, 1.9], abs=0.05)


def test_korthikanti_formulas():
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh = s * b * h
    assert korthikanti_activation_bytes(s=s, b=b, h=h, a=a) == sbh * (34 + 5 * a * s / h)
    assert korthikanti_activation_bytes(s=s, b=b, h=h, a=a, t=t) == sbh * (10 + 24 / t + 5 * a * s / (h * t))
    assert korthikanti_activation_bytes(s=s, b=b, h=h, a=a, t=t, sp=True) == pytest.approx(
        sbh / t * (34 + 5 * a * s / h)
    )
    assert (
        korthikanti_activation_bytes(s=s, b=b, h=h, a=a, t=t, sp=True, recompute="selective") == 34 * sbh / t
    )
    assert korthikanti_activation_bytes(s=s, b=b, h=h, a=a, t=t, sp=True, recompute="full") == 2 * sbh / t
    # 530B, t=8, SP + selective recompute cuts activations ~5x vs TP alone (paper: "5x")
    r = korthikanti_activation_bytes(s=2048, b=1, h=20480, a=128, t=8) / korthikanti_activation_bytes(
        s=2048, b=1, h=20480, a=128, t=8, sp=True, recompute="selective"
    )
    assert 4.5 < r < 6.0


@given(
    h=st.sampled_from([1024, 2048, 4096, 6144, 12288]),
    a=st.sampled_from([8, 16, 32, 64]),
    s=st.sampled_from([512, 1024, 2048, 4096]),
    t=st.sampled_from([1, 2, 4, 8]),
    sp=st.booleans(),
    rc=st.sampled_from(["none", "selective", "full"]),
)
def test_general_count_reproduces_korthikanti_for_gpt(h, a, s, t, sp, rc):
    gpt = ModelSpec(
        name="gpt",
        layers=2,
        hidden=h,
        heads=a,
        kv_heads=a,
        head_dim=h // a,
        ffn=4 * h,
        vocab=1000,
        activation="gelu",
        norm="layernorm",
        dropout=0.1,
    )
    code = {"none": 0, "selective": 1, "full": 2}[rc]
    ours = layer_activation_bytes_per_token(gpt, t=t, sp=int(sp), recompute=code, seq_len=s, flash=False) * s
    assert float(ours) == pytest.approx(
        korthikanti_activation_bytes(s=s, b=1, h=h, a=a, t=t, sp=sp, recompute=rc)
    )


def test_flash_drops_the_score_term_and_gqa_shrinks_kv():
    m = load_model("llama3-70b")
    flash = layer_activation_bytes_per_token(m, t=1, sp=0, recompute=0, seq_len=8192, flash=True)
    unfused = layer_activation_bytes_per_token(m, t=1, sp=0, recompute=0, seq_len=8192, flash=False)
    assert unfused - flash > 2 * m.heads * 8192 * 0.99  # softmax output (2 B per score) at least


def test_inflight_microbatches():
    # 1F1B: the first stage holds p micro-batches of L/p layers = L layers' worth
    assert inflight_layer_microbatches(layers=80, pp=8, vp=1, m=64) == 80
    assert inflight_layer_microbatches(layers=80, pp=8, vp=1, m=4) == 40  # fewer micro-batches than stages
    # interleaved, Megatron warm-up (v-1)p + 2(p-1) + 1 chunks of L/(pv) layers
    assert inflight_layer_microbatches(layers=80, pp=8, vp=5, m=64) == (4 * 8 + 14 + 1) * 2


LAYOUT = st.fixed_dictionaries(
    {
        "tp": st.sampled_from([1, 2, 4, 8]),
        "pp": st.sampled_from([1, 2, 4]),
        "cp": st.sampled_from([1, 2]),
        "mb": st.sampled_from([1, 2]),
        "zero": st.sampled_from([0, 1, 2, 3]),
        "rc": st.sampled_from(["none", "selective", "full"]),
    }
)


@given(
    x=LAYOUT,
    dp=st.sampled_from([1, 2, 4, 8]),
    name=st.sampled_from(["llama3-70b", "mixtral-8x7b", "gpt3-175b"]),
)
def test_more_gpus_never_increase_memory_per_gpu(x, dp, name):
    """Same layout and micro-batch, same micro-batches per pipeline: doubling DP adds GPUs and must not
    add memory per GPU (ZeRO shards over more ranks, activations are unchanged)."""
    m = load_model(name)
    ep = 8 if m.is_moe and (x["tp"] * x["cp"] * dp) % 8 == 0 else 1

    def mem(d):
        lay = Layout(
            tp=x["tp"],
            pp=x["pp"],
            dp=d,
            cp=x["cp"],
            ep=ep,
            micro_batch=x["mb"],
            recompute=x["rc"],
            zero=x["zero"],
        )
        e = estimate_training(
            m, "h100-sxm", lay, seq_len=4096, global_batch=d * x["mb"] * 16, precision="bf16"
        )
        return e.memory.total_GiB if e.memory else None

    small, big = mem(dp), mem(2 * dp)
    if small is not None and big is not None:
        assert big <= small * (1 + 1e-12)


def test_estimate_memory_breakdown_sums():
    e = estimate_training(
        "llama3-70b",
        "h100-sxm",
        Layout(tp=4, pp=8, vp=5, dp=2),
        seq_len=8192,
        global_batch=256,
        precision="fp8",
    )
    mm = e.memory
    assert mm.total_GiB == pytest.approx(
        mm.weights_GiB + mm.grads_GiB + mm.optimizer_GiB + mm.activations_GiB + mm.other_GiB
    )
    assert np.isclose(mm.capacity_GiB, 80.0)
