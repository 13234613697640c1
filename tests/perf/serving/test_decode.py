"""The small-batch decode step of MLA/MoE models (issue 16): grouped GEMMs stream the touched experts'
weights concurrently (no serial per-expert cost), MLA's down-projections are replicated under attention
TP, and the published batch-1 DeepSeek-R1 latencies on 8 x B200 are met."""

import numpy as np
import pytest

from tenfold.perf import Deployment, estimate_inference, load_model
from tenfold.perf.calibration import load_calibration
from tenfold.perf.measured import tables
from tenfold.perf.serving.step import attention_params_per_rank, experts_touched
from tenfold.perf.validation.serving import load_cases, predict_case


def _ffn_ms(concurrency: int, hw: str = "b200") -> float:
    """FFN part of one decode step of DeepSeek-R1 FP8 under TP8 with (almost) no prefill in the step."""
    est = estimate_inference(
        "deepseek-r1",
        hw,
        Deployment(tp=8),
        input_len=1,
        output_len=8192,
        concurrency=concurrency,
        precision="fp8",
        kv_precision="fp8",
    )
    return est.breakdown.ffn_s * 1e3


def _expert_read_ms(tokens: float, hw_Bps: float) -> float:
    """Time to stream the touched experts' FP8 weights of all MoE layers once, per GPU under expert TP8."""
    m = load_model("deepseek-r1")
    touched = experts_touched(tokens, experts_local=m.experts, topk=m.topk, experts=m.experts)
    return float(touched * m.expert_params() / 8 * 1.0 * m.moe_layers / hw_Bps * 1e3)


def test_touched_experts_cost_their_bytes_not_a_serial_fixed_cost():
    """From 1 to 32 decoding sequences the FFN time grows by the extra touched experts' weight reads
    (at the calibrated HBM rate), not by a fixed cost per touched expert paid one after another."""
    cal = load_calibration(kind="inference")
    bw = 8e12 * cal.hbm_efficiency  # B200 HBM3e, 8 TB/s (catalog)
    grow = _ffn_ms(32) - _ffn_ms(1)
    reads = _expert_read_ms(32, bw) - _expert_read_ms(1, bw)
    # the extra bytes set the growth; activations, routing and the permutation traffic add a little
    assert reads <= grow <= 1.25 * reads, (grow, reads)


def _trtllm_moe_us(tokens: int) -> float:
    """Measured latency (us) of one DeepSeek-R1 MoE layer (h 7168, 2048-wide experts, top-8 of 256) in
    block-scaled FP8 on B200 under expert TP8 with balanced routing, TensorRT-LLM's kernels (fastest
    version and kernel): aiconfigurator-core's `moe_perf.parquet`."""
    import pyarrow.parquet as pq

    best = np.inf
    for path in sorted((tables.data_root() / "b200_sxm" / "moe" / "trtllm").glob("*/moe_perf.parquet")):
        t = pq.read_table(path).to_pandas()
        sel = t[
            (t.hidden_size == 7168)
            & (t.inter_size == 2048)
            & (t.topk == 8)
            & (t.num_experts == 256)
            & (t.moe_dtype == "fp8_block")
            & (t.moe_tp_size == 8)
            & (t.moe_ep_size == 1)
            & (t.distribution == "balanced")
            & (t.num_tokens == tokens)
        ]
        if len(sel):
            best = min(best, float(sel.latency.min()) * 1e3)
    return best


def test_cost_per_touched_expert_matches_the_measured_grouped_gemm():
    """Silicon-measured TensorRT-LLM MoE layers (aiconfigurator-core, where installed) on B200 under TP8
    grow by ~1.3 us per extra touched expert from 1 to 32 tokens (balanced routing: 8 -> 256 experts).
    The model's growth per extra touched expert must be within 2x of that; the old serial 3.5 us per
    touched expert on top of the weight reads made it ~4.3 us."""
    pytest.importorskip("aiconfigurator_core")
    pytest.importorskip("pyarrow")
    measured = (_trtllm_moe_us(32) - _trtllm_moe_us(1)) / (256 - 8)
    if not np.isfinite(measured):
        pytest.skip("the installed aiconfigurator-core has no DeepSeek-R1 FP8 TP8 MoE table for B200")
    m = load_model("deepseek-r1")
    extra = experts_touched(32, experts_local=256, topk=8, experts=256) - 8.0
    model_us = (_ffn_ms(32) - _ffn_ms(1)) * 1e3 / m.moe_layers / extra
    assert measured / 2 <= model_us <= 2 * measured, (model_us, measured)


def test_mla_down_projections_are_replicated_under_attention_tp():
    """TensorRT-LLM runs DeepSeek's Fuse_A GEMM (W_DQ, W_DKV, W_KR) data-parallel, i.e. with the whole
    weight on every rank (tech blog 1, "Parallelism Strategy"), as SGLang's ReplicatedLinear does."""
    m = load_model("deepseek-r1")
    fused_a = m.hidden * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim)
    total = m.attention_matmul_params()
    assert attention_params_per_rank(m, 1) == total
    assert attention_params_per_rank(m, 8) == pytest.approx((total - fused_a) / 8 + fused_a)
    gqa = load_model("llama3-70b")
    assert attention_params_per_rank(gqa, 8) == gqa.attention_matmul_params() / 8
    # the step reads them: at batch 1 the projections take at least the replicated bytes' time
    est = estimate_inference(
        "deepseek-r1", "b200", Deployment(tp=8), input_len=1, output_len=8192, concurrency=1, precision="fp8"
    )
    cal = load_calibration(kind="inference")
    floor = m.layers * ((total - fused_a) / 8 + fused_a) / (8e12 * cal.hbm_efficiency)
    assert est.breakdown.attn_proj_s >= floor
    assert est.breakdown.attn_proj_s > m.layers * total / 8 / (8e12 * cal.hbm_efficiency) * 1.3


@pytest.mark.parametrize("tag", ["nomtp", "mtp1", "mtp2", "mtp3", "mtp4", "mtp5"])
def test_published_batch_one_latency_on_b200(tag):
    """TensorRT-LLM tech blog 1's single-user DeepSeek-R1 runs on 8 x B200 (TP8, experts TP2 x EP4, with
    0-5 MTP draft layers): tokens/s per user within 35 % (the old model was 32-63 % too fast). The shipped
    fit is now 23-34 % too slow on them: its per-kernel cost sits at its 10 us bound because the max-load
    long-output rows use it for decode time the model lacks (docs/inference.md, "Largest errors")."""
    case = next(c for c in load_cases() if c.id == f"trtllm-blog1-dsr1-b200-tp8ep4-{tag}")
    row = predict_case(case, load_calibration(kind="inference"))
    assert abs(row.error) < 0.35, (row.predicted, row.measured)
