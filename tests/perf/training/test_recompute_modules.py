"""Selective recomputation prices the modules Megatron-Core's `recompute_modules` name."""

from dataclasses import replace

import numpy as np
import pytest

from tenfold.perf import Layout, load_hardware, load_model
from tenfold.perf.calibration import load_calibration
from tenfold.perf.specs.precision import get_precision
from tenfold.perf.training.compute import (
    gemm_times,
    layer_gemms,
    layer_times,
    memory_op_bytes,
    module_recompute,
    rates,
)
from tenfold.perf.training.grid import PlanGrid
from tenfold.perf.training.stack import stack
from tenfold.perf.training.step import plan_times

SEQ = 4096


def _setup(model_name="deepseek-v3", *, moe=True, precision="bf16"):
    model = load_model(model_name)
    r = rates(load_hardware("h100-sxm"), get_precision(precision), load_calibration())
    kw = dict(
        moe=moe, tokens=np.array([float(SEQ)]), tp=np.array([1.0]), sp=np.array([False]), ep=np.array([8.0])
    )
    lt = layer_times(model, seq_len=SEQ, flash=True, r=r, low=precision != "bf16", **kw)
    return model, r, lt, kw


def _recompute(modules, r, lt):
    return float(module_recompute(lt, modules, r=r)[0])


def test_core_attn_alone_is_the_attention_core_forward():
    _, r, lt, _ = _setup()
    assert _recompute(("core_attn",), r, lt) == pytest.approx(float(lt.attn_f[0]))


def test_mla_up_proj_runs_the_two_up_projections_and_rope_again():
    model, r, lt, kw = _setup()
    ups = [
        g
        for g in layer_gemms(model, moe=True, tokens=kw["tokens"], tp=kw["tp"], ep=kw["ep"])
        if g.part == "mla_up"
    ]
    assert len(ups) == 2  # q and kv up-projections (DeepSeek-V3 has a q LoRA rank)
    gemm = sum(float(gemm_times(g.M, g.N, g.K, r, low=False)[0][0]) for g in ups)
    rope = float(memory_op_bytes(model, moe=True, tokens=kw["tokens"], tp=kw["tp"], sp=kw["sp"])["rope"][0])
    expect = gemm + rope / r.hbm_Bps + r.kernel_s
    assert _recompute(("mla_up_proj",), r, lt) == pytest.approx(expect)
    # a model without MLA has nothing to recompute there
    gqa, r2, lt2, kw2 = _setup("llama3-70b", moe=False)
    assert _recompute(("mla_up_proj",), r2, lt2) == pytest.approx(
        float(memory_op_bytes(gqa, moe=False, tokens=kw2["tokens"], tp=kw2["tp"], sp=kw2["sp"])["rope"][0])
        / r2.hbm_Bps
        + r2.kernel_s
    )


def test_mlp_recomputes_dense_layers_only():
    """Megatron-Core's transformer_layer.py sets recompute_mlp only `if not self.is_moe_layer`."""
    model, r, lt, kw = _setup()
    assert _recompute(("mlp",), r, lt) == pytest.approx(_recompute(("moe_act",), r, lt))
    dense_kw = dict(kw, moe=False)
    lt_dense = layer_times(model, seq_len=SEQ, flash=True, r=r, low=False, **dense_kw)
    ffn = [
        g
        for g in layer_gemms(model, moe=False, tokens=kw["tokens"], tp=kw["tp"], ep=kw["ep"])
        if g.part == "ffn"
    ]
    gemm = sum(float(gemm_times(g.M, g.N, g.K, r, low=False)[0][0]) for g in ffn)
    assert _recompute(("mlp",), r, lt_dense) > gemm


def test_the_modules_order_by_cost():
    """Norms and the MoE activation are cheap, the MLA up-projections dearer, the whole MoE layer dearest."""
    _, r, lt, _ = _setup()
    cost = {m: _recompute((m,), r, lt) for m in ("layernorm", "moe_act", "mla_up_proj", "moe")}
    assert cost["layernorm"] < cost["mla_up_proj"] < cost["moe"]
    assert cost["moe_act"] < cost["moe"]
    assert cost["moe"] < float(lt.fwd[0])
    both = _recompute(("layernorm", "mla_up_proj"), r, lt)
    assert both == pytest.approx(cost["layernorm"] + cost["mla_up_proj"])


def test_fp8_recompute_quantizes_the_recomputed_gemm_inputs_again():
    model, r, lt, kw = _setup(precision="fp8")
    assert r.quant_bytes > 0
    with_quant = _recompute(("mla_up_proj",), r, lt)
    without = _recompute(("mla_up_proj",), replace(r, quant_bytes=0.0), lt)
    ups = [
        g
        for g in layer_gemms(model, moe=True, tokens=kw["tokens"], tp=kw["tp"], ep=kw["ep"])
        if g.part == "mla_up"
    ]
    elems = sum(float(g.M[0]) * g.K for g in ups)
    assert with_quant - without == pytest.approx(elems * r.quant_bytes / r.hbm_Bps)


def _step(modules, recompute="selective"):
    sw = stack("megatron-core", recompute_modules=modules, ep_overlap=False)
    lay = Layout(tp=1, pp=1, dp=8, ep=8, micro_batch=1, recompute=recompute)
    return plan_times(
        load_model("deepseek-v3"),
        load_hardware("h100-sxm"),
        PlanGrid.from_layouts([lay], default_zero=sw.default_zero),
        precision=get_precision("bf16"),
        software=sw,
        calibration=load_calibration(),
        seq_len=SEQ,
        global_batch=64,
    )


def test_the_step_charges_the_named_modules():
    cheap, attn, moe = _step(("layernorm",)), _step(("core_attn",)), _step(("moe",))
    assert float(cheap["recompute_s"][0]) < float(attn["recompute_s"][0]) < float(moe["recompute_s"][0])
    # recomputing the MoE layer repeats its dispatch and combine as well
    assert float(moe["ep_s"][0]) > float(attn["ep_s"][0])
    assert float(cheap["ep_s"][0]) == pytest.approx(float(attn["ep_s"][0]))
    # without selective recomputation the modules change nothing
    assert float(_step(("moe",), "none")["step_s"][0]) == pytest.approx(
        float(_step(("layernorm",), "none")["step_s"][0])
    )
