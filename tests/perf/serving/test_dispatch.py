"""DeepEP's MoE token exchange under attention data parallelism (step.py): hierarchical normal kernels for
prefill, per-(token, expert) low-latency kernels for decode, node-limited routing and the two-batch overlap
rule, each against its switched-off form or against DeepEP's published kernel timings.

DeepEP V1 figures (H800, one 400 Gb/s CX7 NIC per GPU, hidden 7168, top-8, FP8 dispatch, BF16 combine;
https://github.com/deepseek-ai/DeepEP/blob/main/docs/legacy.md, "Performance"): normal kernels at 4096
tokens reach 43-58 GB/s of logical RDMA bandwidth, counted over (token, node) pairs including the home
node (its tests/test_internode.py); low-latency kernels at 128 tokens, run over RDMA only, take 155 us
(dispatch) and 273 us (combine) at EP32, 173 us and 314 us at EP64.
"""

from dataclasses import replace

import numpy as np
import pytest

from tenfold.perf import comm
from tenfold.perf.calibration import load_calibration
from tenfold.perf.serving.presets import engine
from tenfold.perf.serving.step import (
    deepep_low_latency_time,
    deepep_normal_time,
    dispatch_time,
    moe_exchange_time,
    serving_rates,
    step_times,
)
from tenfold.perf.specs.precision import get_precision
from tenfold.perf.validation.serving import load_cases, predict_case

CAL = load_calibration(kind="inference")
H, K = 7168, 8
FP8_ROW = H + H // 128 * 4  # FP8 token plus one FP32 scale per 128 values, as DeepEP's tests count it


def h800_links(domain: int = 8) -> comm.Links:
    """DeepEP's test bed: ~160 GB/s NVLink, ~50 GB/s RDMA per GPU, links at their rated speed."""
    return comm.Links(
        domain=domain, up_Bps=160e9, out_Bps=50e9, up_latency_s=3e-6, out_latency_s=8e-6, a2a_efficiency=0.6
    )


@pytest.mark.parametrize(("ep", "low", "high"), [(32, 58e9, 44e9), (64, 51e9, 45e9)])
def test_normal_kernels_send_one_copy_per_node(ep, low, high):
    """4096 tokens at EP32/64 take the time DeepEP's logical bandwidth implies; a copy per remote rank at
    the plain all-to-all efficiency (the previous model) takes more than twice that."""
    links, tokens = h800_links(), 4096
    nodes = comm.groups_touched(ep / 8, K, 4)  # the test routes to top-4 node groups
    fastest, slowest = (tokens * FP8_ROW * nodes / bw for bw in (low, high))
    t = float(
        deepep_normal_time(tokens, ep=ep, topk=K, hidden=H, elem_bytes=FP8_ROW / H, links=links, node_limit=4)
    )
    assert 0.9 * fastest <= t <= 1.1 * slowest
    plain = float(dispatch_time(tokens, ep=ep, topk=K, hidden=H, elem_bytes=FP8_ROW / H, links=links))
    assert plain > 2.0 * slowest


@pytest.mark.parametrize(("ep", "dispatch_us", "combine_us"), [(32, 155, 273), (64, 173, 314)])
def test_low_latency_kernels_send_every_token_expert_pair(ep, dispatch_us, combine_us):
    """Over RDMA only (domain of one GPU, as DeepEP measured), 128 tokens match the published latencies
    within 15 %; the plain all-to-all (one copy per distinct rank at `a2a_efficiency`) misses by > 30 %."""
    links, tokens = h800_links(domain=1), 128
    for elem, us in ((FP8_ROW / H, dispatch_us), (2.0, combine_us)):
        t = float(deepep_low_latency_time(tokens, ep=ep, topk=K, hidden=H, elem_bytes=elem, links=links))
        assert t == pytest.approx(us * 1e-6, rel=0.15)
        plain = float(dispatch_time(tokens, ep=ep, topk=K, hidden=H, elem_bytes=elem, links=links))
        assert plain > 1.3 * us * 1e-6


def test_node_limited_routing_caps_the_network_copies():
    """At EP72 (9 nodes) uniform routing touches 5.1 nodes per token; DeepSeek-V3 routes to at most 4."""
    links = h800_links()
    kw = dict(ep=72, topk=K, hidden=H, elem_bytes=1.0, links=links)
    free = float(deepep_normal_time(16384, **kw))
    limited = float(deepep_normal_time(16384, node_limit=4, **kw))
    assert limited / free == pytest.approx(4 / float(comm.groups_touched(9.0, K)), rel=0.02)


