"""Memory formulas against the published examples, and the general activation count against Korthikanti."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenfold.perf import Layout, estimate_training, load_model
from tenfold.perf.specs.models import ModelSpec
from tenfold.perf.specs.precision import get_precision
from tenfold.perf.training.grid import PlanGrid
from tenfold.perf.training.memory import (
    inflight_layer_microbatches,
    korthikanti_activation_bytes,
    layer_activation_bytes_per_token,
    plan_memory,
    zero_model_state_bytes,
)
from tenfold.perf.training.stack import stack


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


def _per_token(model, *, modules=("core_attn",), rc=1, t=1, sp=0, ob=2.0, moe=False):
    return float(
        layer_activation_bytes_per_token(
            model,
            t=t,
            sp=sp,
            recompute=rc,
            seq_len=4096,
            flash=True,
            operand_bytes=ob,
            moe=moe,
            modules=modules,
        )
    )


def test_recompute_modules_free_what_megatron_documents():
    """Each Megatron-Core recompute module frees its own tensors (counted here independently)."""
    llama, ds = load_model("llama3-70b"), load_model("deepseek-v3")
    a, dqk, dv = ds.heads, ds.qk_head_dim, ds.v_dim
    freed = _per_token(ds, rc=0, moe=True) - _per_token(ds, modules=("mla_up_proj",), moe=True)
    assert freed == pytest.approx(2 * (2 * a * dqk + a * dv))  # q, k and v after the up-projections
    # MoE activation: the FC2 input of each of the top-k routed copies (1 byte under FP8)
    fp8 = _per_token(ds, rc=0, moe=True, ob=1.0) - _per_token(ds, modules=("moe_act",), moe=True, ob=1.0)
    assert fp8 == pytest.approx(ds.topk * ds.moe_ffn)
    # layernorm: in BF16 the two norm outputs are the QKV and FC1 inputs; an FP8 GEMM keeps its own copy
    hl = llama.hidden
    assert _per_token(llama, rc=0) - _per_token(llama, modules=("layernorm",)) == pytest.approx(4 * hl)
    assert _per_token(llama, rc=0, ob=1.0) == pytest.approx(_per_token(llama, modules=("layernorm",), ob=1.0))
    # with SP the norm region is split over TP too
    assert _per_token(llama, rc=0, t=4, sp=1) - _per_token(
        llama, modules=("layernorm",), t=4, sp=1
    ) == pytest.approx(hl)
    # recomputing the whole MoE layer frees more than its activation alone; none of them touch dense layers
    assert _per_token(ds, modules=("moe",), moe=True) < _per_token(ds, modules=("moe_act",), moe=True)
    assert _per_token(llama, rc=0) == pytest.approx(_per_token(llama, modules=("moe", "moe_act")))
    # mlp (dense MLP recomputed) leaves the attention block and the MLP norm input
    assert _per_token(llama, modules=("mlp",)) < _per_token(llama, modules=("layernorm",))
    # an empty list is no recomputation at all
    assert _per_token(llama, modules=()) == pytest.approx(_per_token(llama, rc=0))


def test_torchtitan_per_op_checkpointing_keeps_every_other_matmul():
    """torchtitan's op policy on a Llama block: mm outputs q, k, v, o, w1, w3, w2 in call order; the odd
    ones (1st, 3rd, ...) are saved, plus the SDPA output (+ fp32 log-sum-exp per head) and the block input."""
    m = load_model("llama3-8b")
    h, a, g, hd, f = m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn
    mm_out = [a * hd, g * hd, g * hd, h, f, f, h]
    saved = 2 * sum(mm_out[0::2]) + 2 * a * hd + 4 * a + 2 * h
    assert _per_token(m, modules=("op",)) == pytest.approx(saved)
    assert _per_token(m, rc=2) < saved < _per_token(m)


def _plan(model, layout, software, precision="fp8", seq_len=8192, global_batch=256):
    grid = PlanGrid.from_layouts([layout], default_zero=software.default_zero)
    out = plan_memory(
        model,
        grid,
        precision=get_precision(precision),
        software=software,
        seq_len=seq_len,
        global_batch=global_batch,
    )
    return {k: float(v[0]) for k, v in out.items()}


def test_activation_cpu_offload_keeps_the_other_layers():
    m = load_model("llama3-70b")
    lay = Layout(tp=1, pp=1, dp=64, micro_batch=2, zero=3)
    base = _plan(m, lay, stack("megatron-core"))
    half = _plan(m, lay, stack("megatron-core", activation_offload_layers=40))
    logits = 6.0 * m.vocab * 2 * 8192
    assert half["activations_B"] - logits == pytest.approx(0.5 * (base["activations_B"] - logits))
    assert half["weights_B"] == base["weights_B"]
    everything = _plan(m, lay, stack("megatron-core", activation_offload_layers=500))
    assert everything["activations_B"] == pytest.approx(logits)


def test_fsdp_reshards_after_forward_when_a_step_is_one_micro_batch():
    """torchtitan: reshard_after_forward = not pp_enabled; with PP the stage's weights stay gathered."""
    m = load_model("llama3-8b")
    tt = stack("torchtitan")
    one = _plan(m, Layout(tp=1, pp=1, dp=8, micro_batch=2, zero=3), tt, global_batch=16)
    piped = _plan(m, Layout(tp=1, pp=2, dp=4, micro_batch=2, zero=3), tt, global_batch=16)
    whole = 2.0 * m.total_params()  # BF16 bytes of the whole model
    assert one["weights_B"] < whole / 4  # 1/8 sharded, plus a layer or two gathered
    assert piped["weights_B"] > 0.9 * whole / 2  # the whole stage (half the model) gathered


