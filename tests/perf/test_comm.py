"""alpha-beta collectives on the two-tier topology."""

import pytest

from tenfold.perf.comm import (
    Links,
    all_reduce_time,
    all_to_all_time,
    moe_dispatch_bytes,
    p2p_time,
    ranks_per_domain,
    reduce_scatter_time,
)

L = Links(domain=8, up_Bps=400e9, out_Bps=50e9, up_latency_s=0.0, out_latency_s=0.0, a2a_efficiency=1.0)


def test_ring_inside_one_domain():
    s = 1e9
    assert float(reduce_scatter_time(s, 8, 1, L)) == pytest.approx(7 / 8 * s / 400e9)
    assert float(all_reduce_time(s, 8, 1, L)) == pytest.approx(2 * 7 / 8 * s / 400e9)  # busbw definition
    assert float(reduce_scatter_time(s, 1, 1, L)) == 0.0


def test_group_across_domains_is_hierarchical():
    s = 1e9
    # 16 ranks at stride 8: one per domain, all traffic on the NIC
    assert float(reduce_scatter_time(s, 16, 8, L)) == pytest.approx(15 / 16 * s / 50e9)
    # 64 ranks at stride 1: 8 per domain, then 8 domains on 1/8 of the data
    t = float(reduce_scatter_time(s, 64, 1, L))
    assert t == pytest.approx(7 / 8 * s / 400e9 + 7 / 8 * s / 8 / 50e9)
    assert float(ranks_per_domain(64, 4, 8)) == 2.0


def test_alltoall_and_dedup():
    tokens, k, h = 4096, 8, 7168
    i_plain, o_plain = moe_dispatch_bytes(
        tokens, topk=k, ep=64, stride=1, hidden=h, elem_bytes=1.0, links=L, dedup=False
    )
    assert float(i_plain + o_plain) == pytest.approx(tokens * k * h * 63 / 64)
    _i_d, o_d = moe_dispatch_bytes(
        tokens, topk=k, ep=64, stride=1, hidden=h, elem_bytes=1.0, links=L, dedup=True, node_limit=4
    )
    assert float(o_d) < float(o_plain)  # each token crosses the network at most once per remote domain
    assert float(o_d) <= tokens * h * 4 + 1e-6
    t = float(all_to_all_time(1e8, 1e9, 64, L))
    assert t == pytest.approx(max(1e8 / 400e9, 1e9 / 50e9))


def test_p2p_picks_the_tier():
    assert float(p2p_time(1e9, 4, L)) == pytest.approx(1e9 / 400e9)
    assert float(p2p_time(1e9, 8, L)) == pytest.approx(1e9 / 50e9)


def test_fused_dispatch_runs_at_link_efficiency():
    slow = Links(
        domain=8, up_Bps=400e9, out_Bps=50e9, up_latency_s=1e-6, out_latency_s=5e-6, a2a_efficiency=0.5
    )
    plain = float(all_to_all_time(1e8, 1e9, 64, slow))
    fused = float(all_to_all_time(1e8, 1e9, 64, slow, fused=True))
    assert plain == pytest.approx(1e9 / 25e9 + 5e-6)  # NCCL all-to-all at a2a_efficiency
    assert fused == pytest.approx(1e9 / 50e9 + 5e-6)  # DeepEP / HybridEP at the NIC's rate
    assert float(all_to_all_time(1e8, 1e9, 1, slow, fused=True)) == 0.0
