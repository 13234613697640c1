"""KV-cache bytes against worked examples from the published shapes (Llama 3 herd paper Table 3, the
DeepSeek-V3 report), and the TP rules (sources in tenfold.perf.serving.kvcache)."""

import pytest

from tenfold.perf import load_model
from tenfold.perf.serving.kvcache import (
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_element_bytes,
    stored_tokens,
    window_layers,
)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("llama3-70b", 327_680),  # 2 * 80 layers * 8 KV heads * 128 * 2 B
        ("llama3.1-405b", 516_096),  # 2 * 126 * 8 * 128 * 2 B
        ("deepseek-v3", 70_272),  # MLA: 61 * (512 latent + 64 RoPE) * 2 B
        ("llama3-8b", 131_072),  # 2 * 32 * 8 * 128 * 2 B
    ],
)
def test_bf16_bytes_per_token_match_the_research_examples(model, expected):
    assert kv_bytes_per_token(load_model(model), "bf16") == expected


def test_element_bytes_per_format():
    assert kv_element_bytes("bf16") == kv_element_bytes("fp16") == 2.0
    assert kv_element_bytes("fp8") == 1.0
    assert kv_element_bytes("nvfp4") == pytest.approx(4.5 / 8)  # E2M1 + one E4M3 scale per 16
    with pytest.raises(ValueError, match="KV-cache precision"):
        kv_element_bytes("int3")


@pytest.mark.parametrize("model", ["llama3-70b", "deepseek-v3", "qwen3-30b-a3b"])
def test_formats_scale_the_cache(model):
    m = load_model(model)
    bf16 = kv_bytes_per_token(m, "bf16")
    assert kv_bytes_per_token(m, "fp8") == bf16 / 2
    assert kv_bytes_per_token(m, "nvfp4") == pytest.approx(bf16 * 0.5625 / 2)


def test_tensor_parallel_splits_kv_heads_until_one_per_rank():
    m = load_model("llama3-70b")  # 8 KV heads
    full = kv_bytes_per_token(m, "bf16")
    assert kv_bytes_per_token(m, "bf16", tp=2) == full / 2
    assert kv_bytes_per_token(m, "bf16", tp=8) == full / 8
    # TP16 > 8 KV heads: each rank still holds one head (replicated), not half a head
    assert kv_bytes_per_token(m, "bf16", tp=16) == full / 8


def test_mla_latent_is_replicated_under_tp():
    m = load_model("deepseek-v3")
    assert kv_bytes_per_token(m, "fp8", tp=8) == kv_bytes_per_token(m, "fp8", tp=1) == 61 * 576


def test_sliding_window_layers_store_only_the_window():
    m = load_model("gpt-oss-120b")  # 36 layers, half with a 128-token window, 8 KV heads of 64
    assert window_layers(m) == 18
    assert stored_tokens(m, 100) == 36 * 100  # shorter than the window: every layer stores all
    assert stored_tokens(m, 4096) == 18 * 4096 + 18 * 128
    per_layer = 2 * 8 * 64 * 1.0
    assert kv_bytes_per_sequence(m, "fp8", 4096) == pytest.approx((18 * 4096 + 18 * 128) * per_layer)
    dense = load_model("llama3-8b")
    assert kv_bytes_per_sequence(dense, "bf16", 1000) == 1000 * kv_bytes_per_token(dense, "bf16")
