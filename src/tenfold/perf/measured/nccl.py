"""Collective bus bandwidth from measured NCCL tables (aiconfigurator-core, newest NCCL release per system).

Bus bandwidth follows nccl-tests' convention (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
algorithm bandwidth S/t times 2(n-1)/n for all-reduce and (n-1)/n for all-gather, reduce-scatter and
all-to-all, where S is the message size (all-gather: the gathered output; reduce-scatter: the input).
It is comparable to a link's per-direction bandwidth.

Between measured sizes the latency is interpolated linearly in log(size)-log(latency); below the smallest
size the latency stays at the smallest size's (latency-bound), above the largest the bus bandwidth stays at
the largest size's. GPU counts are only those measured (2, 4, 8 on HGX systems; 2 and 4 on GB200/GB300,
whose tables come from 4-GPU trays): other counts give None.
"""

from __future__ import annotations

import numpy as np

from tenfold.perf.measured.tables import comm_system, nccl_table

OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall")


def bus_factor(op: str, num_gpus: int) -> float:
    """nccl-tests' bus-bandwidth factor of `op` over `num_gpus` ranks."""
    n = float(num_gpus)
    return 2.0 * (n - 1.0) / n if op == "all_reduce" else (n - 1.0) / n


def collective_seconds(gpu: str, op: str, num_gpus: int, message_bytes: float) -> float | None:
    """Measured seconds of one 16-bit NCCL `op` of `message_bytes` over `num_gpus` GPUs (None: no table)."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    if message_bytes <= 0:
        raise ValueError(f"message_bytes must be > 0, got {message_bytes}")
    system = comm_system(gpu)
    table = nccl_table(system, op) if system else None
    if table is None or num_gpus not in table.curves:
        return None
    sizes, lat = table.curves[num_gpus]
    if message_bytes <= sizes[0]:
        return float(lat[0])
    if message_bytes >= sizes[-1]:
        return float(lat[-1] * message_bytes / sizes[-1])
    return float(np.exp(np.interp(np.log(message_bytes), np.log(sizes), np.log(lat))))


def collective_bus_bandwidth(gpu: str, op: str, num_gpus: int, message_bytes: float) -> float | None:
    """NCCL bus bandwidth (bytes/s) of `op` ("all_reduce", "all_gather", "reduce_scatter", "alltoall")
    over `num_gpus` GPUs of tenfold hardware `gpu` at `message_bytes`; None where no table covers it."""
    t = collective_seconds(gpu, op, num_gpus, message_bytes)
    if t is None:
        return None
    return bus_factor(op, num_gpus) * message_bytes / t
