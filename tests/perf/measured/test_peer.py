"""aiconfigurator-core as a peer estimate of a serving row (optional extra): mapping and reasons."""

import math
from dataclasses import replace

import pytest

from tenfold.perf.measured import peer
from tenfold.perf.validation.serving import load_cases


def _case(row_id: str):
    return next(c for c in load_cases() if c.id == row_id)


@pytest.fixture
def installed():
    pytest.importorskip("aiconfigurator_core")
    pytest.importorskip("pyarrow")


def test_model_names_map_to_shipped_configs():
    assert peer.aic_model("Llama-3.3-70B-Instruct") == "meta-llama/Meta-Llama-3.1-70B"
    assert peer.aic_model("llama3-70b") == "meta-llama/Meta-Llama-3.1-70B"
    assert peer.aic_model("DeepSeek-R1-0528") == "deepseek-ai/DeepSeek-R1"
    assert peer.aic_model("Llama-3.1-405B-Instruct") == "meta-llama/Meta-Llama-3.1-405B"
    assert peer.aic_model("Llama-2-70B") is None


def test_without_the_package_it_says_so(monkeypatch):
    monkeypatch.setattr(peer, "available", lambda: False)
    c = _case("trtllm12-llama33-70b-h200-tp2-fp8-8k1k")
    est = peer.peer_estimate(c.query, metric=c.metric, concurrency=c.concurrency)
    assert math.isnan(est.value) and "not installed" in est.reason


def test_a_prefill_only_throughput_row_is_skipped_with_its_reason():
    c = _case("vllm-dsr1-gb300-ep2-prefill")
    est = peer.peer_estimate(c.query, metric=c.metric, concurrency=c.concurrency, model_name=c.model_name)
    assert math.isnan(est.value) and ("osl - 1" in est.reason or "not installed" in est.reason)


def test_the_rows_deployment_reaches_aiconfigurator(installed):
    """Same model, GPU, TP, formats; max load from its own memory model. Its estimate of this dense row
    (measured 544 tok/s/GPU) lands within 10 %; dropping TP2 to TP1 would not fit the 70B model's
    KV at that load and a BF16 KV cache would halve the batch, so a mapping slip shows."""
    c = _case("trtllm12-llama33-70b-h200-tp2-fp8-8k1k")
    est = peer.peer_estimate(c.query, metric=c.metric, concurrency=None, model_name=c.model_name)
    assert "h200_sxm trtllm" in est.setup and "tp2 dp1" in est.setup and "kv fp8" in est.setup
    assert abs(est.value / c.measured - 1.0) < 0.10
    bf16_kv = peer.peer_estimate(
        replace(c.query, kv_precision="bf16"), metric=c.metric, concurrency=None, model_name=c.model_name
    )
    assert bf16_kv.value < 0.8 * est.value


def test_concurrency_is_split_over_attention_dp_ranks(installed):
    c = _case("trtllm-blog-dsr1-b200-dep8-fp4-16bkv")
    est = peer.peer_estimate(c.query, metric=c.metric, concurrency=c.concurrency, model_name=c.model_name)
    assert f"batch {c.concurrency // 8}/rank" in est.setup and "dp8" in est.setup and "ep8" in est.setup
    assert est.value > 0