def test_sglang_uses_normal_kernels_for_prefill_and_low_latency_for_decode():
    """`--deepep-mode auto`: steps with prefill tokens take the normal kernels, pure decode the others."""
    from tenfold.perf import load_model
    from tenfold.perf.serving.query import ServingQuery
    from tenfold.perf.serving.results import Deployment

    assert engine("sglang").ep_comm == engine("sglang-tbo").ep_comm == "deepep"
    q = ServingQuery(
        model="deepseek-v3", hardware="h100-sxm", deployment=Deployment(tp=1, dp=32, ep=32),
        input_len=2000, output_len=100, precision="fp8", engine="sglang",
    )  # fmt: skip
    model, links = load_model("deepseek-v3"), CAL.links(q.hardware)
    t = np.array([256.0, 256.0])
    x = moe_exchange_time(
        t, t * 32, model=model, formats=q.formats, ep=32, ep_comm="deepep", links=links, prefill=t > [0, 1e9]
    )
    kw = dict(ep=32, topk=K, hidden=H, links=links)
    fp8 = q.formats.activations.operand_bytes  # DeepSeek's block-scaled FP8: 1 B + its share of scales
    normal = sum(deepep_normal_time(256, elem_bytes=e, node_limit=4, **kw) for e in (fp8, 2.0))
    low = sum(deepep_low_latency_time(256, elem_bytes=e, **kw) for e in (fp8, 2.0))
    assert x[0] == pytest.approx(normal) and x[1] == pytest.approx(low)
    assert normal != pytest.approx(low)


def _case(case_id):
    return {c.id: c for c in load_cases()}[case_id]


def test_two_batch_overlap_hides_the_exchange_behind_the_whole_layer():
    """LMSYS's 96 x H100 P/D prefill (EP32, 16,384 tokens per GPU): the exchange fits under the other
    micro-batch's attention + MoE, so the step is compute alone; the previous rule (hide behind the MoE
    GEMMs only) with per-rank all-to-all put prefill 42-47 % below the measured rate."""
    for cid in ("lmsys-ep96-h100-prefill-1k", "lmsys-ep96-h100-prefill-4k"):
        row = predict_case(_case(cid), CAL)
        assert abs(row.error) < 0.35, (cid, row.error)
        old = replace(
            _case(cid), query=replace(_case(cid).query, engine=engine("sglang-tbo", ep_comm="alltoall"))
        )
        assert predict_case(old, CAL).error < row.error - 0.1


def _decode_step(**kw):
    """One pure-decode step of LMSYS's 72 x H100 decode setup (EP72, 256 sequences per GPU)."""
    c = _case("lmsys-ep96-h100-decode-2k")
    q = c.query
    rates = serving_rates(q.hardware, q.formats, CAL, get_precision("bf16"))
    return step_times(
        q.model, formats=q.formats, rates=rates, links=CAL.links(q.hardware), tp=1, dp=72, ep=72,
        b=256.0, p=0.0, q=1.0, ctx_dec=2050.0, isl=2000, ep_comm="deepep", **kw,
    )  # fmt: skip


def test_two_batch_overlap_rule_covers_attention_and_kernel_launches():
    """Under two-batch overlap the exchange hides behind the other micro-batch's whole layer (attention
    too: it would stay exposed behind the MoE GEMMs alone), and each micro-batch launches the layer's
    kernels, doubling the fixed per-kernel cost."""
    off, on = _decode_step(ep_overlap=False), _decode_step(ep_overlap=True)
    layers = _case("lmsys-ep96-h100-decode-2k").query.model.moe_layers
    exchange = float(off["ep_s"]) / layers
    assert exchange > float(off["ffn_s"]) / layers  # more than the MoE GEMMs alone could hide
    # hidden per MoE layer: the projections and attention of one layer plus that layer's MoE FFN, which
    # lies between nothing and the whole FFN time spread over the MoE layers (dense layers included)
    n_all = _case("lmsys-ep96-h100-decode-2k").query.model.layers
    attn = float(off["attn_proj_s"] + off["attention_s"]) / n_all
    exposed = float(on["ep_s"]) / layers
    assert max(exchange - attn - float(off["ffn_s"]) / layers, 0.0) - 1e-9 <= exposed
    assert exposed <= exchange - attn + 1e-9 and exposed < exchange
    q = _case("lmsys-ep96-h100-decode-2k").query
    fixed = serving_rates(q.hardware, q.formats, CAL, get_precision("bf16")).step_s
    assert float(on["overhead_s"]) - fixed == pytest.approx(2.0 * (float(off["overhead_s"]) - fixed))