def test_the_embedding_chunk_holds_no_layer_activations():
    """126 layers at PP16 VP8 with balanced stages: the first stage's first chunk is the embedding alone,
    so that stage keeps 7 layers' activations per round where a 128-layer model keeps 8 (same per-layer
    bytes, same in-flight chunks)."""
    m = load_model("llama3.1-405b")
    lay = Layout(tp=8, pp=16, vp=8, dp=64, zero=3)
    sw = stack("meta-llama3")
    kw = dict(precision="bf16", global_batch=2048)
    assert m.layers == 126
    short, full = _plan(m, lay, sw, **kw), _plan(replace(m, layers=128), lay, sw, **kw)
    assert short["activations_B"] == pytest.approx(7 / 8 * full["activations_B"], rel=1e-9)
    # without balanced stages the chunk split is the plain one: every slot of the first stage is a layer
    flat = _plan(m, lay, stack("meta-llama3", balanced_stages=False), **kw)
    assert flat["activations_B"] > short["activations_B"]


def test_sink_attention_keeps_no_scores_but_is_timed_as_the_stand_in():
    """NVIDIA's gpt-oss-120B layout on 64 GB300 (Megatron-Bridge 26.06: EP16, micro-batch 4, no recompute)
    ran, so sink attention kept no s x s scores: memory counts it fused, as without sinks. Its time is the
    materialised-score stand-in unless the stack times it fused (docs/perf.md)."""
    oss = load_model("gpt-oss-120b")
    lay = Layout(dp=64, ep=16, micro_batch=4)
    kw = dict(seq_len=4096, global_batch=1280, precision="mxfp8")
    est = estimate_training(oss, "gb300", lay, **kw)
    no_sinks = estimate_training(replace(oss, attention_sinks=False), "gb300", lay, **kw)
    timed_fused = estimate_training(oss, "gb300", lay, software=stack(fused_sink_timing=True), **kw)
    assert est.feasible, est.reason
    assert est.memory.activations_GiB == pytest.approx(no_sinks.memory.activations_GiB)
    assert est.memory.capacity_GiB > est.memory.total_GiB
    assert est.step_time_s > 1.2 * timed_fused.step_time_s
    unfused = estimate_training(oss, "gb300", lay, software=stack(flash_attention=False), **kw)
    assert unfused.memory.activations_GiB > 3 * est.memory.activations_GiB
