"""Collective costs on a two-tier topology: a scale-up domain (NVLink/xGMI, `domain` GPUs) joined by a
scale-out network (one NIC per GPU, rail-optimised, full bisection).

alpha-beta costs (Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication Operations in
MPICH", IJHPCA 2005; NCCL's bus bandwidth, https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
a ring all-gather or reduce-scatter of an S-byte buffer over N ranks takes α(N-1) + (N-1)/N·S/B;
all-reduce = RS + AG; an all-to-all sends (N-1)/N of its S bytes. A group that spans several domains runs
hierarchically (Tutel, arXiv 2206.03382; NCCL's tree/NVLS): inside the domain first, then across domains on
1/n_in of the data, every GPU of a domain using its own NIC concurrently. Bandwidths are per GPU per
direction and are multiplied by the calibrated per-tier efficiency.

Placement: ranks are laid out TP innermost, then CP, then DP (with EP carved out of CP·DP·TP), then PP
outermost (Megatron-LM's default order). A group of n ranks at stride s puts min(n, max(1, D/s)) of them in
each domain of D GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Links:
    """Effective link parameters for one cluster (SI units, efficiencies applied).

    Fields:
        domain: GPUs per scale-up domain used for placement.
        up_Bps, out_Bps: achieved per-GPU per-direction bandwidth inside / across domains.
        up_latency_s, out_latency_s: per-step latency α of a ring step inside / across domains.
        a2a_efficiency: all-to-all bandwidth relative to ring collectives (many small messages).
    """

    domain: int
    up_Bps: float
    out_Bps: float
    up_latency_s: float
    out_latency_s: float
    a2a_efficiency: float


def ranks_per_domain(n, stride, domain: int):
    """How many members of a group (size n, rank stride `stride`) share one scale-up domain."""
    n, stride = np.asarray(n, dtype=float), np.asarray(stride, dtype=float)
    return np.clip(np.floor(domain / stride), 1.0, n)


def reduce_scatter_time(size_bytes, n, stride, links: Links):
    """Ring reduce-scatter (or all-gather) of a `size_bytes` buffer over n ranks at `stride`."""
    size, n = np.asarray(size_bytes, dtype=float), np.asarray(n, dtype=float)
    n_in = ranks_per_domain(n, stride, links.domain)
    n_out = np.maximum(n / n_in, 1.0)
    intra = (n_in - 1) / n_in * size / links.up_Bps + (n_in - 1) * links.up_latency_s
    inter = (n_out - 1) / n_out * (size / n_in) / links.out_Bps + (n_out - 1) * links.out_latency_s
    return np.where(n > 1, intra + inter, 0.0)


all_gather_time = reduce_scatter_time


def all_reduce_time(size_bytes, n, stride, links: Links):
    """Ring all-reduce = reduce-scatter + all-gather (2(N-1)/N·S/B)."""
    return 2.0 * reduce_scatter_time(size_bytes, n, stride, links)


def all_to_all_time(intra_bytes, inter_bytes, n, links: Links, *, fused: bool = False):
    """An all-to-all whose per-GPU payload splits into bytes staying in the domain and bytes leaving it;
    the two tiers run concurrently, so the slower one sets the time.

    A plain (NCCL) all-to-all runs at `a2a_efficiency` of the ring-collective bandwidth. `fused`: the
    deduplicating MoE dispatch kernels (DeepEP, HybridEP) instead stream large per-domain chunks and
    reach about the link rate on both tiers: DeepEP's README reports 153-158 GB/s over H800 NVLink and
    43-58 GB/s per 400 Gb/s RDMA NIC for its normal kernels (https://github.com/deepseek-ai/DeepEP,
    "Normal kernels with NVLink and RDMA forwarding"), so they get the tiers' own efficiencies."""
    n = np.asarray(n, dtype=float)
    eff = 1.0 if fused else links.a2a_efficiency
    t_in = np.asarray(intra_bytes, dtype=float) / (links.up_Bps * eff) + links.up_latency_s
    t_out = np.asarray(inter_bytes, dtype=float) / (links.out_Bps * eff) + links.out_latency_s
    t_out = np.where(np.asarray(inter_bytes) > 0, t_out, 0.0)
    return np.where(n > 1, np.maximum(t_in, t_out), 0.0)


def groups_touched(n, topk: int, limit: int = 0):
    """Expected distinct members of `n` equal groups (ranks or scale-up domains) that one token's `topk`
    experts fall in under uniform routing, n·(1 - (1 - 1/n)^k), capped at `limit` (node-limited routing,
    DeepSeek-V3 arXiv 2412.19437 §2.1.2: at most M = 4 nodes per token; 0 = no cap)."""
    n = np.asarray(n, dtype=float)
    miss = np.ones_like(n)
    for _ in range(topk):  # (1 - 1/n)^k by multiplication: exact and identical for any array length
        miss = miss * (1.0 - 1.0 / n)
    touched = n * (1.0 - miss)
    return np.minimum(touched, limit) if limit else touched


def moe_dispatch_bytes(
    tokens,
    *,
    topk: int,
    ep,
    stride,
    hidden: int,
    elem_bytes: float,
    links: Links,
    dedup: bool,
    node_limit: int = 0,
):
    """(intra, inter) bytes one GPU sends to dispatch `tokens` tokens to their top-k experts over an EP
    group of `ep` ranks at `stride` (balanced routing, as in the force-balanced Megatron-Bridge runs).

    Plain all-to-all sends one copy per (token, expert). With deduplication (DeepEP / HybridEP, and
    DeepSeek-V3's node-limited routing, arXiv 2412.19437 §3.2.2) a token crosses the network once per
    remote domain that holds one of its experts and fans out over the scale-up links there. Under uniform
    routing a token touches E[D] = n_dom·(1 - (1 - 1/n_dom)^k) domains (capped by `node_limit`).
    """
    tokens, ep = np.asarray(tokens, dtype=float), np.asarray(ep, dtype=float)
    n_in = ranks_per_domain(ep, stride, links.domain)
    copies = tokens * topk * hidden * elem_bytes
    intra_plain = copies * (n_in - 1) / ep
    inter_plain = copies * (ep - n_in) / ep
    if not dedup:
        return intra_plain, inter_plain
    n_dom = np.maximum(ep / n_in, 1.0)
    touched = groups_touched(n_dom, topk, node_limit)
    remote = touched * (n_dom - 1.0) / n_dom  # the home domain's share needs no network
    inter = tokens * hidden * elem_bytes * remote
    # Each remote copy fans out to the GPUs of its domain over the scale-up links.
    fan_out = inter_plain * (n_in - 1) / n_in
    return intra_plain + fan_out, np.minimum(inter, inter_plain)


def p2p_time(size_bytes, stride, links: Links):
    """One point-to-point send between pipeline neighbours at rank distance `stride`."""
    size, stride = np.asarray(size_bytes, dtype=float), np.asarray(stride, dtype=float)
    inside = stride < links.domain
    return np.where(
        inside, size / links.up_Bps + links.up_latency_s, size / links.out_Bps + links.out_latency_s
    )
