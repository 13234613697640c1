"""torchtitan's per-op selective checkpointing ("op") against Megatron's attention-core recompute."""

import numpy as np
import pytest

from tenfold.perf import Layout, load_hardware, load_model
from tenfold.perf.calibration import load_calibration
from tenfold.perf.specs.precision import get_precision
from tenfold.perf.training.compute import gemm_times, layer_times, op_sac_recompute, rates
from tenfold.perf.training.grid import PlanGrid
from tenfold.perf.training.stack import stack
from tenfold.perf.training.step import plan_times

SEQ = 8192


def _times(software, layout, *, model="llama3-8b", gpu="h100-sxm"):
    sw = stack("megatron-core", recompute_modules=("core_attn",)) if software == "attention" else software
    return plan_times(
        load_model(model),
        load_hardware(gpu),
        PlanGrid.from_layouts([layout], default_zero=sw.default_zero),
        precision=get_precision("bf16"),
        software=sw,
        calibration=load_calibration(),
        seq_len=SEQ,
        global_batch=layout.dp * layout.micro_batch,
    )


def test_presets_name_their_policy():
    assert stack("torchtitan").selective_policy == "op"
    assert stack("megatron-core").selective_policy == "attention"
    with pytest.raises(ValueError, match="recompute_modules"):
        stack("megatron-core", recompute_modules=("every-other",))


def test_op_policy_recomputes_wk_wo_and_one_ffn_matmul_plus_memory_bound_ops():
    model, hw = load_model("llama3-8b"), load_hardware("h100-sxm")
    r = rates(hw, get_precision("bf16"), load_calibration())
    T, h, f = 2 * SEQ, model.hidden, model.ffn
    lt = layer_times(
        model, moe=False, tokens=T, tp=1, sp=False, ep=1, seq_len=SEQ, flash=True, r=r, low=False
    )
    got = float(op_sac_recompute(model, lt, moe=False, tokens=T, tp=1, r=r, low=False))
    kv = model.kv_heads * model.head_dim
    expect = sum(float(gemm_times(T, n, k, r, low=False)[0]) for n, k in ((kv, h), (h, h), (f, h)))
    assert got == pytest.approx(expect + float(lt.other_f))
    # the recomputed matmuls are about a third of the layer's GEMM forward, never all of it
    share = (got - float(lt.other_f)) / float(lt.gemm_f)
    assert 0.3 < share < 0.45


def test_op_policy_costs_more_than_attention_core_recompute_and_less_than_full():
    sel = Layout(dp=8, micro_batch=2, recompute="selective", zero=3)
    full = Layout(dp=8, micro_batch=2, recompute="full", zero=3)
    op = _times(stack("torchtitan"), sel)
    attn = _times(stack("torchtitan", recompute_modules=("core_attn",)), sel)
    whole = _times(stack("torchtitan"), full)
    assert float(attn["recompute_s"][0]) < float(op["recompute_s"][0]) < float(whole["recompute_s"][0])
    assert float(op["step_s"][0]) > float(attn["step_s"][0])


def test_op_policy_repeats_the_sequence_parallel_gathers_only_with_tp():
    tp8 = Layout(tp=8, sp=True, dp=1, micro_batch=1, recompute="selective", zero=3)
    op, attn = (_times(_policy(p), tp8) for p in ("op", "attention"))
    assert float(op["tp_s"][0]) > float(attn["tp_s"][0])
    tp1 = Layout(dp=8, micro_batch=1, recompute="selective", zero=3)
    op, attn = (_times(_policy(p), tp1) for p in ("op", "attention"))
    assert np.allclose(op["tp_s"], attn["tp_s"])


def test_policy_leaves_runs_without_selective_recompute_alone():
    for rc in ("none", "full"):
        lay = Layout(dp=8, micro_batch=1, recompute=rc, zero=3)
        op, attn = (_times(_policy(p), lay) for p in ("op", "attention"))
        assert float(op["step_s"][0]) == pytest.approx(float(attn["step_s"][0]))


def _policy(p: str):
    """The torchtitan preset with its per-op policy ("op") or Megatron's attention-core one."""
    return stack("torchtitan", recompute_modules=(p,) if p == "op" else ("core_attn",))
