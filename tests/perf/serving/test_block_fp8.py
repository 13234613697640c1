"""Block-scaled FP8 (DeepSeek-V3/R1's 128 x 128 scales) on Hopper: the CUDA cores apply the scales inside
the GEMM, which costs a share of the FP8 tensor rate unless the engine's kernels overlap it (DeepGEMM)."""

from __future__ import annotations

import pytest

from tenfold.perf.calibration import load_calibration
from tenfold.perf.serving.query import ServingQuery
from tenfold.perf.serving.step import serving_rates
from tenfold.perf.specs import precision
from tenfold.perf.specs.hardware import load_hardware
from tenfold.perf.specs.precision import block_scale_mma_fraction, get_precision
from tenfold.perf.validation.serving import load_cases, predict_case

BLOCK = get_precision("fp8_block")
CAL = load_calibration(kind="inference")


def _query(model: str, gpu: str, eng: str, kv: str = "fp8") -> ServingQuery:
    return ServingQuery(
        model=model,
        hardware=gpu,
        input_len=1024,
        output_len=1024,
        precision="fp8",
        kv_precision=kv,
        engine=eng,
    )


def test_fraction_is_hopper_only_and_follows_the_tensor_rate_per_sm():
    h200, h100, h20 = (load_hardware(n) for n in ("h200", "h100-sxm", "h20"))
    assert block_scale_mma_fraction(BLOCK, h200) == pytest.approx(0.55)
    assert block_scale_mma_fraction(BLOCK, h100) == pytest.approx(0.55)
    # H20's tensor cores are ~4x slower per SM, so the fixed promotion stall is a smaller share
    assert 0.75 < block_scale_mma_fraction(BLOCK, h20) < 0.9
    assert block_scale_mma_fraction(BLOCK, load_hardware("b200")) == 1.0  # block-scaled MMA in hardware
    assert block_scale_mma_fraction(get_precision("fp8"), h200) == 1.0  # per-tensor scales: no promotion


def test_fraction_matches_nvidias_measured_moe_tables():
    """The fraction against the measured block-scaled / per-tensor FP8 MoE layers (large shapes, TRT-LLM
    1.3.0rc20 on H200), where aiconfigurator-core is installed."""
    from tenfold.perf.measured.tables import data_root

    root = data_root()
    path = root / "h200_sxm/moe/trtllm/1.3.0rc20/moe_perf.parquet" if root else None
    if path is None or not path.exists():
        pytest.skip("aiconfigurator-core tables not installed")
    pq = pytest.importorskip("pyarrow.parquet")
    best: dict[tuple, dict[str, float]] = {}  # fastest FLOP/s per expert shape and operand type
    for r in pq.read_table(path).to_pylist():
        rows_per_expert = r["num_tokens"] * r["topk"] / r["num_experts"]
        if r["distribution"] != "balanced" or r["hidden_size"] < 4096 or rows_per_expert < 1024:
            continue
        width = r["inter_size"] / r["moe_tp_size"]
        flops = 6.0 * r["num_tokens"] * r["topk"] * r["hidden_size"] * width / r["moe_ep_size"]
        lat_ms = next(v for k, v in r.items() if "lat" in k)
        slot = best.setdefault((r["hidden_size"], r["inter_size"], r["num_experts"], r["topk"]), {})
        slot[r["moe_dtype"]] = max(slot.get(r["moe_dtype"], 0.0), flops / lat_ms)
    ratios = [d["fp8_block"] / d["fp8"] for d in best.values() if "fp8" in d and "fp8_block" in d]
    assert len(ratios) >= 4
    measured = sum(ratios) / len(ratios)
    assert abs(block_scale_mma_fraction(BLOCK, load_hardware("h200")) - measured) < 0.08


def test_fp8_means_the_block_scaled_checkpoint_for_deepseek_only():
    q = _query("deepseek-v3", "h200", "trtllm", kv="auto")
    assert q.formats.weights.name == "fp8_block" and q.formats.attention.name == "fp8_block"
    assert any("fp8_block" in n for n in q.notes)
    assert q.formats.kv == "bf16"  # deepseek-ai's checkpoint sets no kv_cache_quant_algo
    assert _query("llama3-70b", "h200", "trtllm").formats.weights.name == "fp8"


def test_rates_pay_the_promotion_on_hopper_unless_the_engine_hides_it():
    bf16 = get_precision("bf16")

    def ffn(model: str, gpu: str, eng: str) -> float:
        q = _query(model, gpu, eng)
        return serving_rates(q.hardware, q.formats, CAL, bf16).ffn_flops

    per_tensor = ffn("llama3-70b", "h200", "trtllm")
    assert ffn("deepseek-v3", "h200", "trtllm") == pytest.approx(0.55 * per_tensor)
    assert ffn("deepseek-v3", "h200", "sglang") == pytest.approx(per_tensor)  # DeepGEMM overlaps it
    assert ffn("deepseek-v3", "b200", "trtllm") == pytest.approx(ffn("llama3-70b", "b200", "trtllm"))


def test_deepseek_r1_h200_dep8_row_needs_the_mechanism(monkeypatch):
    """TensorRT-LLM perf overview, DeepSeek-R1 FP8 on 8 x H200 (DEP8, 1k/1k): the model without the
    block-scale cost was 46 % too fast; with it the row is within 20 %."""
    case = {c.id: c for c in load_cases()}["trtllm12-dsr1-h200-dep8-fp8-1k1k"]
    with_it = predict_case(case, CAL)
    assert abs(with_it.error) < 0.20
    monkeypatch.setattr(precision, "BLOCK_SCALE_MMA_FRACTION", {})
    without = predict_case(case, CAL)
    assert without.error > 0.30
